"""A tool's changes to ``flask.session``: saved in the MCP response as Flask saves a view's, as
long as that response has not started; never half-saved by a race once it streams (SSE)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask, session
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mcp_flask import MCP
from tests.flask.inprocess import MODERN_META, Caller, reply

server = MCPServer("FlaskSessionTests")


@server.tool()
def remember(value: str) -> str:
    """A plain tool: the core's fast path runs it in the request's own thread."""
    session["remembered"] = value
    return "ok"


@server.tool()
async def remember_with_context(value: str, ctx: Context) -> str:
    """A tool taking the SDK's Context: the SDK's full path runs it on the event loop."""
    session["remembered"] = value
    return "ok"


@server.tool()
def remember_in_a_worker_thread(value: str, ctx: Context) -> str:
    """A sync tool taking the Context: the SDK's full path runs it on a worker thread."""
    session["remembered"] = value
    return "ok"


@server.tool()
async def remember_around_progress(value: str, ctx: Context) -> str:
    """A change before the first progress notification (while the answer can still be JSON)
    and one after it (once the answer is an SSE stream whose headers have left)."""
    session["before"] = value
    await ctx.report_progress(1, 2, "half way")
    session["after"] = value
    return f"after={session.get('after')}"


@server.tool()
async def remember_after_parallel_progress(value: str, ctx: Context) -> str:
    """The first notification comes from a task the tool started (steps run side by side); the
    tool's own change comes after it, once Flask has saved the session into the headers."""

    async def step(done: int) -> None:
        await ctx.report_progress(done, 2)

    await asyncio.gather(step(1), step(2))
    await asyncio.sleep(0.2)
    session["after"] = value
    return f"after={session.get('after')}"


@server.tool()
def recall() -> dict[str, str | None]:
    return {key: session.get(key) for key in ("remembered", "before", "after")}


def _post(caller: Caller, tool: str, **arguments: Any) -> Any:
    headers = dict(caller.headers)
    params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": {"progressToken": "p"}}
    if caller.era == "modern":
        params["_meta"].update(MODERN_META)
        headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool})
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    return caller.client.post(caller.url, json=body, headers=headers)


def _recalled(caller: Caller) -> dict[str, Any]:
    return dict(caller.call("recall")["structuredContent"])


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    return app


@pytest.mark.parametrize(
    ("era", "tool", "config"),
    [
        ("modern", "remember", {}),
        ("modern", "remember_with_context", {}),
        ("legacy", "remember", {}),
        ("legacy", "remember_with_context", {"MCP_JSON_RESPONSE": True}),
    ],
)
def test_a_change_is_saved_with_a_json_answer(
    make_app: Callable[..., Flask], era: str, tool: str, config: dict[str, Any]
) -> None:
    """Flask's rule: a session the request changed is saved in its response, on either path."""
    app = make_app(**config)
    MCP(app, server=server)
    MCP.migrate(app)
    caller = Caller(app, None, era)
    response = _post(caller, tool, value=tool)
    assert response.mimetype == "application/json" and "result" in reply(response)
    assert "session=" in response.headers.get("Set-Cookie", "")
    assert _recalled(caller)["remembered"] == tool


def test_a_change_after_the_answer_turned_to_sse_is_not_saved_and_is_logged(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    """2026-07-28: the answer is JSON until the first notification. What the tool changed before
    it is saved; after it, the response's headers have gone: the tool keeps its change for the
    rest of the call, the client's cookie does not get it, and the log says so."""
    caller = Caller(app, None, "modern")
    with caplog.at_level(logging.WARNING, logger="mcp_flask"):
        response = _post(caller, "remember_around_progress", value="v")
        assert response.mimetype == "text/event-stream"
        assert reply(response)["result"]["content"][0]["text"] == "after=v"
    assert _recalled(caller) == {"remembered": None, "before": "v", "after": None}
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcp_flask"]
    assert len(warnings) == 1 and "'remember_around_progress'" in warnings[0], warnings
    assert "not saved" in warnings[0]


@pytest.mark.parametrize("tool", ["remember_with_context", "remember_in_a_worker_thread"])
def test_a_legacy_sse_answer_never_carries_a_change(app: Flask, caplog: pytest.LogCaptureFixture, tool: str) -> None:
    """A legacy call on the SDK's path answers SSE from its first byte: the headers leave before
    the tool runs, so its change is never saved (not sometimes, by a race with the tool's
    thread), and the log says so."""
    for attempt in range(10):
        caller = Caller(app, None, "legacy")
        with caplog.at_level(logging.WARNING, logger="mcp_flask"):
            response = _post(caller, tool, value=f"v{attempt}")
            assert response.mimetype == "text/event-stream" and "result" in reply(response)
        assert "session=" not in response.headers.get("Set-Cookie", ""), attempt
        assert _recalled(caller)["remembered"] is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcp_flask"]
    assert len(warnings) == 10 and all(repr(tool) in w for w in warnings), warnings


def test_a_change_after_a_stream_started_by_a_task_of_the_tool_is_logged(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    """The notification that turns the answer into SSE may come from a task the tool started
    (``asyncio.gather`` of steps reporting progress): the tool itself is then past the point
    where its change can be saved, as surely as if it had notified itself, and the log says so."""
    caller = Caller(app, None, "modern")
    with caplog.at_level(logging.WARNING, logger="mcp_flask"):
        response = _post(caller, "remember_after_parallel_progress", value="v")
        assert response.mimetype == "text/event-stream"
        assert reply(response)["result"]["content"][0]["text"] == "after=v"
    assert _recalled(caller)["after"] is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcp_flask"]
    assert len(warnings) == 1 and "'remember_after_parallel_progress'" in warnings[0], warnings
