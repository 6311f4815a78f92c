"""A tool's changes to the caller's Django session (``request.session``): saved by
``SessionMiddleware`` in the MCP response as Django saves a view's, as long as that response
has not started; never raced with that save once the answer streams (SSE), under WSGI
(``MCPView``) and ASGI (``AsyncMCPView``)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client, override_settings

from mcp_django.conf import mcp_settings
from mcp_django.registry import get_endpoint
from tests.django.inprocess import ACCEPT, MODERN_META, reply
from tests.django.session_site import mcp
from tests.django.test_django_asgi import LEGACY_INIT

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = ["/session-sync", "/session-async"]


@pytest.fixture(autouse=True)
def _site() -> Any:
    with override_settings(ROOT_URLCONF="tests.django.session_site"):
        yield
    get_endpoint(mcp).close()


class Caller:
    """One browser-like client (it keeps Django's session cookie) of the server at ``path``."""

    def __init__(self, path: str, era: str) -> None:
        self.path, self.era = path, era
        self.client: Any = AsyncClient() if path.endswith("async") else Client()
        self.headers: dict[str, str] = {}
        if era == "legacy":
            opened = self.post(LEGACY_INIT, {})
            self.headers = {"Mcp-Session-Id": opened["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}

    def post(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        data, headers = json.dumps(body), {"Accept": ACCEPT, **headers}
        if isinstance(self.client, AsyncClient):

            async def send() -> Any:
                response = await self.client.post(self.path, data, content_type="application/json", headers=headers)
                streaming = response.streaming
                response.body = (
                    b"".join([c async for c in response.streaming_content]) if streaming else response.content
                )
                return response

            return async_to_sync(send)()
        response = self.client.post(self.path, data, content_type="application/json", headers=headers)
        response.body = b"".join(response.streaming_content) if response.streaming else response.content
        return response

    def call(self, tool: str, **arguments: Any) -> Any:
        """The response to a ``tools/call`` of ``tool`` that asks for progress."""
        headers = dict(self.headers)
        params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": {"progressToken": "p"}}
        if self.era == "modern":
            params["_meta"].update(MODERN_META)
            headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool})
        return self.post({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}, headers)

    def recalled(self) -> dict[str, Any]:
        return dict(reply(self.call("recall"))["result"]["structuredContent"])


def _content_type(response: Any) -> str:
    return str(response["Content-Type"]).split(";")[0]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mcp_django"]


@pytest.mark.parametrize(
    ("path", "era", "tool", "json_response"),
    [
        *(
            (path, "modern", tool, False)
            for path in PATHS
            for tool in ("remember", "remember_with_context", "remember_in_a_worker_thread")
        ),
        ("/session-sync", "legacy", "remember", False),  # the legacy fast path: WSGI only
        *(
            (path, "legacy", tool, True)
            for path in PATHS
            for tool in ("remember", "remember_with_context", "remember_in_a_worker_thread")
        ),
    ],
)
def test_a_change_is_saved_with_a_json_answer(
    path: str, era: str, tool: str, json_response: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Django's rule: a session the request changed is saved in its response, on every path
    whose answer is JSON (the fast path, a 2026-07-28 call that sends no notification, a legacy
    call with ``JSON_RESPONSE``)."""
    settings = {**mcp_settings.user_settings, "JSON_RESPONSE": True} if json_response else None
    with override_settings(MCP=settings) if settings else override_settings():
        try:
            caller = Caller(path, era)
            with caplog.at_level(logging.WARNING, logger="mcp_django"):
                response = caller.call(tool, value=tool)
            assert _content_type(response) == "application/json" and "result" in reply(response)
            assert "sessionid" in response.cookies
            assert caller.recalled()["remembered"] == tool
            assert _warnings(caplog) == []
        finally:
            get_endpoint(mcp).close()


@pytest.mark.parametrize("path", PATHS)
def test_a_change_after_the_answer_turned_to_sse_is_not_saved_and_is_logged(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """2026-07-28: the answer is JSON until the first notification. What the tool changed before
    it is saved; after it, the response's headers (the cookie) have gone and SessionMiddleware
    has saved the session on the view's thread: the tool keeps its change for the rest of the
    call (even through a reference taken earlier), the saved session never gets it, and the
    log says so once, naming the tool."""
    for attempt in range(5):
        caller = Caller(path, "modern")
        with caplog.at_level(logging.WARNING, logger="mcp_django"):
            response = caller.call("remember_around_progress", value=f"v{attempt}")
            assert _content_type(response) == "text/event-stream"
            assert reply(response)["result"]["content"][0]["text"] == f"after=v{attempt}"
        assert "sessionid" in response.cookies
        assert caller.recalled() == {"remembered": None, "before": f"v{attempt}", "after": None}, attempt
    warnings = _warnings(caplog)
    assert len(warnings) == 5 and all("'remember_around_progress'" in w for w in warnings), warnings
    assert "not saved" in warnings[0]


@pytest.mark.parametrize(
    ("path", "tool"),
    [
        *((path, tool) for path in PATHS for tool in ("remember_with_context", "remember_in_a_worker_thread")),
        ("/session-async", "remember"),  # under ASGI a legacy plain call takes the SDK's path too
    ],
)
def test_a_legacy_sse_answer_never_carries_a_change(path: str, tool: str, caplog: pytest.LogCaptureFixture) -> None:
    """A legacy call on the SDK's path answers SSE from its first byte: its headers (the cookie)
    leave before the tool runs, so the tool's change is never saved (not sometimes, by a race
    with SessionMiddleware's save on the view's thread), and the log says so."""
    for attempt in range(10):
        caller = Caller(path, "legacy")
        with caplog.at_level(logging.WARNING, logger="mcp_django"):
            response = caller.call(tool, value=f"v{attempt}")
            assert _content_type(response) == "text/event-stream" and "result" in reply(response)
        assert "sessionid" not in response.cookies, attempt
        assert caller.recalled()["remembered"] is None, attempt
    warnings = _warnings(caplog)
    assert len(warnings) == 10 and all(repr(tool) in w for w in warnings), warnings


@pytest.mark.parametrize("path", PATHS)
def test_a_streamed_handler_never_drops_the_stored_session(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """``flush()`` (as ``logout()`` does) in a handler whose answer streams would delete the
    session the client's cookie names, which the client never hears of: the copy the handler
    works on writes nothing to the session store, and the log says so."""
    caller = Caller(path, "modern")
    assert "result" in reply(caller.call("remember", value="kept"))  # JSON: saved
    caller.era, caller.headers = "legacy", Caller(path, "legacy").headers
    with caplog.at_level(logging.WARNING, logger="mcp_django"):
        response = caller.call("forget_me")
        assert _content_type(response) == "text/event-stream" and "result" in reply(response)
    assert caller.recalled()["remembered"] == "kept"
    assert len(_warnings(caplog)) == 1 and "'forget_me'" in _warnings(caplog)[0]


@pytest.mark.parametrize("path", PATHS)
def test_a_change_after_a_stream_started_by_a_task_of_the_tool_is_logged(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The notification that turns the answer into SSE may come from a task the tool started
    (``asyncio.gather`` of steps reporting progress): the tool itself is then past the point
    where its change can be saved, as surely as if it had notified itself, and the log says so."""
    caller = Caller(path, "modern")
    with caplog.at_level(logging.WARNING, logger="mcp_django"):
        response = caller.call("remember_after_parallel_progress", value="v")
        assert _content_type(response) == "text/event-stream"
        assert reply(response)["result"]["content"][0]["text"] == "after=v"
    assert caller.recalled()["after"] is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "'remember_after_parallel_progress'" in warnings[0], warnings
