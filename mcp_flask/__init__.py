"""MCP for Flask: serve MCP servers (the official SDK's ``MCPServer``) from a Flask app.

    from mcp_flask import MCP

    mcp = MCP(app, server=my_server)          # Streamable HTTP at /mcp

Then ``flask mcp migrate`` creates the tables legacy sessions live in.
"""

from __future__ import annotations

from mcp_flask.extension import MCP, MCPState, flask_login_principal, get_state
from mcp_flask.migrations import migrate
from mcp_flask.store import SQLAlchemyStore, make_engine
from mcp_flask.views import MCPView

__all__ = [
    "MCP",
    "MCPState",
    "MCPView",
    "SQLAlchemyStore",
    "flask_login_principal",
    "get_state",
    "make_engine",
    "migrate",
]
