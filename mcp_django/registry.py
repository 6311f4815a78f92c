"""One ``MCPEndpoint`` per server object, per process."""

from __future__ import annotations

import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from mcp_common.endpoint import MCPEndpoint

_endpoints: dict[int, MCPEndpoint] = {}
_lock = threading.Lock()


def resolve_server(server: Any) -> Any:
    """An ``MCPServer`` from an object or a dotted path (``MCP["SERVER"]`` when ``None``)."""
    from mcp_django.conf import mcp_settings

    if server is None:
        server = mcp_settings.SERVER
        if server is None:
            raise ImproperlyConfigured(
                'No MCP server configured: set MCP = {"SERVER": "dotted.path.to.server"} in your settings, '
                "or use MCPView.as_view(server=...)."
            )
    if isinstance(server, str):
        try:
            server = import_string(server)
        except ImportError as exc:
            raise ImproperlyConfigured(f"MCP server {server!r} could not be imported: {exc}") from exc
    return server


def get_endpoint(server: Any) -> MCPEndpoint:
    server = resolve_server(server)
    endpoint = _endpoints.get(id(server))
    if endpoint is None:
        with _lock:
            endpoint = _endpoints.get(id(server))
            if endpoint is None:
                from mcp_django.conf import mcp_settings
                from mcp_django.store import DjangoStore

                endpoint = MCPEndpoint(server, mcp_settings.build_config(), DjangoStore())
                _endpoints[id(server)] = endpoint
    return endpoint


def reset_endpoints() -> None:
    with _lock:
        _endpoints.clear()
