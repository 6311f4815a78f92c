"""The MCP server under test: one plain tool and one that asks the client through a resolver.

Every target serves this object: Django and Flask through ``mcp_common`` (which installs
request-state keys derived from the framework's secret key), the SDK's own Starlette app as it
is. The SDK app gets a fixed shared key here, so that a ``requestState`` minted by one uvicorn
worker is accepted by another (the SDK's default key is per process).
"""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

REQUEST_STATE_KEY = "benchmark-request-state-key-0123456789-abcdefghijklmnop"

mcp = MCPServer("Bench", request_state_security=RequestStateSecurity(keys=[REQUEST_STATE_KEY]))


class Confirm(BaseModel):
    ok: bool


async def ask_confirm(text: str) -> Confirm | Elicit[Confirm]:
    return Elicit(f"Echo {text}?", Confirm)


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@mcp.tool()
def confirm_echo(text: str, ok: Annotated[Confirm, Resolve(ask_confirm)]) -> str:
    """Echo the text back once the client confirms."""
    return f"echo: {text}" if ok.ok else "not confirmed"
