"""A URLconf serving ``MCPView`` (WSGI) with tools that use the ORM off the fast path: one
taking a ``Context`` (the SDK runs it), an async one, one whose resolver asks its client. Each
records what it saw, for ``test_django_home``."""

from __future__ import annotations

import threading
from typing import Annotated, Any

import anyio.from_thread
from django.contrib.auth.models import User
from django.db import connection
from django.urls import path
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Elicit, Resolve
from pydantic import BaseModel

from mcp_django.views import MCPView

home = MCPServer("Home")
seen: list[dict[str, Any]] = []
"""Per tool call: the users it counted, its thread, and whether a transaction was open."""


def _record(tool: str) -> int:
    count = User.objects.count()
    seen.append(
        {
            "tool": tool,
            "users": count,
            "thread": threading.current_thread(),
            "in_transaction": connection.in_atomic_block,
        }
    )
    return count


@home.tool()
def users_with_context(ctx: Context) -> int:
    """A sync tool taking a Context: the SDK's path, not the fast path."""
    return _record("users_with_context")


@home.tool()
async def users_async() -> int:
    """An async tool whose ORM work runs through ``sync_to_async`` (Django's async ORM)."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(_record)("users_async")


class Ok(BaseModel):
    ok: bool


def ask_ok(ctx: Context) -> Ok | Elicit[Ok]:
    """A sync resolver that counts before it asks (the SDK runs it on a thread)."""
    _record("ask_ok")
    return Elicit("Count the users?", Ok)


@home.tool()
def users_after_asking(ok: Annotated[Ok, Resolve(ask_ok)], ctx: Context) -> str:
    """Asks its client through a resolver, then counts (2026-07-28: two requests)."""
    return f"{ok.ok}: {_record('users_after_asking')}"


@home.tool()
def users_logging(ctx: Context) -> int:
    """A sync tool taking a Context that logs to its client before it counts: each message
    goes back through the event loop (``anyio.from_thread``)."""
    for step in range(3):
        anyio.from_thread.run(ctx.info, f"step {step}")
    return _record("users_logging")


urlpatterns = [path("home-mcp", MCPView.as_view(server=home))]
