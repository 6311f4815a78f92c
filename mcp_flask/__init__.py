"""MCP for Flask: serve MCP servers (the official SDK's ``MCPServer``) from a Flask app.

    from mcp_flask import MCP

    mcp = MCP(app, server=my_server)          # Streamable HTTP at /mcp

Then ``flask mcp migrate`` creates the tables that legacy sessions, elicitations and
2026-07-28 request states live in.
"""

from __future__ import annotations

from mcp_flask.elicitation import (
    ElicitUrl,
    UrlConsent,
    caller_elicitation_id,
    complete_elicitation,
    elicitation_completed,
)
from mcp_flask.expose import model_tools, view_tool
from mcp_flask.extension import MCP, MCPState, flask_login_principal, get_state
from mcp_flask.migrations import migrate
from mcp_flask.permissions import permission_required
from mcp_flask.store import SQLAlchemyStore, make_engine
from mcp_flask.views import MCPView

__all__ = [
    "MCP",
    "ElicitUrl",
    "MCPState",
    "MCPView",
    "SQLAlchemyStore",
    "UrlConsent",
    "caller_elicitation_id",
    "complete_elicitation",
    "elicitation_completed",
    "flask_login_principal",
    "get_state",
    "make_engine",
    "migrate",
    "model_tools",
    "permission_required",
    "view_tool",
]
