"""A server whose tool asks with a nested model, and whose resource and prompt carry a
permission (checked for tools only): the system checks must refuse them."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel

from mcp_django import permission_required, user_passes_test

mcp = MCPServer("Bad forms")


class Address(BaseModel):
    street: str


class Customer(BaseModel):
    name: str
    address: Address


@mcp.tool()
async def register(ctx: Context) -> str:
    answer = await ctx.elicit("Who are you?", schema=Customer)
    return answer.action


@mcp.resource("shop://takings")
@permission_required("auth.view_user")
def takings() -> str:
    return "152.15 EUR"


@user_passes_test(lambda user: user.is_staff)
@mcp.prompt()
def audit() -> str:
    return "Audit the takings."


@user_passes_test  # type: ignore[arg-type]  # its test forgotten: the tool is taken for the test
@mcp.tool()
def payroll() -> str:
    return "everyone's salaries"
