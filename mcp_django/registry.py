"""One ``MCPEndpoint`` per server object, per process."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from mcp_common.endpoint import MCPEndpoint

_endpoints: dict[int, MCPEndpoint] = {}
_by_reference: dict[Any, MCPEndpoint] = {}
"""The endpoint for each way a view names its server (object, dotted path, ``None``);
cleared when the ``MCP`` setting changes."""
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
    """The endpoint serving ``server`` (an ``MCPServer``, a dotted path, or ``None`` for
    ``MCP["SERVER"]``): built once per server object, then found with one dict lookup."""
    try:
        return _by_reference[server]
    except (KeyError, TypeError):
        pass
    resolved = resolve_server(server)
    endpoint = _endpoints.get(id(resolved))
    if endpoint is None:
        with _lock:
            endpoint = _endpoints.get(id(resolved))
            if endpoint is None:
                from mcp_django.conf import mcp_settings
                from mcp_django.endpoint import DjangoEndpoint
                from mcp_django.store import DjangoStore

                endpoint = DjangoEndpoint(resolved, mcp_settings.build_config(), DjangoStore())
                _endpoints[id(resolved)] = endpoint
    with contextlib.suppress(TypeError):  # an unhashable reference is resolved each time
        _by_reference[server] = endpoint
    return endpoint


def reset_endpoints() -> None:
    """Forget the endpoints (the ``MCP`` setting changed: the next request builds them anew), and
    shut them down: else each one's lifespan, heartbeat and database threads live on, unused,
    for the process's life (a test suite changing ``MCP`` per test would pile them up)."""
    with _lock:
        dropped = list(_endpoints.values())
        _endpoints.clear()
        _by_reference.clear()
    for endpoint in dropped:
        endpoint.shutdown()
