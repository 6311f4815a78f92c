"""Under WSGI a call's blocking work runs on its request's own thread while that thread waits
for it (``mcp_common.home``), and that thread is also the one that writes the call's SSE
stream to its client. These tests serve each request as a WSGI server does: ``handle()`` and
the stream's iteration on one thread."""

from __future__ import annotations

import concurrent.futures
import json
import threading
from typing import Any

import anyio.from_thread
import anyio.to_thread
import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mcp_common import MCPEndpoint
from mcp_common.config import MCPConfig
from mcp_common.home import HomeThread
from mcp_common.http import HTTPRequest
from mcp_common.store import MemoryStore
from tests.core.test_endpoint import SECRET, Name, events, initialize, legacy, modern_call


def build_server() -> MCPServer:
    server = MCPServer("Home")

    @server.tool()
    def sync_interview(ctx: Context) -> str:
        """A sync tool (on the request's thread) that waits for its client's answer."""
        answer = anyio.from_thread.run(ctx.elicit, "Your name?", Name)
        return f"Interviewed {answer.data.name}" if answer.action == "accept" else f"No interview ({answer.action})"

    @server.tool()
    def sync_progress(ctx: Context) -> str:
        """A sync tool that reports progress, then goes on until its client has seen it."""
        anyio.from_thread.run(ctx.report_progress, 1, 2)
        return "seen live" if progress_seen.wait(5) else "not seen while the tool ran"

    @server.tool()
    def sync_checks_cancelled(ctx: Context) -> str:
        """A long sync tool's cooperative check, as on any AnyIO worker thread."""
        anyio.from_thread.check_cancelled()
        return "not cancelled"

    @server.tool()
    async def logs_once(ctx: Context) -> str:
        """An async tool whose log message is written to the event log (from the loop), once
        its request's thread has its answer."""
        await anyio.to_thread.run_sync(answered.wait, 10)
        await ctx.info("once")
        return "logged"

    return server


progress_seen = threading.Event()
answered = threading.Event()


def endpoint(store: MemoryStore, **config: Any) -> MCPEndpoint:
    return MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,), poll_interval=0.02, **config), store)


def serve_as_wsgi(point: MCPEndpoint, request: HTTPRequest, on_message: Any = None, timeout: float = 10.0) -> list[Any]:
    """The messages of ``request``'s answer, served and read on one thread of its own as a WSGI
    server does; ``on_message`` sees each as it arrives. Fails after ``timeout`` rather than
    hanging the test."""
    seen: list[Any] = []
    failure: list[BaseException] = []
    ended = threading.Event()

    def serve() -> None:
        try:
            response = point.handle(request)
            if response.stream is None:
                seen.append(json.loads(response.body))
                return
            for chunk in point.iter_body(response):
                for line in chunk.decode().splitlines():
                    if line.startswith("data: ") and line[6:].strip():
                        seen.append(json.loads(line[6:]))
                        if on_message is not None:
                            on_message(seen[-1])
        except BaseException as exc:
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=serve, name="wsgi-request", daemon=True).start()
    assert ended.wait(timeout), f"the answer did not end within {timeout:.0f} s (messages so far: {seen!r})"
    if failure:
        raise failure[0]
    return seen


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
SYNC_INTERVIEW = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "sync_interview"}}


def reply(question: dict[str, Any], **outcome: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": question["id"], **outcome}


def test_a_sync_tool_waiting_for_its_legacy_client_gets_its_answer() -> None:
    """The question goes out on the stream the request's thread writes: a sync tool that waits
    for the answer must not hold that thread (it waited forever, its question never sent)."""
    point = endpoint(MemoryStore())
    try:
        session = initialize(point, {"elicitation": {}})

        def answer(message: dict[str, Any]) -> None:
            if message.get("method") == "elicitation/create":
                accepted = reply(message, result={"action": "accept", "content": {"name": "Grace"}})
                assert point.handle(legacy(session, accepted)).status == 202

        seen = serve_as_wsgi(point, legacy(session, SYNC_INTERVIEW), answer)
        assert seen[0]["method"] == "elicitation/create"
        assert seen[-1]["result"]["content"][0]["text"] == "Interviewed Grace", seen
    finally:
        point.close()


def test_a_sync_tool_asking_a_legacy_client_that_cannot_be_asked_fails_at_once() -> None:
    """A client that declared no way to be asked (no elicitation, sampling or roots) has its
    sync tools run at home; one that asks anyway gets an error at once (the call's answer), rather than
    waiting (until the request times out) for a question its thread cannot send."""
    point = endpoint(MemoryStore())
    try:
        session = initialize(point, {})

        def refuse(message: dict[str, Any]) -> None:
            if message.get("method") == "elicitation/create":  # as a client without the capability
                refused = reply(message, error={"code": -32601, "message": "Method not found"})
                assert point.handle(legacy(session, refused)).status == 202

        seen = serve_as_wsgi(point, legacy(session, SYNC_INTERVIEW), refuse)
        assert seen[-1]["id"] == 5 and "error" in seen[-1], seen
    finally:
        point.close()


@pytest.mark.parametrize("era", ["2026-07-28", "legacy"])
def test_a_sync_tools_progress_reaches_its_client_while_the_tool_runs(era: str) -> None:
    """A client that asked for progress (a progress token) sees it as it is reported: the tool
    does not hold the thread that writes the stream (it held every frame until it returned)."""
    point = endpoint(MemoryStore())
    progress_seen.clear()

    def watch(message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/progress":
            progress_seen.set()

    try:
        if era == "legacy":
            session = initialize(point, {})
            call = {**SYNC_INTERVIEW, "params": {"name": "sync_progress", "_meta": {"progressToken": "p"}}}
            request = legacy(session, call)
        else:
            request = modern_call("sync_progress", {}, _meta={**MODERN_META, "progressToken": "p"})
        seen = serve_as_wsgi(point, request, watch)
        assert seen[-1]["result"]["content"][0]["text"] == "seen live", seen
    finally:
        point.close()


class WriteWatchingStore(MemoryStore):
    """Says on which thread each event-log write ran."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: list[str] = []
        self.written = threading.Event()

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        self.writers.append(threading.current_thread().name)
        self.written.set()
        return super().append_event(session_id, stream_key, message, final)


def test_work_the_requests_thread_does_not_take_runs_on_the_endpoints_database_threads() -> None:
    """The request's thread is away (a test that reads the stream later): after PATIENCE its
    call's store work runs on the endpoint's database threads, whose connections are closed
    when idle, rather than on a thread started for it, whose connection nothing closed (a
    PostgreSQL test database could not be dropped: "being accessed by other users")."""
    store = WriteWatchingStore()
    point = endpoint(store)
    try:
        session = initialize(point, {})
        call = {**SYNC_INTERVIEW, "params": {"name": "logs_once"}}
        answered.clear()
        response = point.handle(legacy(session, call))
        answered.set()  # and this thread goes away for a while
        assert store.written.wait(10), "the notification was never written"
        assert store.writers[0].startswith("mcp-db"), store.writers
        final = events(point, response)[-1]["data"]
        assert final["result"]["structuredContent"] == {"result": "logged"}, final
    finally:
        point.close()


@pytest.mark.parametrize("era", ["2026-07-28", "legacy"])
def test_a_sync_tool_on_the_requests_thread_can_check_for_cancellation(era: str) -> None:
    """``anyio.from_thread.check_cancelled()`` works in a sync tool run on the request's thread
    as on the AnyIO worker thread it replaces (it failed: no cancel scope on that thread)."""
    point = endpoint(MemoryStore())
    try:
        if era == "legacy":
            session = initialize(point, {})
            request = legacy(session, {**SYNC_INTERVIEW, "params": {"name": "sync_checks_cancelled"}})
        else:
            request = modern_call("sync_checks_cancelled", {}, _meta=MODERN_META)
        final = serve_as_wsgi(point, request)[-1]
        assert final["result"]["structuredContent"] == {"result": "not cancelled"}, final
    finally:
        point.close()


def test_a_wait_that_leaves_no_work_behind_starts_no_timer_thread() -> None:
    """The wake-up a finished outcome leaves in the queue is not work: a request's thread that
    waited for its call starts no watch thread on its way out (one per legacy request and per
    frame of its stream, under load, was thousands of short-lived threads)."""
    home = HomeThread()
    outcome: concurrent.futures.Future[int] = concurrent.futures.Future()
    before = set(threading.enumerate())
    future = home.try_submit(outcome.set_result, 1)
    assert future is not None
    home.wait(outcome)
    assert outcome.result() == 1
    assert [thread.name for thread in threading.enumerate() if thread not in before] == []
    # Work submitted once the thread has gone still runs elsewhere after PATIENCE.
    ran_on: list[str] = []
    elsewhere = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="elsewhere")
    try:
        later = home.try_submit(
            lambda: ran_on.append(threading.current_thread().name),
            elsewhere=lambda fn, args, kwargs: elsewhere.submit(fn, *args, **kwargs),
        )
        assert later is not None
        later.result(timeout=5)
    finally:
        elsewhere.shutdown()
    assert ran_on and ran_on[0].startswith("elsewhere")
