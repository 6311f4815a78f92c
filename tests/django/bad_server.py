"""A server whose tool asks with a nested model: the system check must refuse it."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel

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
