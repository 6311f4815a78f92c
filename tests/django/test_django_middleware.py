"""The endpoint behind the middleware production Django sites install around every view, on a
real socket (Django's live server), driven by the official client in both eras."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from example_project.servers import files
from tests.protocol.clients import modern_tools_list, timed_elicitations

pytestmark = pytest.mark.django_db(transaction=True)


def test_compression_conditional_get_and_locale_middleware_leave_the_endpoint_working(
    settings: Any, serve: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GZipMiddleware``, ``ConditionalGetMiddleware`` and ``LocaleMiddleware`` (outside
    ``i18n_patterns``), where their docs place them: a legacy call's question reaches the client
    while the call waits for it (compressed, it would be held back until the stream ended,
    here ``WAIT_DETACH_SECONDS`` later), a 2026-07-28 one by the retry; JSON answers are
    compressed for a client that accepts it, as the application asked."""
    monkeypatch.setattr(files, "_FOLDERS", {"/tmp/project": ["main.py"]})
    middleware = list(settings.MIDDLEWARE)
    middleware[1:1] = ["django.middleware.gzip.GZipMiddleware", "django.middleware.http.ConditionalGetMiddleware"]
    middleware.insert(
        middleware.index("django.contrib.sessions.middleware.SessionMiddleware") + 1,
        "django.middleware.locale.LocaleMiddleware",
    )
    settings.MIDDLEWARE = middleware
    settings.MCP = {**settings.MCP, "WAIT_DETACH_SECONDS": 5.0}
    url = serve()

    seen = timed_elicitations(f"{url}/files", "delete_folder", {"path": "/tmp/project"}, {"ok": False})

    assert seen["legacy"][1] == seen["2026-07-28"][1] == "kept the folder", seen
    assert seen["legacy"][0] < 2.0, seen  # not held back for WAIT_DETACH_SECONDS
    listed = modern_tools_list(f"{url}/files", {"Accept-Encoding": "gzip"})
    assert (listed.headers["Content-Type"], listed.headers.get("Content-Encoding")) == ("application/json", "gzip")
    assert "delete_folder" in listed.text


def test_a_refusal_or_failure_of_a_middleware_after_mcp_middleware_is_answered_in_json_rpc(
    settings: Any, serve: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A middleware of the site's own after ``MCPMiddleware`` (a rate limiter, an access rule)
    refuses an MCP request before the view runs: Django's HTML 403 page, a text 429, its HTML
    500 page (under ``DEBUG`` the traceback) reached the client, which could only say "Server
    returned an error response". On an MCP URL it is a JSON-RPC error at the same status, with
    the refusal's own headers; the site's other pages keep theirs."""
    from tests.django import refusing_middleware

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.django.refusing_middleware.RefusingMiddleware"]
    settings.DEBUG_PROPAGATE_EXCEPTIONS = False
    url = serve()
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    expected = {
        "deny": (403, -32600, "Forbidden", {}),
        "limit": (429, -32600, "Too Many Requests: Slow down: 2 per minute", {"Retry-After": "30"}),
        "fail": (500, -32603, "Internal Server Error", {}),
    }
    for how, (status, code, message, kept) in expected.items():
        monkeypatch.setitem(refusing_middleware.REFUSE, "how", how)
        answer = httpx.post(url, json=ping, headers=headers)
        assert (answer.status_code, answer.headers["Content-Type"]) == (status, "application/json"), how
        assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
        assert all(answer.headers.get(name) == value for name, value in kept.items()), answer.headers
        page = httpx.get(url.removesuffix("/mcp") + "/")
        assert page.status_code == status and not page.headers["Content-Type"].startswith("application/json")

    # Under DEBUG, Django's page for the failure is its traceback: not for the client.
    settings.DEBUG = True
    monkeypatch.setitem(refusing_middleware.REFUSE, "how", "fail")
    failed = httpx.post(url, json=ping, headers=headers)
    assert failed.status_code == 500 and failed.json()["error"]["message"] == "Internal Server Error"
    assert "Traceback" not in failed.text and "rate limiter" not in failed.text
    settings.DEBUG = False

    monkeypatch.setitem(refusing_middleware.REFUSE, "how", "limit")

    async def call() -> str:
        async with Client(url, mode="2026-07-28") as client:
            with pytest.raises(MCPError) as refusal:
                await client.list_tools()
        return str(refusal.value)

    assert asyncio.run(asyncio.wait_for(call(), 30)) == "Too Many Requests: Slow down: 2 per minute"
