"""The core pipeline with no framework: two endpoints over one store stand for two workers
sharing a database (each with its own MCPServer instance, as separate processes would have)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Elicit, Resolve
from pydantic import BaseModel

from mcp_common import HTTPRequest, HTTPResponse, MCPConfig, MCPEndpoint, MemoryStore
from mcp_common.elicitation import worker_id
from mcp_common.endpoint import current_request
from mcp_common.legacy import parse_event_id

ROOT = Path(__file__).resolve().parents[2]

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
SECRET = "a-shared-secret-key-that-is-long-enough-0123456789"


class Name(BaseModel):
    name: str


async def ask_name() -> Name | Elicit[Name]:
    return Elicit("Who are you?", Name)


def build_server(name: str = "Workers") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    async def hello(who: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"Hello, {who.name}!"

    @server.tool()
    async def interview(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", schema=Name)
        return f"Interviewed {answer.data.name}" if answer.action == "accept" else f"No interview ({answer.action})"

    @server.tool()
    async def slow_report(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half way")
        # The server may end the SSE stream mid-call; the client resumes with Last-Event-ID.
        await ctx.close_sse_stream()
        await ctx.report_progress(2, 2, "done")
        return "report ready"

    @server.tool()
    async def steps(ctx: Context) -> str:
        await ctx.report_progress(1, 1, "one step")
        return "all steps done"

    return server


def endpoint(store: MemoryStore, secret: str = SECRET, *, name: str = "Workers", **config: Any) -> MCPEndpoint:
    return MCPEndpoint(build_server(name), MCPConfig(secret_keys=(secret,), poll_interval=0.02, **config), store)


def request(method: str, body: Any = None, **headers: str) -> HTTPRequest:
    base = {"host": "localhost", "content-type": "application/json", "accept": "application/json, text/event-stream"}
    base.update({k.replace("_", "-").lower(): v for k, v in headers.items()})
    return HTTPRequest(method, base, json.dumps(body).encode() if body is not None else b"")


def modern_call(name: str, arguments: dict[str, Any], **extra: Any) -> HTTPRequest:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    params = {"name": name, "arguments": arguments, "_meta": meta, **extra}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return request("POST", body, mcp_protocol_version=MODERN, mcp_method="tools/call", mcp_name=name)


def events(point: MCPEndpoint, response: HTTPResponse, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Read a whole SSE response: each event's id (if any) and parsed data. Read on a daemon
    thread: a stream that never ends fails the test after ``timeout`` instead of hanging it."""
    out: list[dict[str, Any]] = []
    failure: list[BaseException] = []
    ended = threading.Event()

    def read() -> None:
        try:
            for chunk in point.iter_body(response):
                fields = dict(
                    line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
                    for line in chunk.decode().strip().split("\n")
                )
                out.append({"id": fields.get("id"), "data": json.loads(fields["data"]) if fields.get("data") else None})
        except BaseException as exc:
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=read, name="sse-reader", daemon=True).start()
    if not ended.wait(timeout):
        pytest.fail(f"the SSE stream did not end within {timeout:.0f} s (events so far: {out!r})")
    if failure:
        raise failure[0]
    return out


def test_request_state_minted_by_one_worker_is_accepted_by_another() -> None:
    store = MemoryStore()
    first, second = endpoint(store), endpoint(store)
    asked = first.handle(modern_call("hello", {}))
    result = json.loads(asked.body)["result"]
    assert result["resultType"] == "input_required"
    ((key, question),) = result["inputRequests"].items()
    assert question["params"]["message"] == "Who are you?"
    retry = modern_call(
        "hello",
        {},
        inputResponses={key: {"action": "accept", "content": {"name": "Ada"}}},
        requestState=result["requestState"],
    )
    done = json.loads(second.handle(retry).body)["result"]
    assert done["content"][0]["text"] == "Hello, Ada!"


def test_request_state_from_another_deployment_is_rejected() -> None:
    store = MemoryStore()
    ours, theirs = endpoint(store), endpoint(store, secret="another-secret-key-that-is-long-enough-987654321")
    result = json.loads(theirs.handle(modern_call("hello", {})).body)["result"]
    ((key, _),) = result["inputRequests"].items()
    retry = modern_call(
        "hello",
        {},
        inputResponses={key: {"action": "accept", "content": {"name": "Eve"}}},
        requestState=result["requestState"],
    )
    response = ours.handle(retry)
    body = json.loads(response.body)
    assert response.status == 400
    assert body["error"]["code"] == -32602
    assert body["error"]["data"] == {"reason": "invalid_request_state"}


def initialize(point: MCPEndpoint, capabilities: dict[str, Any] | None = None) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    response = point.handle(request("POST", body))
    assert response.status == 200, response.body
    return response.headers["Mcp-Session-Id"]


def legacy(session: str, body: Any) -> HTTPRequest:
    return request("POST", body, mcp_session_id=session, mcp_protocol_version=LEGACY)


def follow(
    point: MCPEndpoint,
    session: str,
    response: HTTPResponse,
    on_message: Any = None,
    resumer: MCPEndpoint | None = None,
) -> list[dict[str, Any]]:
    """Read a legacy call's SSE response as the official client does: when the server ends it
    before the call's response (it does so under WSGI while the call waits for the client),
    resume with ``Last-Event-ID`` until the response arrives. Returns every message seen."""
    seen: list[dict[str, Any]] = []
    for _ in range(100):
        last_id = None
        for event in events(point, response):
            if event["id"]:
                last_id = event["id"]
            message = event["data"]
            if not message:
                continue
            seen.append(message)
            if on_message is not None:
                on_message(message)
            if "method" not in message and ("result" in message or "error" in message):
                return seen
        assert last_id, f"the stream ended with nothing to resume from: {seen}"
        point = resumer or point
        response = point.handle(
            request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY, last_event_id=last_id)
        )
        assert response.status == 200, response.body
    raise AssertionError(f"no response after 100 resumptions: {seen}")


def test_session_lives_in_the_store_not_in_a_worker() -> None:
    store = MemoryStore()
    first, second = endpoint(store), endpoint(store)
    session = initialize(first)
    listed = second.handle(legacy(session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert {t["name"] for t in json.loads(listed.body)["result"]["tools"]} == {
        "hello",
        "interview",
        "slow_report",
        "steps",
    }
    assert first.handle(request("DELETE", mcp_session_id=session)).status == 200
    gone = second.handle(legacy(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert gone.status == 404


def test_session_is_bound_to_its_principal() -> None:
    store = MemoryStore()
    point = endpoint(store)
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    owned = request("POST", body)
    owned.principal = "user:1"
    session = point.handle(owned).headers["Mcp-Session-Id"]
    other = legacy(session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    other.principal = "user:2"
    assert point.handle(other).status == 404
    mine = legacy(session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    mine.principal = "user:1"
    assert point.handle(mine).status == 200


def test_elicitation_answered_through_another_worker() -> None:
    store = MemoryStore()
    asking, answering = endpoint(store), endpoint(store)
    session = initialize(asking, {"elicitation": {}})
    response = asking.handle(
        legacy(
            session,
            {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "interview", "arguments": {}}},
        )
    )
    assert response.headers["Content-Type"] == "text/event-stream"

    def answer(message: dict[str, Any]) -> None:
        if message.get("method") == "elicitation/create":
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": {"action": "accept", "content": {"name": "Grace"}},
            }
            assert answering.handle(legacy(session, reply)).status == 202

    seen = follow(asking, session, response, answer, resumer=answering)
    assert seen[0]["method"] == "elicitation/create"
    assert seen[0]["params"]["message"] == "Your name?"
    assert seen[-1] == {"jsonrpc": "2.0", "id": 5, "result": seen[-1]["result"]}
    assert seen[-1]["result"]["content"][0]["text"] == "Interviewed Grace"
    # The second answer to the same request is refused quietly: the first one won.
    late = {"jsonrpc": "2.0", "id": seen[0]["id"], "result": {"action": "decline"}}
    assert answering.handle(legacy(session, late)).status == 202


def test_under_wsgi_a_call_waiting_for_a_human_releases_its_thread() -> None:
    store = MemoryStore()
    point = endpoint(store, wait_detach_seconds=0.05, wait_retry_ms=40)
    session = initialize(point, {"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "interview", "arguments": {}}}
    first = events(point, point.handle(legacy(session, call)))
    # The response ended (the WSGI thread is free) with the question, and a retry hint.
    question = next(e["data"] for e in first if e["data"])
    assert question["method"] == "elicitation/create"
    assert not any(e["data"] and "result" in e["data"] for e in first)
    assert first[-1]["id"] and first[-1]["data"] is None
    reply = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"name": "Lin"}}}
    assert point.handle(legacy(session, reply)).status == 202
    resumed = point.handle(
        request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY, last_event_id=first[-1]["id"])
    )
    final = [e["data"] for e in events(point, resumed) if e["data"]][-1]
    assert final["id"] == 12 and final["result"]["content"][0]["text"] == "Interviewed Lin"


def test_under_wsgi_an_idle_get_stream_releases_its_thread() -> None:
    """A legacy client keeps its session's GET stream open, reopening it whenever it ends.
    Under WSGI an open stream is one of the server's threads: held for ``stream_hold_seconds``
    (25 s by default), a gunicorn worker with four threads and four connected clients served
    nobody else until a stream ended. An idle GET stream is a short poll there, as a resumed
    call stream is, and what was logged for the session in between reaches the next one."""
    store = MemoryStore()
    point = endpoint(store, stream_hold_seconds=30, blocking_hold_seconds=0.1, wait_retry_ms=40)
    session = initialize(point)
    started = time.monotonic()
    first = events(point, point.handle(request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY)), 10)
    assert time.monotonic() - started < 5, "an idle GET stream held its WSGI thread"
    # It ended with an id to come back with (the priming event, whose retry hint is short).
    assert first and first[-1]["id"] and not any(e["data"] for e in first)
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    store.append_event(session, "get", json.dumps(note))
    resumed = point.handle(
        request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY, last_event_id=first[-1]["id"])
    )
    started = time.monotonic()
    assert [e["data"] for e in events(point, resumed, 10) if e["data"]] == [note]
    assert time.monotonic() - started < 5, "a resumed GET stream held its WSGI thread"


def test_a_quick_answer_arrives_on_the_open_stream() -> None:
    store = MemoryStore()
    point = endpoint(store, wait_detach_seconds=5)  # far longer than this client takes to answer
    session = initialize(point, {"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "interview", "arguments": {}}}
    response = point.handle(legacy(session, call))
    messages = []
    for chunk in point.iter_body(response):
        data = [line[6:] for line in chunk.decode().split("\n") if line.startswith("data: ")]
        if not data or not data[0]:
            continue
        message = json.loads(data[0])
        messages.append(message)
        if message.get("method") == "elicitation/create":
            answer = {"action": "accept", "content": {"name": "Q"}}
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
            assert point.handle(legacy(session, reply)).status == 202
    assert messages[-1]["result"]["content"][0]["text"] == "Interviewed Q"


def test_under_asgi_the_call_stream_stays_open_while_it_waits() -> None:
    import asyncio

    store = MemoryStore()
    asking, answering = endpoint(store), endpoint(store)
    session = initialize(asking, {"elicitation": {}})
    call = legacy(
        session, {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "interview", "arguments": {}}}
    )

    async def run() -> list[dict[str, Any]]:
        response = await asking.handle_from_other_loop(call)
        seen = []
        async for chunk in asking.aiter_body(response):
            data = [line[6:] for line in chunk.decode().split("\n") if line.startswith("data: ")]
            if not data or not data[0]:
                continue
            message = json.loads(data[0])
            seen.append(message)
            if message.get("method") == "elicitation/create":
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"action": "accept", "content": {"name": "Ada"}},
                }
                assert (await answering.handle_from_other_loop(legacy(session, reply))).status == 202
        return seen

    seen = asyncio.run(run())
    # One response carried the question and the answer's result: no resumption needed.
    assert [m.get("method") for m in seen] == ["elicitation/create", None]
    assert seen[-1]["result"]["content"][0]["text"] == "Interviewed Ada"


def test_unanswered_elicitation_ends_as_cancel() -> None:
    store = MemoryStore()
    point = endpoint(store, request_timeout=0.3)
    session = initialize(point, {"elicitation": {}})
    response = point.handle(
        legacy(
            session,
            {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "interview", "arguments": {}}},
        )
    )
    final = follow(point, session, response)[-1]
    assert final["result"]["content"][0]["text"] == "No interview (cancel)"


def call_reporting_progress(session: str, request_id: int, tool: str) -> HTTPRequest:
    """A legacy ``tools/call`` of ``tool`` asking for progress notifications."""
    params = {"name": tool, "arguments": {}, "_meta": {"progressToken": f"p{request_id}"}}
    return legacy(session, {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


@pytest.mark.parametrize("resume_on", ["same", "other"])
def test_stream_closed_by_the_server_resumes_on_any_worker(resume_on: str) -> None:
    store = MemoryStore()
    first, second = endpoint(store), endpoint(store)
    session = initialize(first)
    call = call_reporting_progress(session, 9, "slow_report")
    before = events(first, first.handle(call))
    assert before[0]["id"] is not None and before[0]["data"] is None  # the priming event
    assert before[-1]["data"]["params"]["message"] == "half way"
    last_id = before[-1]["id"]
    resumer = first if resume_on == "same" else second
    resumed = resumer.handle(
        request(
            "GET",
            mcp_session_id=session,
            mcp_protocol_version=LEGACY,
            last_event_id=last_id,
            accept="text/event-stream",
        )
    )
    after = [e["data"] for e in events(resumer, resumed) if e["data"]]
    assert after[0]["params"]["message"] == "done"
    assert after[-1]["id"] == 9 and after[-1]["result"]["content"][0]["text"] == "report ready"


class FinalEventFails(MemoryStore):
    """A store whose database fails when a call's answer is logged."""

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        if final:
            raise RuntimeError("database is gone")
        return super().append_event(session_id, stream_key, message, final)


def test_an_answer_that_cannot_be_logged_ends_the_stream_with_an_error() -> None:
    """The call logged a progress event, so its answer goes to the log too; when that write
    fails, the attached client gets a JSON-RPC error and the end of its stream, not a hang."""
    point = endpoint(FinalEventFails())
    session = initialize(point)
    call = call_reporting_progress(session, 11, "steps")
    response = point.runner.run(point.handle_async(call))
    read: list[list[dict[str, Any]]] = []
    # A daemon reader: a stream that never ended fails the test instead of hanging the run.
    reader = threading.Thread(target=lambda: read.append(events(point, response)), daemon=True)
    reader.start()
    reader.join(10)
    assert read, "the stream never ended"
    got = [e["data"] for e in read[0] if e["data"]]
    assert got[0]["params"]["message"] == "one step"
    assert got[-1] == {"jsonrpc": "2.0", "id": 11, "error": {"code": -32603, "message": "Internal server error"}}


class EventLogFails(MemoryStore):
    """A store whose database fails the reads of a session's event log while ``failing``."""

    failing = False

    def events_after(self, session_id: str, stream_key: str, after: int) -> list[Any]:
        if self.failing:
            raise RuntimeError("too many clients already")
        return super().events_after(session_id, stream_key, after)


def test_a_stream_whose_event_log_cannot_be_read_ends_for_the_client_to_resume(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Many connected clients can take every connection the database has. A GET stream whose
    read of the event log then failed let the error out to the WSGI or ASGI server, which cut
    the response and logged it as its own crash, out of reach of the ``mcp_common`` loggers
    an operator routes; the official client, cut twice, stopped its GET stream for good and
    never heard of an elicitation completed later. The stream ends as a held one does, with
    the id to resume from, and a notice logged meanwhile arrives on the resumed stream."""
    caplog.set_level(logging.INFO, logger="mcp_common")
    store = EventLogFails()
    point = endpoint(store, blocking_hold_seconds=0.1, wait_retry_ms=40)
    session = initialize(point)
    get = {"mcp_session_id": session, "mcp_protocol_version": LEGACY}
    first = events(point, point.handle(request("GET", **get)), 10)
    store.failing = True
    cut = events(point, point.handle(request("GET", **get, last_event_id=first[-1]["id"])), 10)
    assert cut and [e["id"] for e in cut] == [first[-1]["id"]] * len(cut) and not any(e["data"] for e in cut)
    assert "failed; retrying" in caplog.text and "too many clients already" in caplog.text
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    store.append_event(session, "get", json.dumps(note))
    store.failing = False
    resumed = events(point, point.handle(request("GET", **get, last_event_id=cut[-1]["id"])), 10)
    assert [e["data"] for e in resumed if e["data"]] == [note]
    assert "works again" in caplog.text


class SharedDatabase(MemoryStore):
    """A store other workers read too (a database file or server)."""

    def process_private(self) -> bool:
        return False


@pytest.mark.parametrize("private", [True, False])
def test_the_heartbeat_is_written_only_where_another_worker_can_read_it(private: bool) -> None:
    store = MemoryStore() if private else SharedDatabase()
    point = endpoint(store, heartbeat_interval=0.01)
    initialize(point)  # the first request enters the server's lifespan, which beats
    deadline = time.monotonic() + 5
    while store.worker_seen(worker_id()) is None and time.monotonic() < deadline and not private:
        time.sleep(0.01)
    time.sleep(0.05)  # several beats' time
    assert (store.worker_seen(worker_id()) is not None) is not private


def strict_json(text: str | bytes) -> Any:
    """``json.loads`` refusing ``NaN`` and the infinities, which JSON does not have."""
    return json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} is not JSON: {text!r}"))


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_number_json_cannot_write_goes_out_as_null(era: str) -> None:
    """The SDK takes any float as progress and writes ``NaN`` as ``null``: so does the endpoint."""
    server = MCPServer("Odd numbers")

    @server.tool()
    async def odd(ctx: Context) -> str:
        await ctx.report_progress(float("nan"), float("inf"))
        return "done"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    if era == "modern":
        call = modern_call("odd", {})
        message = json.loads(call.body)
        message["params"]["_meta"]["progressToken"] = "p"
        call.body = json.dumps(message).encode()
    else:
        call = call_reporting_progress(initialize(point), 3, "odd")
    response = point.handle(call)
    raw = b"".join(point.iter_body(response))
    messages = [strict_json(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: {")]
    progress = messages[0]["params"]
    assert (progress["progress"], progress["total"]) == (None, None)
    assert messages[-1]["result"]["content"][0]["text"] == "done"


MALFORMED_EVENT_IDS = {
    "superscript-two": "abc.\xb2",  # the latin-1 byte 0xb2 as a WSGI server decodes it: "²", a digit to str.isdigit
    "arabic-indic-digit": "abc.\u0663",
    "past-int64": "abc." + "9" * 19,
    "past-int-parsing": "abc." + "9" * 4301,
    "no-number": "abc.",
    "no-stream": ".12",
    "sign": "abc.-1",
}


@pytest.mark.parametrize("last_event_id", MALFORMED_EVENT_IDS.values(), ids=list(MALFORMED_EVENT_IDS))
def test_a_malformed_last_event_id_is_refused(last_event_id: str) -> None:
    """Refused before any stream starts: ASCII digits only, and a number the store's int64
    column holds."""
    point = endpoint(MemoryStore())
    session = initialize(point)
    resumed = point.handle(
        request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY, last_event_id=last_event_id)
    )
    assert (resumed.status, json.loads(resumed.body)["error"]) == (
        400,
        {"code": -32600, "message": "Malformed Last-Event-ID"},
    )


def test_the_largest_event_number_is_read() -> None:
    assert parse_event_id("abc." + "9" * 18) == ("abc", 10**18 - 1)
    assert parse_event_id("a.b.007") == ("a.b", 7)


def test_a_call_stream_lost_after_its_priming_event_is_resumed_with_the_answer() -> None:
    """The priming event gives the client an id to resume from at once. A client whose
    connection drops before anything else was sent (a WSGI server notices only when it next
    writes) resumes on another worker and must still get the call's answer."""
    server = MCPServer("Napper")
    release = threading.Event()

    @server.tool()
    async def long_nap(ctx: Context) -> str:  # a Context: the full path, an SSE stream
        await anyio.to_thread.run_sync(release.wait)
        return "rested"

    store = MemoryStore()
    first = MCPEndpoint(server, MCPConfig(poll_interval=0.02, blocking_hold_seconds=0.1), store)
    second = MCPEndpoint(server, MCPConfig(poll_interval=0.02, blocking_hold_seconds=0.1), store)
    session = initialize(first)
    call = {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "long_nap", "arguments": {}}}
    response = first.handle(legacy(session, call))
    body = first.iter_body(response)
    priming = next(body).decode()
    last_id = next(line[4:] for line in priming.split("\n") if line.startswith("id: "))
    # The connection is gone; the server has not noticed. The client resumes elsewhere.
    release.set()
    deadline = time.monotonic() + 5
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        resumed = second.handle(
            request("GET", mcp_session_id=session, mcp_protocol_version=LEGACY, last_event_id=last_id)
        )
        for event in events(second, resumed):
            last_id = event["id"] or last_id
            if event["data"]:
                seen.append(event["data"])
        if seen and "result" in seen[-1]:
            break
    assert seen and seen[-1]["id"] == 21 and seen[-1]["result"]["content"][0]["text"] == "rested", seen


_APP_STATE: contextvars.ContextVar[str | None] = contextvars.ContextVar("app_state", default=None)


def test_the_servers_lifespan_runs_outside_the_request_that_entered_it() -> None:
    """The first request enters the server's lifespan, which then runs for the life of the
    process: it must not keep that request (its caller, or what the application set around
    it), as the SDK's own server never runs a lifespan inside a request."""
    seen: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        seen["entered"] = (current_request.get(), _APP_STATE.get())
        yield {}

    server = MCPServer("Lifespan", lifespan=lifespan)
    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    token = _APP_STATE.set("the first caller's")
    try:
        first = request("POST", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, mcp_protocol_version=MODERN)
        first.principal = "alice"
        point.handle(first)
    finally:
        _APP_STATE.reset(token)
    assert seen["entered"] == (None, None)


def _hello_endpoint(lifespan: Any, store: MemoryStore | None = None) -> MCPEndpoint:
    """An endpoint of a server with ``lifespan`` and one tool, ``hello``."""
    server = MCPServer("Lifespan", lifespan=lifespan)

    @server.tool()
    def hello() -> str:
        return "hello"

    return MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), store or MemoryStore())


def test_a_lifespan_that_failed_is_entered_again_by_the_next_request() -> None:
    """The server's lifespan failed as the first request entered it (its database not up
    yet): that request fails, and the next one enters the lifespan again rather than failing
    like it for the life of the process."""
    attempts: list[int] = []

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise RuntimeError("the database is not up yet")
        yield {}

    point = _hello_endpoint(lifespan)
    try:
        failed = point.handle(modern_call("hello", {}))
        assert failed.status == 500, failed.body
        served = point.handle(modern_call("hello", {}))
        assert served.status == 200, served.body
        assert json.loads(served.body)["result"]["content"][0]["text"] == "hello", served.body
        assert attempts == [1, 2]
    finally:
        point.close()


def test_a_request_waiting_for_the_lifespan_is_answered_when_the_endpoint_closes() -> None:
    """``close()`` while the server's lifespan is still starting (its database slow to
    answer): the request waiting for it gets an error, rather than waiting forever (its
    worker thread with it)."""
    entered = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        entered.set()
        await anyio.sleep_forever()
        yield {}

    point = _hello_endpoint(lifespan)
    answered: list[HTTPResponse] = []
    waiting = threading.Thread(target=lambda: answered.append(point.handle(modern_call("hello", {}))), daemon=True)
    try:
        waiting.start()
        assert entered.wait(5)
    finally:
        point.close()
    waiting.join(5)
    assert answered, "the request still waits for a lifespan that close() ended"
    assert answered[0].status == 500, answered[0].body
    assert json.loads(answered[0].body)["error"]["message"] == "Internal server error", answered[0].body


def test_close_ends_a_streaming_call_with_an_error_the_client_can_read() -> None:
    """``close()`` while a 2026-07-28 call streams (it reported progress and works on): the call
    ends with the lifespan it runs under, and its stream with a JSON-RPC error, not a broken
    response."""
    server = MCPServer("Streaming")
    working = threading.Event()

    @server.tool()
    async def long_report(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half way")
        working.set()
        await anyio.sleep_forever()
        return "never"

    @server.tool()
    def ping() -> str:
        return "pong"

    @server.tool()
    async def long_silence() -> str:
        working.set()
        await anyio.sleep_forever()
        return "never"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    cancelled = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Request cancelled"}}
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    streamed = point.handle(modern_call("long_report", {}, _meta={**meta, "progressToken": "p"}))
    assert streamed.stream is not None
    read: list[list[dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: read.append(events(point, streamed)), daemon=True)
    reader.start()
    assert working.wait(5)
    point.close()
    reader.join(10)
    (seen,) = read
    assert [event["data"].get("method") for event in seen] == ["notifications/progress", None]
    assert seen[-1]["data"] == cancelled

    # A call that has sent nothing yet gets the same error, as its JSON answer: the first
    # request of a lifespan takes the SDK's path, the next ones the fast path.
    for warm in (False, True):
        if warm:
            assert json.loads(point.handle(modern_call("ping", {})).body)["result"]["content"][0]["text"] == "pong"
        working.clear()
        answered: list[HTTPResponse] = []

        def call_and_wait(answered: list[HTTPResponse] = answered) -> None:
            answered.append(point.handle(modern_call("long_silence", {})))

        waiting = threading.Thread(target=call_and_wait)
        waiting.start()
        assert working.wait(5)
        point.close()
        waiting.join(10)
        (answer,) = answered
        assert answer.stream is None and json.loads(answer.body) == cancelled, (warm, answer.body)


def test_close_ends_a_legacy_call_answered_as_json() -> None:
    """A legacy session on an endpoint that answers JSON (``json_response``), its call on the
    SDK's path (the tool takes the context): ``close()`` ends it as it ends the others, with
    "Request cancelled". It ran on under no lifespan, its request waiting for ever."""
    server = MCPServer("Json")
    working = threading.Event()

    @server.tool()
    async def long_job(ctx: Context) -> str:
        working.set()
        await anyio.sleep_forever()
        return "never"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,), json_response=True), MemoryStore())
    session = initialize(point)
    answered: list[HTTPResponse] = []
    body = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "long_job", "arguments": {}}}
    waiting = threading.Thread(target=lambda: answered.append(point.handle(legacy(session, body))), daemon=True)
    waiting.start()
    assert working.wait(5)
    point.close()
    waiting.join(10)
    assert answered, "the call outlived close()"
    (answer,) = answered
    assert answer.status == 200 and answer.stream is None, answer.body
    assert json.loads(answer.body) == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32001, "message": "Request cancelled"},
    }


@pytest.mark.parametrize("tool", ["async_nap", "sync_nap"])
def test_an_asgi_request_cancelled_by_its_server_is_cancelled_whatever_its_tool(tool: str) -> None:
    """An ASGI view's call that its server (or the application: a timeout around the view)
    cancels is cancelled: the cancellation reaches the one who asked for it, as a timeout's
    ``TimeoutError``. An async tool's call on the fast path answered "Request cancelled"
    instead, and the application's timeout never fired."""
    server = MCPServer("Naps")

    @server.tool()
    async def async_nap() -> str:
        await anyio.sleep(5)
        return "late"

    @server.tool()
    def sync_nap() -> str:
        time.sleep(0.5)
        return "late"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())

    async def call_with_a_timeout() -> None:
        async with asyncio.timeout(0.2):
            await point.handle_from_other_loop(modern_call(tool, {}))

    try:
        asyncio.run(point.handle_from_other_loop(modern_call("sync_nap", {})))  # the fast path from now on
        with pytest.raises(TimeoutError):
            asyncio.run(call_with_a_timeout())
    finally:
        point.close()


def test_an_asgi_request_cancelled_before_its_answer_began_cancels_its_tool() -> None:
    """On the 2026-07-28 wire a client cancels a call by closing its response: an ASGI server
    (Django's handler on ``http.disconnect``) then cancels the view. A call that had sent
    nothing yet kept running to its end, however long, on the SDK's path (a tool taking a
    ``Context``); the SDK's own server cancels it, as this endpoint does once the answer has
    begun to stream."""
    server = MCPServer("Naps")
    started = threading.Event()
    outcome: list[str] = []

    @server.tool()
    async def nap(ctx: Context) -> str:
        started.set()
        try:
            await anyio.sleep(60)  # far longer than a busy machine takes to cancel it
        except BaseException as exc:
            outcome.append(type(exc).__name__)
            raise
        outcome.append("finished")
        return "late"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())

    async def disconnect_during_the_call() -> list[str]:
        view = asyncio.create_task(point.handle_from_other_loop(modern_call("nap", {})))
        assert await asyncio.to_thread(started.wait, 5)
        view.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await view
        deadline = time.monotonic() + 10
        while not outcome and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return list(outcome)  # before close(), which would cancel it anyway

    try:
        seen = asyncio.run(disconnect_during_the_call())
    finally:
        point.close()
    assert seen == ["CancelledError"]


def test_the_first_call_of_a_sync_tool_runs_on_the_callers_thread_as_every_later_one() -> None:
    """A WSGI request's sync tool runs on the request's own thread (with its database
    connection: a Django ``TestCase``'s uncommitted rows are visible there), from the very first
    request of the process on, not on another thread for that one only."""
    server = MCPServer("Threads")
    seen: list[threading.Thread] = []

    @server.tool()
    def where() -> str:
        seen.append(threading.current_thread())
        return "here"

    point = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    try:
        for _ in range(2):
            answer = point.handle(modern_call("where", {}))
            assert json.loads(answer.body)["result"]["content"][0]["text"] == "here", answer.body
        assert seen == [threading.current_thread()] * 2
    finally:
        point.close()


class ThreadClosing(MemoryStore):
    """Records which threads closed their connections, and what ran on them."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[str] = []
        self.ran_on: set[str] = set()

    def close_thread_connections(self) -> None:
        self.closed.append(threading.current_thread().name)

    def expire_elicitations(self, now: float) -> int:
        self.ran_on.add(threading.current_thread().name)
        return super().expire_elicitations(now)


def test_an_idle_endpoint_has_each_database_thread_close_its_connections() -> None:
    """The endpoint's database threads hold connections nothing else closes (Django's request
    signals never reach them): after a second with no store call, each closes its own, once;
    a busy endpoint's keep theirs."""
    store = ThreadClosing()
    point = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,), heartbeat_interval=0.05), store)
    try:
        assert point.handle(modern_call("steps", {})).status == 200
        time.sleep(0.8)  # heartbeats every 50 ms: never idle
        assert store.closed == []
        point.close()  # no more heartbeats
        # One closing task for each thread the pool may hold: wait for all of them, however
        # slowly a busy machine runs them, not a fixed while after the first.
        deadline = time.monotonic() + 10
        while len(store.closed) < point._executor._max_workers and time.monotonic() < deadline:
            time.sleep(0.05)
        threads = {thread.name for thread in point._executor._threads}
        assert store.ran_on <= threads
        assert sorted(store.closed) == sorted(threads)  # each thread, once
        time.sleep(1.2)
        assert len(store.closed) == len(threads)  # idle since: nothing more to close
    finally:
        point.close()


def test_shutdown_has_every_database_thread_close_its_connections_one_busy_with_a_call_too() -> None:
    """``shutdown()`` while a database thread still runs a store call (one no request waits
    for any more, or one just returning, whose thread the pool does not count as idle yet: a
    loaded machine's heartbeat at a test's teardown). The pool started a new thread for the
    closing instead, and the busy thread ended with its connection open, left to the garbage
    collector (psycopg's "connection deleted while still open", failing a later test)."""
    busy, finish = threading.Event(), threading.Event()

    class ClosingLets(ThreadClosing):
        def close_thread_connections(self) -> None:
            super().close_thread_connections()
            finish.set()  # the busy call ends once the others are closing

    store = ClosingLets()

    def long_query() -> None:
        store.ran_on.add(threading.current_thread().name)
        busy.set()
        finish.wait(5)

    point = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), store)
    try:
        assert point.handle(modern_call("steps", {})).status == 200  # the process's machinery
        call = asyncio.run_coroutine_threadsafe(point.db(long_query), point.runner.loop)
        assert busy.wait(5)
    finally:
        point.shutdown()
    call.result(5)
    assert store.ran_on <= set(store.closed), (store.ran_on, store.closed)


@pytest.mark.parametrize(("configured", "expected"), [(None, 6), (2, 2)])
def test_db_threads_bounds_the_threads_and_so_the_connections_of_the_endpoints_store(
    configured: int | None, expected: int
) -> None:
    """``MCPConfig.db_threads`` (``MCP["DB_THREADS"]``, ``MCP_DB_THREADS``): the most database
    threads (each with its connection) one endpoint uses at once in a process, default 8."""
    settings: dict[str, Any] = {"secret_keys": (SECRET,)}
    if configured is not None:
        settings["db_threads"] = configured
    point = MCPEndpoint(build_server(), MCPConfig(**settings), MemoryStore())
    used: set[str] = set()

    def query() -> None:
        used.add(threading.current_thread().name)
        time.sleep(0.1)

    async def six_at_once() -> None:
        await asyncio.gather(*(point.db(query) for _ in range(6)))

    try:
        assert point.handle(modern_call("steps", {})).status == 200  # the process's machinery
        point.runner.run(six_at_once())
    finally:
        point.shutdown()
    assert len(used) == expected, used


class SlowSweep(MemoryStore):
    """A store whose expiry sweep takes a while (a busy database)."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeping = threading.Event()
        self.swept = threading.Event()

    def expire_elicitations(self, now: float) -> int:
        self.sweeping.set()
        time.sleep(0.3)
        try:
            return super().expire_elicitations(now)
        finally:
            self.swept.set()


def test_close_returns_once_the_lifespan_and_its_database_work_are_over() -> None:
    """What follows ``close()`` (a test's teardown, an orderly shutdown) closes the store's
    connections: a heartbeat still writing then holds one that the engine's disposal cannot
    close, left open until the garbage collector finds it; and the lifespan's own clean-up
    must have run."""
    exited = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            exited.set()

    store = SlowSweep()
    point = _hello_endpoint(lifespan, store)
    try:
        assert point.handle(modern_call("hello", {})).status == 200
        assert store.sweeping.wait(5)
    finally:
        point.close()
    assert store.swept.is_set(), "close() returned with the heartbeat's sweep still running"
    assert exited.is_set(), "close() returned before the server's lifespan exited"
    assert point.handle(modern_call("hello", {})).status == 200  # a request after it enters it again
    point.close()


class FailingSweep(SlowSweep):
    """A store whose slow expiry sweep then fails (the database going away at shutdown)."""

    def expire_elicitations(self, now: float) -> int:
        super().expire_elicitations(now)
        raise ConnectionError("the database went away")


def test_close_during_a_failing_database_call_leaves_no_unretrieved_error(caplog: pytest.LogCaptureFixture) -> None:
    """The heartbeat's call that close() waits for may fail: the heartbeat is over by then, and
    no error goes to the log as asyncio's "Task exception was never retrieved" traceback."""
    store = FailingSweep()
    point = _hello_endpoint(None, store)
    assert point.handle(modern_call("hello", {})).status == 200
    assert store.sweeping.wait(5)
    point.close()
    assert store.swept.is_set()
    gc.collect()
    time.sleep(0.1)  # asyncio logs it from the loop's thread
    gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_lifespan_that_failed_is_logged_once_by_the_request_it_failed(caplog: pytest.LogCaptureFixture) -> None:
    """The lifespan's error goes to the requests waiting for it, which log it: its task does
    not raise it again, for asyncio to log once more at every failed attempt as "Task
    exception was never retrieved" (an error of asyncio's own, to all appearances)."""

    @contextlib.asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[dict[str, Any]]:
        raise RuntimeError("the database is not up yet")
        yield {}

    point = _hello_endpoint(lifespan)
    try:
        with caplog.at_level(logging.ERROR):
            assert point.handle(modern_call("hello", {})).status == 500
            gc.collect()  # the ended task, which asyncio logs on its way out if it raised
    finally:
        point.close()
    logged = [(record.name, record.getMessage()) for record in caplog.records]
    assert logged == [("mcp_common", "MCP endpoint 'Lifespan' failed to serve a request")], logged


class FailsOnceWithARuntimeError(SharedDatabase):
    """A shared store whose first expiry sweep raises a ``RuntimeError`` subclass."""

    def __init__(self) -> None:
        super().__init__()
        self.beats = 0
        self.sweeps = 0

    def beat_worker(self, worker: str, now: float) -> None:
        self.beats += 1
        super().beat_worker(worker, now)

    def expire_elicitations(self, now: float) -> int:
        self.sweeps += 1
        if self.sweeps == 1:
            raise NotImplementedError("not yet")
        return super().expire_elicitations(now)


class FailsFiveSweeps(FailsOnceWithARuntimeError):
    """A shared store whose first five expiry sweeps fail: a database away for five beats."""

    def expire_elicitations(self, now: float) -> int:
        self.sweeps += 1
        if self.sweeps <= 5:
            raise ConnectionError("the database went away")
        return SharedDatabase.expire_elicitations(self, now)


@pytest.mark.heartbeat_logs
def test_a_heartbeat_outage_is_logged_when_it_starts_and_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    """Five failed beats in a row: one WARNING with the traceback, then an INFO at the first
    beat that works (it was a WARNING per beat, for as long as the database was away). Each
    names its endpoint: a site serves several, and other tests' endpoints beat in this process
    too (pytest-django refuses their database access outside a database test)."""
    store = FailsFiveSweeps()
    caplog.set_level(logging.INFO, logger="mcp_common")
    point = endpoint(store, name="Outage-5", heartbeat_interval=0.01)
    try:
        initialize(point)

        def logged() -> list[tuple[str, str]]:
            return [(r.levelname, r.getMessage()) for r in caplog.records if "'Outage-5'" in r.getMessage()]

        deadline = time.monotonic() + 10
        while len(logged()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        (warning, back) = logged()
        assert warning == ("WARNING", "The heartbeat of MCP endpoint 'Outage-5' failed; retrying")
        assert back[0] == "INFO", back
        assert back[1].startswith("The heartbeat of MCP endpoint 'Outage-5' works again after"), back
        assert back[1].endswith("(5 failed attempts)"), back
    finally:
        point.close()


@pytest.mark.heartbeat_logs
def test_a_beat_that_fails_with_a_runtime_error_does_not_stop_the_heartbeat(caplog: pytest.LogCaptureFixture) -> None:
    """Only the process's shutdown ends the heartbeat: had a failed beat stopped it, the other
    workers would take this live worker for dead and end its streams."""
    store = FailsOnceWithARuntimeError()
    point = endpoint(store, name="Runtime-1", heartbeat_interval=0.01)
    try:
        initialize(point)
        deadline = time.monotonic() + 5
        while store.beats < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.beats >= 3
        assert "The heartbeat of MCP endpoint 'Runtime-1' failed; retrying" in caplog.text
        # Its database threads gone (as at the interpreter's exit), it ends, quietly.
        task = point._lifespan_task
        assert task is not None and not task.done()
        assert point._executor is not None
        point._executor.shutdown()
        while not task.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert task.done() and not task.cancelled() and task.exception() is None
    finally:
        point.close()


# -- the moment a response starts streaming ------------------------------------------------------

streaming_marker: contextvars.ContextVar[str] = contextvars.ContextVar("streaming_marker", default="json")


class StreamWatcher(MCPEndpoint):
    """Records ``response_started`` and marks the context it runs in, as an adapter would."""

    fail = False

    def response_started(self, request: HTTPRequest, handler: str) -> None:
        self.started.append(handler)
        streaming_marker.set("streaming")
        if self.fail:
            raise RuntimeError("an adapter's bug")


def _watched(fail: bool = False) -> StreamWatcher:
    server = MCPServer("Streams")

    @server.tool()
    async def notify_then_look(ctx: Context) -> str:
        before = streaming_marker.get()
        await ctx.report_progress(1, 2, "half way")
        await ctx.report_progress(2, 2, "done")
        return f"{before}->{streaming_marker.get()}"

    @server.tool()
    async def look(ctx: Context) -> str:
        return streaming_marker.get()

    point = StreamWatcher(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    point.started = []
    point.fail = fail
    return point


@pytest.mark.parametrize("fail", [False, True])
def test_the_adapter_hears_when_a_response_starts_streaming_in_the_handlers_context(
    fail: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """2026-07-28: at the first notification (once), not for a JSON answer; legacy on the SDK's
    path: before the handler runs. Always in the handler's own context, and an adapter that
    fails there fails no call."""
    point = _watched(fail)
    try:
        answer = point.handle(modern_call("look", {}))
        assert json.loads(answer.body)["result"]["content"][0]["text"] == "json"
        assert point.started == []
        streamed = point.handle(
            modern_call(
                "notify_then_look",
                {},
                _meta={
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "progressToken": "p",
                },
            )
        )
        assert streamed.stream is not None
        assert events(point, streamed)[-1]["data"]["result"]["content"][0]["text"] == "json->streaming"
        assert point.started == ["notify_then_look"]
        session = initialize(point)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "look", "arguments": {}}}
        legacy_answer = point.handle(legacy(session, call))
        assert legacy_answer.stream is not None
        assert events(point, legacy_answer)[-1]["data"]["result"]["content"][0]["text"] == "streaming"
        assert point.started == ["notify_then_look", "look"]
    finally:
        point.close()
    failures = [r for r in caplog.records if "response_started failed" in r.getMessage()]
    assert len(failures) == (2 if fail else 0)


def test_a_legacy_stream_start_is_heard_before_the_response_is_returned() -> None:
    """The framework finishes a legacy SSE response (Django's SessionMiddleware saves the
    session, Flask its cookie) as soon as the view gets it, on the view's thread: the adapter
    hears of the stream, and switches the handler to its copy of the session, before that,
    never at some point after (which would leave a window where both threads share it)."""
    point = _watched()
    returned = threading.Event()
    heard: list[bool] = []

    def response_started(request: HTTPRequest, handler: str) -> None:
        time.sleep(0.05)  # long enough for the view's thread to get the response, were it free to
        heard.append(returned.is_set())

    point.response_started = response_started  # type: ignore[method-assign]
    try:
        session = initialize(point)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "look", "arguments": {}}}
        answer = point.handle(legacy(session, call))
        returned.set()
        assert answer.stream is not None
        assert events(point, answer)[-1]["data"]["result"]["content"][0]["text"] == "json"
        assert heard == [False]
    finally:
        point.close()


class BrokenStateStore(MemoryStore):
    """A database that fails to save or to redeem a request state (a driver error, a lost
    connection)."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    def save_request_state(self, *args: Any, **kwargs: Any) -> None:
        if self.failing == "save":
            raise RuntimeError("the database went away")
        super().save_request_state(*args, **kwargs)

    def consume_request_state(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing == "redeem":
            raise RuntimeError("the database went away")
        return super().consume_request_state(*args, **kwargs)


@pytest.mark.parametrize(("entry", "failing"), [("wsgi", "save"), ("wsgi", "redeem"), ("asgi", "redeem")])
def test_a_store_failing_in_the_requests_own_thread_is_a_json_rpc_500(
    entry: str, failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The 2026-07-28 fast paths redeem and write request state before the event loop sees
    the request: a failure there is answered as one inside it is (JSON-RPC, logged), never
    raised into the framework, which would answer its own HTML 500 page (Django: the debug
    page, traceback and all)."""
    import asyncio

    point = endpoint(BrokenStateStore(failing))
    call = _failing_call(point, failing)
    with caplog.at_level(logging.ERROR, logger="mcp_common"):
        response = point.handle(call) if entry == "wsgi" else asyncio.run(point.handle_from_other_loop(call))
    assert (response.status, response.headers["Content-Type"]) == (500, "application/json")
    # The request's id, as JSON-RPC wants whenever it could be read: a client waiting on
    # several calls knows which one failed.
    assert json.loads(response.body) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "Internal server error"},
    }
    assert any(record.exc_info and "the database went away" in str(record.exc_info[1]) for record in caplog.records)


def _failing_call(point: MCPEndpoint, failing: str) -> HTTPRequest:
    """The call whose request state the store fails to save, or (``redeem``) to redeem."""
    if failing == "redeem":
        asked = json.loads(point.handle(modern_call("hello", {})).body)["result"]
        ((key, _),) = asked["inputRequests"].items()
        answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
        return modern_call("hello", {}, requestState=asked["requestState"], inputResponses=answer)
    return modern_call("hello", {})


class ExhaustedPoolStore(BrokenStateStore):
    """A database whose connection pool had no connection free in time (the store says so)."""

    def pool_exhausted(self, error: BaseException) -> bool:
        return isinstance(error, RuntimeError) and "went away" in str(error)


@pytest.mark.parametrize(("entry", "failing"), [("wsgi", "save"), ("wsgi", "redeem"), ("asgi", "redeem")])
def test_an_exhausted_connection_pool_is_a_json_rpc_503_to_retry(
    entry: str, failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    """More requests at once than the pool has connections for is no bug: the client is told
    to retry (503, ``Retry-After``), the log says what bounds it, without a traceback."""
    import asyncio

    point = endpoint(ExhaustedPoolStore(failing))
    call = _failing_call(point, failing)
    with caplog.at_level(logging.WARNING, logger="mcp_common"):
        response = point.handle(call) if entry == "wsgi" else asyncio.run(point.handle_from_other_loop(call))
    assert (response.status, response.headers["Content-Type"]) == (503, "application/json")
    assert response.headers["Retry-After"] == "1"
    assert json.loads(response.body) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "Server busy: no database connection is free; retry shortly"},
    }
    (record,) = [r for r in caplog.records if r.name.startswith("mcp_common")]
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "no database connection was free within the pool's timeout" in record.getMessage()


FORKED_CLOSE = textwrap.dedent(
    """
    import os, time
    from tests.core.test_endpoint import _hello_endpoint, modern_call

    point = _hello_endpoint(None)
    assert point.handle(modern_call("hello", {})).status == 200  # its lifespan runs in this process
    child = os.fork()
    if child == 0:
        started = time.monotonic()
        point.close()  # a worker's shutdown hook: this process never entered the lifespan
        os._exit(0 if time.monotonic() - started < 2 else 1)
    _, status = os.waitpid(child, 0)
    point.close()
    print("child", os.waitstatus_to_exitcode(status))
    """
)


def test_close_in_a_forked_worker_that_served_nothing_returns_at_once() -> None:
    """A forked worker (gunicorn's --preload, a Celery prefork child) holds a copy of the
    parent's endpoint, whose lifespan runs on the parent's event loop, a thread the child does
    not have: its close() has no lifespan to wait for."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CLOSE], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "0"], "close() in the child waited for the parent's lifespan"


def test_a_legacy_request_whose_id_no_row_can_hold_is_refused_before_its_tool_runs() -> None:
    """A question's row keeps the asking call's id (as JSON, up to 255 characters) to end the
    call if its worker dies. A longer id failed that write on PostgreSQL and MySQL once the
    tool had run up to its question (a 500, the tool's work half done); it is refused up front."""
    store = MemoryStore()
    point = endpoint(store)
    session = initialize(point, {"elicitation": {}})
    call = {"method": "tools/call", "params": {"name": "interview", "arguments": {}}}
    refused = point.handle(legacy(session, {"jsonrpc": "2.0", "id": "x" * 254, **call}))
    assert refused.status == 400
    reply = json.loads(refused.body)
    assert reply["error"]["code"] == -32600 and "255" in reply["error"]["message"], reply
    assert reply["id"] == "x" * 254
    assert store._elicitations == {}  # the tool never reached its question
    # At the limit (253 characters and their quotes) the call goes ahead and asks.
    asked = point.handle(legacy(session, {"jsonrpc": "2.0", "id": "x" * 253, **call}))
    assert asked.status == 200 and asked.headers["Content-Type"] == "text/event-stream"
    point.close()


_stops: list[BaseException] = []
"""What the ``leave*`` tools raise (set by the test)."""


def _leave() -> Any:
    stop = _stops[-1]
    raise type(stop)(*stop.args)


def _resolve_leaving() -> str:
    return _leave()


def _resolve_staying() -> str:
    return "stays"


def leaving_server() -> MCPServer:
    server = MCPServer("Leaving")

    @server.tool()
    async def leave_async(ctx: Context) -> str:
        return _leave()

    @server.tool()
    def leave_sync(ctx: Context) -> str:
        return _leave()

    @server.tool()
    def leave_resolving(value: Annotated[str, Resolve(_resolve_leaving)], ctx: Context) -> str:
        return value

    # Without a Context: the fast path serves these.
    @server.tool()
    async def leave_plain_async() -> str:
        return _leave()

    @server.tool()
    def leave_plain_sync() -> str:
        return _leave()

    @server.tool()
    def leave_plain_resolving(value: Annotated[str, Resolve(_resolve_leaving)]) -> str:
        return value

    @server.tool()
    def leave_plain_resolved(value: Annotated[str, Resolve(_resolve_staying)]) -> str:
        return _leave()

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server


LEAVING_TOOLS = ["leave_async", "leave_sync", "leave_resolving"]


@pytest.mark.parametrize("stop", [SystemExit(3), KeyboardInterrupt()])
@pytest.mark.parametrize(
    "tool", [*LEAVING_TOOLS, *(name.replace("_", "_plain_", 1) for name in LEAVING_TOOLS), "leave_plain_resolved"]
)
@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_a_tool_that_raises_system_exit_fails_like_any_other_and_the_endpoint_goes_on(
    era: str, tool: str, stop: BaseException
) -> None:
    """A library calling ``sys.exit()`` in a tool (or resolver) the SDK runs: the call fails
    as with any exception, and the process's other calls go on. Raised in a task, it stopped
    the endpoint's event loop: that call, and every later one of the process, hung."""
    _stops.append(stop)
    point = MCPEndpoint(leaving_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    try:
        if era == "legacy":
            session = initialize(point, {})
            body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
            response = point.handle(legacy(session, body))
            if response.stream is None:  # the fast path answers a plain call with JSON
                reply = json.loads(response.body)
            else:
                reply = [e["data"] for e in events(point, response) if e["data"]][-1]
        else:
            reply = json.loads(point.handle(modern_call(tool, {})).body)
        assert reply["result"]["isError"] is True, reply
        assert reply["result"]["content"][0]["text"] == f"Error executing tool {tool}"
        after = json.loads(point.handle(modern_call("echo", {"text": "still here"})).body)
        assert after["result"]["content"][0]["text"] == "still here"
    finally:
        point.close()
        _stops.clear()


@pytest.mark.parametrize("depth", [210, 300])
def test_an_initialize_nested_too_deeply_to_keep_opens_no_session(depth: int) -> None:
    """A session keeps its client's ``initialize`` as JSON that each later request reads back
    with pydantic, which parses 200 levels and writes 255. Deeper, the initialize was a 500,
    or opened a session whose every request was one; the SDK's own transport refuses such a
    message as it parses it (400)."""
    store = MemoryStore()
    point = endpoint(store)
    nested: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        nested = {"a": nested}
    client = {"name": "t", "version": "0"}
    params = {"protocolVersion": LEGACY, "capabilities": {"experimental": {"x": nested}}, "clientInfo": client}
    response = point.handle(request("POST", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
    assert response.status == 400, response.body
    assert json.loads(response.body)["error"]["code"] == -32602
    assert "Mcp-Session-Id" not in response.headers and not store._sessions
    # Within the limits, the same client opens a session that serves.
    session = initialize(point, {"experimental": {"x": {"a": {"b": 1}}}})
    assert point.handle(legacy(session, {"jsonrpc": "2.0", "id": 1, "method": "ping"})).status == 200


def test_a_call_nested_as_deep_as_json_reads_is_a_client_error_not_a_500() -> None:
    """Arguments nested just short of what the JSON parser refuses parse, then fail further in
    (the SDK's request-state seal writes them back as JSON, with fewer levels of stack left):
    that client's mistake was a 500. At every depth it is the client's error, never the
    server's."""
    point = endpoint(MemoryStore())

    def answer(depth: int) -> HTTPResponse:
        call = modern_call("hello", {"x": 0})
        call.body = call.body.replace(b'"x": 0', b'"x": ' + b"[" * depth + b"]" * depth)
        response = point.handle(call)
        assert response.status < 500, (depth, response.body)
        assert json.loads(response.body)["jsonrpc"] == "2.0"
        return response

    try:
        # Where the parser stops depends on the Python (about 1,000 levels on 3.11, 10,000 on
        # 3.13): found coarsely, then every depth just short of it.
        refused = next(depth for depth in range(500, 100_000, 500) if answer(depth).status == 400)
        statuses = {answer(depth).status for depth in range(refused - 500, refused + 1, 2)}
        assert statuses == {200, 400}, statuses  # the deepest are refused, the rest served
    finally:
        point.close()


@pytest.mark.parametrize("method", [[], ["tools/call"], {}, {"name": "tools/call"}])
def test_a_modern_request_whose_method_is_not_a_string_is_invalid_not_a_500(method: Any) -> None:
    """A 2026-07-28 body whose ``method`` is a list or an object is not a JSON-RPC request:
    a 400 the client can read, as a missing method is. Before its request state was looked
    for, it was checked against the set of methods that carry one, which such a value cannot
    be looked up in: a 500."""
    point = endpoint(MemoryStore())
    try:
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": 4, "method": method, "params": {"_meta": meta}}
        response = point.handle(request("POST", body, mcp_protocol_version=MODERN, mcp_method="tools/list"))
        assert response.status == 400, response.body
        assert json.loads(response.body)["error"]["code"] == -32600
    finally:
        point.close()
