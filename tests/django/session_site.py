"""A server whose tools read and change the caller's Django session (``request.session``), served
by ``MCPView`` and ``AsyncMCPView``."""

from __future__ import annotations

import asyncio

from django.http import HttpRequest
from django.urls import path
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mcp_common import current_request
from mcp_django.views import AsyncMCPView, MCPView

mcp = MCPServer("DjangoSessionTests")


def _request() -> HttpRequest:
    served = current_request.get()
    assert served is not None and isinstance(served.native, HttpRequest)
    return served.native


@mcp.tool()
def remember(value: str) -> str:
    """A plain tool: the core's fast path runs it in the request's own thread."""
    _request().session["remembered"] = value
    return "ok"


@mcp.tool()
async def remember_with_context(value: str, ctx: Context) -> str:
    """A tool taking the SDK's Context: the SDK's full path runs it on the event loop."""
    ctx.request_context.request.session["remembered"] = value
    return "ok"


@mcp.tool()
def remember_in_a_worker_thread(value: str, ctx: Context) -> str:
    """A sync tool taking the Context: the SDK's full path runs it on a worker thread."""
    ctx.request_context.request.session["remembered"] = value
    return "ok"


@mcp.tool()
async def remember_around_progress(value: str, ctx: Context) -> str:
    """A change before the first progress notification (while the answer can still be JSON)
    and one after it (once the answer is an SSE stream whose headers have left), through a
    reference to the session taken before the stream started."""
    session = ctx.request_context.request.session
    session["before"] = value
    await ctx.report_progress(1, 2, "half way")
    session["after"] = value
    return f"after={ctx.request_context.request.session.get('after')}"


@mcp.tool()
async def remember_after_parallel_progress(value: str, ctx: Context) -> str:
    """The first notification comes from a task the tool started (steps run side by side); the
    tool's own change comes after it, once SessionMiddleware has saved the session."""

    async def step(done: int) -> None:
        await ctx.report_progress(done, 2)

    await asyncio.gather(step(1), step(2))
    await asyncio.sleep(0.2)
    ctx.request_context.request.session["after"] = value
    return f"after={ctx.request_context.request.session.get('after')}"


@mcp.tool()
def forget_me(ctx: Context) -> str:
    """Empties the session and drops its stored copy, as ``logout()`` does."""
    ctx.request_context.request.session.flush()
    return "forgotten"


@mcp.tool()
def recall() -> dict[str, str | None]:
    session = _request().session
    return {key: session.get(key) for key in ("remembered", "before", "after")}


urlpatterns = [
    path("session-sync", MCPView.as_view(server=mcp)),
    path("session-async", AsyncMCPView.as_view(server=mcp)),
]
