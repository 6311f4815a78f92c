"""A URLconf serving ``AsyncMCPView`` and ``MCPView`` side by side (the default server, and
``tests.django.guarded_server``), and a middleware that replaces ``request.user`` the way an
application's own authentication middleware would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser, User
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponseBase
from django.urls import path
from django.utils.functional import SimpleLazyObject
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mcp_django.views import AsyncMCPView, MCPView

counts = MCPServer("Counts")
used_connections: list[object] = []
"""The database connection (Django's wrapper) each ``user_count`` call used, on its thread."""


@counts.tool()
def user_count() -> int:
    """How many users there are: a sync tool, which ``AsyncMCPView`` runs on a worker thread."""
    count = User.objects.count()
    used_connections.append(connections[DEFAULT_DB_ALIAS])
    return count


@counts.tool()
async def user_count_async() -> int:
    """How many users there are, through the async ORM (``acount()``, ``sync_to_async``)."""
    return await User.objects.acount()


progress_seen = threading.Event()
"""Set by a test once the client has received ``progress_then_wait``'s progress."""


@counts.tool()
async def progress_then_wait(ctx: Context) -> str:
    """Reports progress, then waits (at most 10 s) until the client has received it."""
    await ctx.report_progress(1, 2)
    return "seen" if await asyncio.to_thread(progress_seen.wait, 10) else "not seen"


urlpatterns = [
    path("asgi-mcp", AsyncMCPView.as_view()),
    path("asgi-mcp-sync", MCPView.as_view()),
    path("guarded-async", AsyncMCPView.as_view(server="tests.django.guarded_server.mcp")),
    path("guarded-sync", MCPView.as_view(server="tests.django.guarded_server.mcp")),
    path("counts-async", AsyncMCPView.as_view(server=counts)),
    path("counts-sync", MCPView.as_view(server=counts)),
    path("bistro-async", AsyncMCPView.as_view(server="example_project.servers.bistro.mcp")),
]


def replace_user(get_response: Callable[[HttpRequest], HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """``X-Test-User: anonymous`` (a suspended account), ``concrete:<username>`` (a token
    middleware that loaded its user) or ``lazy:<username>`` (one that loads it on first use)."""

    def middleware(request: HttpRequest) -> HttpResponseBase:
        kind, _, username = request.headers.get("X-Test-User", "").partition(":")
        if kind == "anonymous":
            request.user = AnonymousUser()
        elif kind == "concrete":
            request.user = User.objects.get(username=username)
        elif kind == "lazy":
            request.user = SimpleLazyObject(lambda: User.objects.get(username=username))
        return get_response(request)

    return middleware
