"""Framework-free core of MCP for Django and Flask: the request pipeline and its stores.

Nothing in this package imports Django, Flask or SQLAlchemy.
"""

from __future__ import annotations

from mcp_common.config import MCPConfig
from mcp_common.endpoint import MCPEndpoint, current_principal, current_request
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_common.store import MemoryStore, SessionStore

__all__ = [
    "HTTPRequest",
    "HTTPResponse",
    "MCPConfig",
    "MCPEndpoint",
    "MemoryStore",
    "SessionStore",
    "current_principal",
    "current_request",
]
