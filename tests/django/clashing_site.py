"""A URLconf serving two different servers that share the SDK's default name "mcp-server",
and one server at two URLs (which is fine)."""

from __future__ import annotations

from django.urls import path
from mcp.server import MCPServer

from mcp_django.views import MCPView

first, second, shared = MCPServer(), MCPServer(), MCPServer("Shared")

urlpatterns = [
    path("first", MCPView.as_view(server=first)),
    path("second", MCPView.as_view(server=second)),
    path("shared-a", MCPView.as_view(server=shared)),
    path("shared-b", MCPView.as_view(server=shared)),
]
