"""Django under ASGI: who the principal is, and how the body is read.

``AsyncMCPView`` runs on the event loop, where Django refuses synchronous database queries;
``tests.django.asgi_site`` serves it next to ``MCPView``, whose answers it must match.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from io import BytesIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.auth.models import User
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.handlers.asgi import ASGIHandler
from django.db import connection
from django.http import HttpResponse
from django.test import AsyncClient, RequestFactory, override_settings
from django.urls import get_script_prefix, set_script_prefix
from django.utils import translation
from django.utils.functional import SimpleLazyObject
from mcp.server.mcpserver import Context
from pydantic import BaseModel

from mcp_common.legacy import GET_STREAM
from mcp_django.store import DjangoStore
from mcp_django.views import _is_django_lazy_user, _read

pytestmark = pytest.mark.django_db(transaction=True)

ASYNC, SYNC = "/asgi-mcp", "/asgi-mcp-sync"
LEGACY_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
ACCEPT = "application/json, text/event-stream"
MIDDLEWARE = [*settings.MIDDLEWARE, "tests.django.asgi_site.replace_user"]


def session_principal(path: str, login: User | None, replace: str | None = None) -> str | None:
    """The principal a legacy session opened at ``path`` is bound to, over ASGI."""

    async def initialize() -> Any:
        client = AsyncClient()
        if login is not None:
            await client.aforce_login(login)
        headers = {"Accept": ACCEPT, **({"X-Test-User": replace} if replace else {})}
        return await client.post(path, json.dumps(LEGACY_INIT), content_type="application/json", headers=headers)

    with override_settings(ROOT_URLCONF="tests.django.asgi_site", MIDDLEWARE=MIDDLEWARE):
        response = async_to_sync(initialize)()
    assert response.status_code == 200, response.content
    record = DjangoStore().get_session(response["Mcp-Session-Id"])
    assert record is not None
    return record.principal


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_session_cookie_binds_the_logged_in_user(path: str) -> None:
    # The lazy request.user of AuthenticationMiddleware reads the session from the database:
    # the async view must not evaluate it on the event loop (SynchronousOnlyOperation).
    alice = User.objects.create_user("alice")
    assert session_principal(path, alice) == f"django-user:{alice.pk}"
    assert session_principal(path, None) is None


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_user_replaced_by_the_app_is_used_as_it_is(path: str) -> None:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    # A suspended account: the app says anonymous although the session cookie is still valid.
    assert session_principal(path, alice, "anonymous") is None
    assert session_principal(path, alice, "concrete:bob") == f"django-user:{bob.pk}"
    # A lazy user of the app's own, which queries the database when first used.
    assert session_principal(path, None, "lazy:bob") == f"django-user:{bob.pk}"


def test_djangos_lazy_user_is_recognised() -> None:
    # Fails loudly if Django changes how AuthenticationMiddleware builds request.user: the
    # async view would then load every user in a thread instead of with request.auser().
    request = RequestFactory().get("/")
    SessionMiddleware(lambda r: HttpResponse()).process_request(request)
    AuthenticationMiddleware(lambda r: HttpResponse()).process_request(request)
    assert _is_django_lazy_user(request.user)
    assert not _is_django_lazy_user(SimpleLazyObject(lambda: User(username="x")))


def asgi_scope(path: str, headers: dict[str, str]) -> dict[str, Any]:
    """The scope of a POST to ``path`` as uvicorn builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }


async def asgi_serve(scope: dict[str, Any], messages: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """Django's ASGI handler answering ``scope``, its body read from ``messages``, its answer
    appended to ``sent``."""
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await ASGIHandler()(scope, receive, send)


def asgi_post(
    path: str,
    chunks: list[bytes],
    headers: dict[str, str] | None = None,
    urlconf: str | None = "tests.django.asgi_site",
) -> tuple[int, dict[str, str], bytes]:
    """POST ``chunks`` through Django's ASGI handler, as uvicorn does: a chunked body (no
    Content-Length, which Django spools to a seekable file) unless ``headers`` name a length.
    ``urlconf=None``: the caller's settings as they are."""
    sent_headers = {"Host": "localhost", "Content-Type": "application/json", "Accept": ACCEPT, **(headers or {})}
    if "Content-Length" not in sent_headers:
        sent_headers["Transfer-Encoding"] = "chunked"
    messages = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    # Django's thread-sensitive sync code (the view, a tool's ORM work) runs here on the test's
    # own thread (async_to_sync's caller), where the handler sets the script prefix and
    # LocaleMiddleware the language: put them back, or later tests reverse() under /shop.
    prefix = get_script_prefix()
    try:
        with override_settings(ROOT_URLCONF=urlconf) if urlconf is not None else contextlib.nullcontext():
            async_to_sync(asgi_serve)(asgi_scope(path, sent_headers), messages, sent)
    finally:
        set_script_prefix(prefix)
        translation.deactivate()
    start = sent[0]
    headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers, body


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_chunked_body_over_djangos_memory_limit_is_read(path: str) -> None:
    mib = 1024 * 1024
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < 3 * mib < 4 * mib == settings.MCP.get("MAX_BODY_SIZE", 4 * mib)
    opening = json.dumps(LEGACY_INIT).encode()
    # Valid JSON of 3 MiB: the padding is whitespace between two members.
    padded = opening[:1] + b" " * (3 * mib) + opening[1:]
    status, headers, body = asgi_post(path, [padded[i : i + 65536] for i in range(0, len(padded), 65536)])
    assert status == 200, body[:300]
    assert headers.get("mcp-session-id")

    huge = opening[:1] + b" " * (5 * mib) + opening[1:]
    status, headers, body = asgi_post(path, [huge[i : i + 65536] for i in range(0, len(huge), 65536)])
    assert status == 413, body[:300]
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["code"] == -32600


def test_the_body_stays_readable_after_the_view_read_it() -> None:
    request = RequestFactory().post("/mcp", b'{"a": 1}', content_type="application/json")
    assert _read(request, 100) == b'{"a": 1}'
    assert request.body == b'{"a": 1}' and request.read() == b'{"a": 1}'
    too_big = RequestFactory().generic("POST", "/mcp", b"x" * 101, content_type="application/json")
    del too_big.META["CONTENT_LENGTH"]
    refusal = _read(too_big, 100)
    assert not isinstance(refusal, bytes) and refusal.status == 413


def test_a_chunked_body_the_wsgi_server_did_not_de_chunk_is_411() -> None:
    """``runserver`` (wsgiref) passes a chunked body on undecoded, with no Content-Length and
    no ``wsgi.input_terminated``: Django reads it as empty. The client is told to send a
    length, not "Parse error" for the JSON it sent (nor a 413 it never hears of)."""
    body = json.dumps(LEGACY_INIT).encode()
    request = RequestFactory().generic(
        "POST", "/mcp", body, content_type="application/json", CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked"
    )
    refusal = _read(request, 100_000)
    assert not isinstance(refusal, bytes), refusal
    assert refusal.status == 411
    error = json.loads(refusal.body)["error"]
    assert error["code"] == -32600 and "Content-Length" in error["message"]
    # A server that de-chunks the body (gunicorn) says so: the body is read.
    dechunked = RequestFactory().generic(
        "POST", "/mcp", body, content_type="application/json", CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked"
    )
    dechunked.META.update({"wsgi.input_terminated": True, "wsgi.input": BytesIO(body)})
    assert _read(dechunked, 100_000) == body


def test_the_async_view_under_a_wsgi_server_asks_its_client_at_once(live_server: Any) -> None:
    """Under WSGI (runserver, gunicorn; ``MCP["ASYNC_VIEW"] = True``, or an
    ``ASGI_APPLICATION`` the WSGI server ignores) Django reads an async view's streamed answer
    to its end before sending any of it: a legacy call's question to its client never left, and
    the call hung. The async view serves a WSGI request the sync view's way."""
    from tests.protocol.clients import WorkerLog, spread_client
    from tests.protocol.test_elicitation_live import handle_elicitation
    from tests.protocol.test_official_client import text

    async def book() -> str:
        async with spread_client(
            live_server.url + "/bistro-async", "legacy", WorkerLog(), elicitation_callback=handle_elicitation
        ) as client:
            booked = await client.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
        return text(booked)

    with override_settings(ROOT_URLCONF="tests.django.asgi_site"):
        assert asyncio.run(asyncio.wait_for(book(), 30)) == "Booked a table for 2 on 2025-12-27."


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_sync_tools_connection_is_closed_after_the_call_as_a_requests_would_be(era: str) -> None:
    """``AsyncMCPView`` runs a sync tool on a worker thread, where Django's request_started and
    request_finished never reach the connection the tool opens. It is closed when obsolete
    (``CONN_MAX_AGE``) all the same, as a request's own is: else it stays open for the thread's
    life, and one the database server dropped (a restart) fails every later tool on that
    thread."""
    from tests.django import asgi_site
    from tests.django.inprocess import Caller

    if connection.vendor != "postgresql":
        # An in-memory SQLite database ignores close(): it would be lost with its connection.
        pytest.skip("PostgreSQL only: set MCP_EXAMPLE_DATABASE_URL (scripts/test.sh does)")
    settings_dict = connection.settings_dict
    kept = settings_dict["CONN_MAX_AGE"]
    settings_dict["CONN_MAX_AGE"] = 0  # Django's default: a connection per request
    asgi_site.used_connections.clear()
    try:
        caller = Caller("tests.django.asgi_site", "/counts-async", era)
        for _ in range(3):
            assert caller.call_tool("user_count", {})["result"]["structuredContent"] == {"result": 0}
    finally:
        settings_dict["CONN_MAX_AGE"] = kept
        # The endpoint's own database threads (its heartbeat) keep theirs, by design: closed
        # here, or the test database could not be dropped.
        from mcp_django.registry import get_endpoint
        from tests.django.test_django_elicitation import close_database_threads

        endpoint = get_endpoint(asgi_site.counts)
        endpoint.close()
        close_database_threads(endpoint)
    assert len(asgi_site.used_connections) == 3
    assert [wrapper.connection for wrapper in asgi_site.used_connections] == [None, None, None]


def test_async_tools_use_the_orm_on_threads_of_their_own_and_close_their_connections() -> None:
    """An async tool's ORM work (``sync_to_async``, ``acount()``) runs in a thread-sensitive
    context of its own, as Django's ASGI handler gives each request: concurrent calls do not
    queue on asgiref's one process-wide thread, and the connection a call opened is closed
    after it (on that shared thread it was never checked nor closed: one the database server
    dropped failed every later async tool until the process restarted)."""
    import threading

    from asgiref.sync import sync_to_async
    from django.db import DEFAULT_DB_ALIAS, connections
    from mcp.server import MCPServer

    from mcp_common import MCPConfig
    from mcp_django.endpoint import DjangoEndpoint
    from tests.core.test_endpoint import SECRET, modern_call

    server = MCPServer("AsyncOrm")
    inside = threading.Barrier(3)  # three calls in their tools at once, or it times out
    used: list[tuple[str, Any]] = []

    def count_users() -> int:
        inside.wait(10)
        used.append((threading.current_thread().name, connections[DEFAULT_DB_ALIAS]))
        return User.objects.count()

    @server.tool()
    async def users() -> int:
        return await sync_to_async(count_users)()

    point = DjangoEndpoint(server, MCPConfig(secret_keys=(SECRET,)), DjangoStore())
    answers: list[Any] = []

    def call() -> None:
        # Served as under ASGI: under WSGI the request's own thread, waiting for the call, runs
        # its ORM work (test_django_home).
        response = asyncio.run(point.handle_from_other_loop(modern_call("users", {})))
        answers.append(json.loads(response.body))

    try:
        callers = [threading.Thread(target=call) for _ in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(20)
    finally:
        point.close()
    assert [answer["result"]["structuredContent"] for answer in answers] == [{"result": 0}] * 3, answers
    assert len({name for name, _ in used}) == 3, used
    if connection.vendor != "sqlite":  # an in-memory SQLite database ignores close()
        assert [wrapper.connection for _, wrapper in used] == [None, None, None]


def serve_like_uvicorn(
    path: str, tool: str, meta: dict[str, Any] | None = None, on_send: Callable[[dict[str, Any]], None] | None = None
) -> tuple[bool, list[dict[str, Any]]]:
    """A 2026-07-28 call of ``tool`` at ``path`` of ``tests.django.asgi_site`` through Django's
    ASGI handler as uvicorn runs it: on an event loop of its own, with no ``async_to_sync``
    above. Whether it finished within 20 seconds (on a daemon thread: a call that hangs fails
    the test instead of hanging it), and the ASGI messages sent (each also to ``on_send``)."""
    from tests.django import asgi_site

    full_meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        **(meta or {}),
    }
    params = {"name": tool, "arguments": {}, "_meta": full_meta}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    headers = {
        "Host": "localhost",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Accept": ACCEPT,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    class Sent(list):  # type: ignore[type-arg]
        def append(self, message: dict[str, Any]) -> None:
            super().append(message)
            if on_send is not None:
                on_send(message)

    sent = Sent()
    prefix = get_script_prefix()
    server = threading.Thread(
        target=asyncio.run, args=(asgi_serve(asgi_scope(path, headers), messages, sent),), daemon=True
    )
    try:
        with override_settings(ROOT_URLCONF="tests.django.asgi_site"):
            server.start()
            server.join(20)
    finally:
        set_script_prefix(prefix)
        translation.deactivate()
        from mcp_django.registry import get_endpoint
        from tests.django.test_django_elicitation import close_database_threads

        endpoint = get_endpoint(asgi_site.counts)
        endpoint.close()
        close_database_threads(endpoint)
    return not server.is_alive(), sent


@pytest.mark.parametrize("path", ["/counts-sync", "/counts-async"])
def test_an_async_tools_orm_work_under_uvicorn_does_not_wait_for_the_requests_thread(path: str) -> None:
    """A project from ``startproject`` sets no ``ASGI_APPLICATION``, so uvicorn serves it the
    sync view, which Django's ASGI handler runs on the request's thread-sensitive thread while
    the call runs. An async tool's ORM work (``acount()``) must not be queued on that thread,
    busy waiting for the call: it runs on a thread of the call's own, as with the async view.
    (It was queued there: every async tool that touched the ORM hung until the client gave up.)"""
    User.objects.create_user("alice")
    finished, sent = serve_like_uvicorn(path, "user_count_async")
    assert finished, "the call hung: its ORM work waited for the request's busy thread"
    assert sent[0]["status"] == 200, sent
    answer = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert answer["result"]["structuredContent"] == {"result": 1}, answer


@pytest.mark.parametrize("path", ["/counts-sync", "/counts-async"])
def test_a_progress_notification_under_uvicorn_reaches_the_client_before_the_result(path: str) -> None:
    """Under uvicorn the sync view (a project without ``ASGI_APPLICATION``) streams its SSE
    answer frame by frame, as the async view does: a tool's progress reaches the client while
    the tool runs. (Django reads a sync iterator whole before sending any of it, with a
    warning: the progress arrived only with the result.)"""
    from tests.django import asgi_site

    def on_send(message: dict[str, Any]) -> None:
        if b"notifications/progress" in message.get("body", b""):
            asgi_site.progress_seen.set()

    asgi_site.progress_seen.clear()
    finished, sent = serve_like_uvicorn(path, "progress_then_wait", {"progressToken": "p"}, on_send)
    assert finished
    assert sent[0]["status"] == 200, sent
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert b'"seen"' in body and b"not seen" not in body, body


class _Name(BaseModel):
    name: str


def test_an_async_tool_waiting_for_its_client_holds_no_thread() -> None:
    """On the legacy wire an async tool that used the ORM and then asks its client waits for the
    answer (minutes, hours) holding no thread: the thread its queries ran on, with its
    connections, is let go while it waits (thousands of questions may wait at once), and the
    tool's queries after the answer run on a new one. (Here the request's thread has stopped
    waiting for the call before its first query, as when a test reads the stream on another
    thread; a request thread waiting for its call runs the queries itself: ``test_django_home``.)"""
    import threading

    from asgiref.sync import sync_to_async
    from mcp.server import MCPServer

    from mcp_common import MCPConfig
    from mcp_django.endpoint import DjangoEndpoint
    from tests.core.test_elicitation import legacy_call
    from tests.core.test_endpoint import SECRET, follow, initialize, legacy

    server = MCPServer("AsyncOrmAsks")
    threads: list[threading.Thread] = []
    alive_while_asking: list[bool] = []

    def count_users() -> int:
        threads.append(threading.current_thread())
        return User.objects.count()

    returned = threading.Event()

    @server.tool()
    async def sign_up(ctx: Context) -> str:
        await asyncio.to_thread(returned.wait, 10)
        before = await sync_to_async(count_users)()
        answer = await ctx.elicit("Your name?", schema=_Name)
        after = await sync_to_async(count_users)()
        return f"{answer.data.name}: {before} -> {after}"

    point = DjangoEndpoint(server, MCPConfig(secret_keys=(SECRET,), poll_interval=0.02), DjangoStore())
    try:
        session = initialize(point, {"elicitation": {}})

        def on_message(message: dict[str, Any]) -> None:
            if message.get("method") == "elicitation/create":
                threads[0].join(5)
                alive_while_asking.append(threads[0].is_alive())
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"action": "accept", "content": {"name": "Ada"}},
                }
                assert point.handle(legacy(session, reply)).status == 202

        call = legacy_call(point, session, "sign_up", {})
        returned.set()
        seen = follow(point, session, call, on_message)
    finally:
        point.close()
    assert seen[-1]["result"]["content"][0]["text"] == "Ada: 0 -> 0", seen
    assert alive_while_asking == [False]
    assert len(threads) == 2 and threads[0] is not threads[1]


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_djangos_gzip_middleware_leaves_sse_answers_alone(path: str) -> None:
    """``GZipMiddleware`` compresses streamed responses for a client that accepts gzip (httpx,
    so the official client, always does). Under ASGI it makes each SSE frame a gzip member of
    its own, of which the client decodes only the first: the session's GET stream (here) and a
    call's stream would deliver their priming event and nothing more. Under WSGI it holds
    every frame back until the stream ends. An SSE answer is sent uncompressed."""
    middleware = [MIDDLEWARE[0], "django.middleware.gzip.GZipMiddleware", *MIDDLEWARE[1:]]
    gzip = {"Accept-Encoding": "gzip, deflate"}

    async def run() -> tuple[Any, bytes, Any]:
        client = AsyncClient()
        opened = await client.post(
            path, json.dumps(LEGACY_INIT), content_type="application/json", headers={"Accept": ACCEPT, **gzip}
        )
        session = {"Mcp-Session-Id": opened["Mcp-Session-Id"], "Mcp-Protocol-Version": "2025-11-25"}
        # The tool list, not the initialize answer, whose few hundred bytes compress so little
        # that the middleware's random padding (up to 100 bytes) leaves it uncompressed at times.
        listed = await client.post(
            path, json.dumps(LIST_TOOLS), content_type="application/json", headers={"Accept": ACCEPT, **gzip, **session}
        )
        # Something for the GET stream to deliver.
        changed = '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'
        await sync_to_async(DjangoStore().append_event)(opened["Mcp-Session-Id"], GET_STREAM, changed)
        stream = await client.get(path, headers={"Accept": "text/event-stream", **gzip, **session})
        body = b"".join([chunk async for chunk in stream.streaming_content]) if stream.is_async else b""
        return stream, body, listed

    with override_settings(
        ROOT_URLCONF="tests.django.asgi_site",
        MIDDLEWARE=middleware,
        MCP={**settings.MCP, "STREAM_HOLD_SECONDS": 0.3},
    ):
        stream, body, listed = async_to_sync(run)()
        if not stream.is_async:
            # The sync view's stream is read as a WSGI server reads it: from a thread, not
            # inside a coroutine (which would block whichever event loop runs it).
            body = b"".join(stream.streaming_content)
    assert stream["Content-Type"] == "text/event-stream"
    assert not stream.has_header("Content-Encoding"), stream.headers
    assert b'"method":"notifications/tools/list_changed"' in body, body[:300]
    # A JSON answer may still be compressed: the middleware is the application's choice.
    assert (listed["Content-Type"], listed["Content-Encoding"]) == ("application/json", "gzip")
