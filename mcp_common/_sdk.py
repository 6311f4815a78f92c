"""Every use of a private name of the MCP SDK lives here, and only here.

``tests/core/test_sdk_contract.py`` fails loudly when the SDK moves one of them; the dependency
is bounded below the next minor release for the same reason.
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity


def lowlevel_server(server: Any) -> Server[Any]:
    """The low-level ``Server`` that ``serve_one`` drives, from an ``MCPServer`` or itself."""
    if isinstance(server, Server):
        return server
    inner = getattr(server, "_lowlevel_server", None)
    if not isinstance(inner, Server):
        raise TypeError(f"expected an mcp.server.MCPServer or a low-level mcp Server, got {type(server).__name__}")
    return inner


def install_request_state_security(server: Any, security: RequestStateSecurity) -> None:
    """Replace the server's request-state boundary with one under ``security``.

    ``MCPServer`` installs a boundary under a per-process ephemeral key when it is built; state
    sealed by one worker would be rejected by every other. The boundary keeps its place in the
    middleware chain (it must run before anything that reads ``requestState``).
    """
    lowlevel = lowlevel_server(server)
    boundary = RequestStateBoundary(security, default_audience=lowlevel.name)
    chain = lowlevel.middleware
    for index, middleware in enumerate(chain):
        if isinstance(middleware, RequestStateBoundary):
            chain[index] = boundary
            return
    chain.insert(0, boundary)


def registered_tools(server: Any) -> list[Any]:
    """The ``MCPServer``'s registered ``Tool`` objects (their functions and resolver plans);
    empty for a low-level ``Server``, whose handlers are opaque."""
    manager = getattr(server, "_tool_manager", None)
    if manager is None:
        return []
    return list(manager.list_tools())


def request_identity(method: str, params: Any) -> tuple[str, str]:
    """The (target, arguments digest) the SDK's request-state boundary binds a state to.

    Computed by the SDK's own function so that a persisted state is bound to exactly what the
    sealed token inside it is bound to.
    """
    from mcp.server import request_state

    return request_state._request_identity(method, params)


def default_call_tool_handler(server: Any) -> bool:
    """Whether ``tools/call`` is served by ``MCPServer``'s own handler (no extension wrapper,
    no hand-registered low-level handler): the condition for the project's fast path."""
    handler = getattr(server, "_handle_call_tool", None)
    if handler is None:
        return False
    entry = lowlevel_server(server).get_request_handler("tools/call")
    return entry is not None and entry.handler == handler


def tool_error_types() -> tuple[type[Exception], type[Exception], type[Exception], type[Exception]]:
    """(ToolError, UnexpectedToolError, ResourceError, UnexpectedResourceError), as ``Tool.run``
    maps them."""
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedResourceError, UnexpectedToolError

    return ToolError, UnexpectedToolError, ResourceError, UnexpectedResourceError


def get_tool(server: Any, name: str) -> Any | None:
    """The ``MCPServer``'s registered ``Tool`` called ``name``."""
    manager = getattr(server, "_tool_manager", None)
    return manager.get_tool(name) if manager is not None else None
