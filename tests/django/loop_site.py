"""A site served by gunicorn (gthread) in ``test_django_loop``: ``MCPView`` with an async tool
whose ORM work runs through ``sync_to_async`` (under WSGI, on the request's own thread), and
the site's own async code: async views, and a sync view that calls ``async_to_sync`` inside a
transaction. Each view says where its code ran and what it saw."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from mcp.server import MCPServer

from mcp_django.views import MCPView

server = MCPServer("Loop")


def _users() -> int:
    return User.objects.count()


_two_calls: asyncio.Barrier | None = None


@server.tool()
async def users(together: bool = False) -> int:
    """An async tool whose ORM work runs through ``sync_to_async`` (Django's async ORM);
    ``together``: only once two such calls run at once (each on a thread of its own)."""
    global _two_calls
    if together:
        _two_calls = _two_calls or asyncio.Barrier(2)
        await asyncio.wait_for(_two_calls.wait(), 10)
    return await sync_to_async(_users)()


def _here() -> str:
    return threading.current_thread().name


async def _observe() -> dict[str, Any]:
    return {
        "coroutine_thread": _here(),
        "sync_thread": await sync_to_async(_here)(),
        "users": await sync_to_async(_users)(),
    }


async def async_view(request: HttpRequest) -> JsonResponse:
    """An async view under WSGI: Django runs it through ``async_to_sync``."""
    return JsonResponse(await _observe())


def sync_view(request: HttpRequest) -> JsonResponse:
    """A sync view calling async code inside its transaction: the async code's ORM work runs
    on this thread, on its connection, and sees the user this transaction created."""
    thread = _here()
    with transaction.atomic():
        user = User.objects.create(username=f"u{User.objects.count()}")
        seen = async_to_sync(_observe)()
        user.delete()
    return JsonResponse({"request_thread": thread, **seen})


CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "users",
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    },
}


async def calling_view(request: HttpRequest) -> JsonResponse:
    """An async view that calls this site's own MCP endpoint with a blocking HTTP client (as
    code calling another service of the site does); another thread of the worker serves it."""
    outgoing = urllib.request.Request(
        f"http://{request.get_host()}/mcp",
        data=json.dumps(CALL).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "users",
        },
    )
    try:
        with urllib.request.urlopen(outgoing, timeout=float(os.environ.get("LOOP_SITE_TIMEOUT", "5"))) as response:
            answered = "result" in json.loads(response.read())
    except (TimeoutError, urllib.error.URLError):
        answered = False
    return JsonResponse({"answered": answered, "coroutine_thread": _here()})


urlpatterns = [
    path("mcp", MCPView.as_view(server=server)),
    path("async", async_view),
    path("sync", sync_view),
    path("calling", calling_view),
]
