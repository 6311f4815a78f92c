"""A URLconf serving servers whose names no database row can keep: longer than the rows'
column, and with a NUL (PostgreSQL text cannot hold one)."""

from __future__ import annotations

from django.urls import path
from mcp.server import MCPServer

from mcp_django.views import MCPView

urlpatterns = [
    path("long", MCPView.as_view(server=MCPServer("shop-" + "x" * 196))),
    path("nul", MCPView.as_view(server=MCPServer("shop\x00"))),
    path("fine", MCPView.as_view(server=MCPServer("shop-" + "x" * 195))),
]
