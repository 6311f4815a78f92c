"""A server whose tools are offered by Django permission: the shop's stock to everyone,
restocking to users with ``auth.change_user`` (a permission every project has), the report to
staff, and the lounge to nobody: its check raises."""

from __future__ import annotations

from mcp.server import MCPServer

from mcp_django import permission_required, user_passes_test

mcp = MCPServer("Guarded shop")


@mcp.tool()
def stock() -> str:
    return "12 teapots"


@mcp.tool()
@permission_required("auth.change_user")
def restock(units: int) -> str:
    return f"restocked {units}"


@user_passes_test(lambda user: user.is_staff)
@mcp.tool()
def report() -> str:
    return "sales are up"


@user_passes_test(lambda user: user.profile.vip)  # no user has a profile: the check raises
@mcp.tool()
def lounge() -> str:
    return "welcome"
