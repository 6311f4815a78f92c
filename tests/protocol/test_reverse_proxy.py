"""The example apps behind a reverse proxy (``tests.protocol.proxy``, on loopback) that serves
them as ``https://shop.example.com/shop/``, as the README's "Behind a reverse proxy" sets them
up: the official ``mcp.Client`` in both eras through the proxy's prefix, the Origin check on
the public origin, an upstream spoken to in HTTP/1.0 or sent chunked bodies, a proxy that
buffers responses, and one that cuts a response its upstream is silent on for too long."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult

from tests.conftest import DatabaseFactory, LiveServer, ServerPool, stop
from tests.protocol.clients import MODES, Recorder
from tests.protocol.proxy import ReverseProxy, reverse_proxy
from tests.protocol.test_elicitation_live import Notifications, handle_elicitation
from tests.protocol.test_official_client import text

pytestmark = pytest.mark.slow

TARGETS = [("django", "gunicorn"), ("django", "uvicorn"), ("flask", "gunicorn")]
PUBLIC = "shop.example.com"
FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": PUBLIC, "X-Forwarded-Prefix": "/shop"}
HOLD = 1.0
"""``STREAM_HOLD_SECONDS`` of these servers (ASGI streams), below the proxies' read timeout."""
ACCEPT = "application/json, text/event-stream"
TIMEOUT = 30.0
"""Seconds a plain request may take: httpx's 5 s default is short for a demo's first page on a
loaded two-core machine (its URLconf and templates load then)."""
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


@pytest.fixture(scope="module", params=TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def upstream(
    request: pytest.FixtureRequest, server_pool: ServerPool, databases: DatabaseFactory
) -> Iterator[LiveServer]:
    framework, kind = request.param
    env = {"MCP_EXAMPLE_PUBLIC_HOST": PUBLIC, "MCP_EXAMPLE_STREAM_HOLD": str(HOLD)}
    if framework == "django":
        env["MCP_EXAMPLE_SCRIPT_NAME"] = "/shop"
    live = server_pool.start(framework, kind, 1, databases.new("sqlite"), env)
    yield live
    stop(live)


def proxy(live: LiveServer, **options: Any) -> Any:
    return reverse_proxy(live.base_url, prefix="/shop", headers=FORWARDED, **options)


async def slow_human(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """Answers the quantity question after 3.5 s: longer than the proxies' read timeout below."""
    await asyncio.sleep(3.5)
    return ElicitResult(action="accept", content={"quantity": 2})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("upstream_http", ["HTTP/1.0", "HTTP/1.1 chunked"])
def test_the_official_client_through_the_proxys_prefix(upstream: LiveServer, mode: str, upstream_http: str) -> None:
    """nginx speaks HTTP/1.0 upstream by default (``Connection: close``, so no chunked
    answers); with ``proxy_http_version 1.1`` and ``proxy_request_buffering off`` it forwards
    a body chunked, which gunicorn and uvicorn de-chunk. The elicitation goes out on the
    call's stream, and view tools build their URLs under the prefix."""
    options = {"http10": True} if upstream_http == "HTTP/1.0" else {"chunk_body": True}

    async def run(gateway: ReverseProxy) -> None:
        quantity = Recorder(ElicitResult(action="accept", content={"quantity": 3}))
        async with Client(gateway.url("/shop/mcp"), mode=mode, elicitation_callback=quantity) as client:
            assert text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
            assert text(await client.call_tool("add_to_cart", {"product": "tea"})) == "Added 3 x tea (13.50 EUR)."
            if upstream.framework == "django":
                page = text(await client.call_tool("order_page", {"number": "1002"}))
                assert page.startswith("Order 1002\nOrder 1002\nCustomer: Grace Hopper"), page
        if mode == "legacy":
            async with Client(
                gateway.url("/shop/mcp/bistro"), mode=mode, elicitation_callback=handle_elicitation
            ) as client:
                booked = await client.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
                assert text(booked) == "Booked a table for 2 on 2025-12-27."

    with proxy(upstream, **options) as gateway:
        asyncio.run(run(gateway))


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        (f"https://{PUBLIC}", 200),
        (None, 200),
        (f"http://{PUBLIC}", 403),  # the page a browser showed over plain HTTP: another origin
        ("https://evil.example", 403),
        ("null", 403),
    ],
)
def test_a_browsers_origin_is_checked_against_the_public_https_origin(
    upstream: LiveServer, origin: str | None, status: int
) -> None:
    with proxy(upstream) as gateway:
        headers = {"Accept": ACCEPT, **({"Origin": origin} if origin else {})}
        response = httpx.post(gateway.url("/shop/mcp"), json=INIT, headers=headers, timeout=TIMEOUT)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    if status == 403:
        assert response.json()["error"] == {"code": -32600, "message": "Invalid Origin header"}


def test_a_foreign_public_name_is_refused_as_json(upstream: LiveServer) -> None:
    forwarded = {**FORWARDED, "X-Forwarded-Host": "evil.example"}
    with reverse_proxy(upstream.base_url, prefix="/shop", headers=forwarded) as gateway:
        response = httpx.post(gateway.url("/shop/mcp"), json=INIT, headers={"Accept": ACCEPT}, timeout=TIMEOUT)
    assert response.status_code == 421, response.text
    assert response.json()["error"]["message"] == "Invalid Host header"


def test_sse_answers_tell_a_buffering_proxy_not_to_buffer(upstream: LiveServer) -> None:
    """nginx buffers responses by default and streams those marked ``X-Accel-Buffering: no``:
    a legacy call's question must reach its client while the call waits for the answer."""

    async def run(gateway: ReverseProxy) -> None:
        quantity = Recorder(ElicitResult(action="accept", content={"quantity": 3}))
        async with Client(gateway.url("/shop/mcp"), mode="legacy", elicitation_callback=quantity) as client:
            added = await asyncio.wait_for(client.call_tool("add_to_cart", {"product": "tea"}), 15)
            assert text(added) == "Added 3 x tea (13.50 EUR)."

    with proxy(upstream, buffering=True) as gateway:
        asyncio.run(run(gateway))
    assert gateway.buffered > 0  # the JSON answers were buffered; the streams were not


def test_under_wsgi_a_proxy_that_buffers_every_response_still_delivers(upstream: LiveServer) -> None:
    """A proxy that buffers SSE whatever it is told: under WSGI a legacy call's stream ends
    soon after its question (``WAIT_DETACH_SECONDS``) and the client resumes it, so the
    question, the answer's result and a completion on the GET stream all arrive, later."""
    if upstream.server == "uvicorn":
        pytest.skip("Under ASGI a call's stream stays open while it waits: the README says to turn buffering off")

    async def run(gateway: ReverseProxy) -> None:
        quantity = Recorder(ElicitResult(action="accept", content={"quantity": 3}))
        async with Client(gateway.url("/shop/mcp"), mode="legacy", elicitation_callback=quantity) as client:
            added = await asyncio.wait_for(client.call_tool("add_to_cart", {"product": "tea"}), 15)
            assert text(added) == "Added 3 x tea (13.50 EUR)."

    with proxy(upstream, buffering=True, honor_accel_buffering=False) as gateway:
        asyncio.run(run(gateway))
    assert gateway.buffered > 3


def test_streams_cut_by_the_proxys_read_timeout_resume_without_loss(upstream: LiveServer) -> None:
    """The proxy cuts a response its upstream is silent on for 2 s (nginx's
    ``proxy_read_timeout``, 60 s by default, scaled down), above ``STREAM_HOLD_SECONDS``: a
    question answered after 3.5 s still completes its call, and a completion sent to a session
    idle for 4 s still reaches it, each stream resumed with ``Last-Event-ID``."""

    async def run(gateway: ReverseProxy) -> None:
        async with Client(gateway.url("/shop/mcp"), mode="legacy", elicitation_callback=slow_human) as client:
            added = await asyncio.wait_for(client.call_tool("add_to_cart", {"product": "tea"}), 15)
            assert text(added) == "Added 2 x tea (9.00 EUR)."
        notes = Notifications()
        async with Client(
            gateway.url("/shop/mcp/bistro"),
            mode="legacy",
            elicitation_callback=handle_elicitation,
            message_handler=notes,
        ) as client:
            paid = await client.call_tool("pay_deposit", {"booking_id": "idle"})
            assert text(paid) == "Complete the payment in your browser."
            await asyncio.sleep(4)
            async with httpx.AsyncClient() as http:
                done = await http.post(
                    gateway.url("/shop/payments/webhook"),
                    json={"elicitation_id": "deposit-idle"},
                    headers={"Authorization": "Bearer demo-webhook-token"},
                )
            assert done.json() == {"completed": 1}
            for _ in range(40):
                if notes.completed():
                    break
                await asyncio.sleep(0.25)
            assert notes.completed() == ["deposit-idle"]

    with proxy(upstream, read_timeout=2.0) as gateway:
        asyncio.run(run(gateway))
    if upstream.server == "uvicorn":
        assert gateway.cuts > 0  # the call's stream was cut while it waited: resumed


def test_the_demos_pages_link_under_the_prefix(upstream: LiveServer) -> None:
    """The home page names the MCP URLs and links the admin (Django's, or the Flask review
    panel) under the prefix the proxy serves them at, and so do the admin's own links."""
    admin = "/shop/admin/" if upstream.framework == "django" else "/shop/mcp-admin/"
    with proxy(upstream) as gateway:
        home = httpx.get(gateway.url("/shop/"), timeout=TIMEOUT)
        assert "<code>/shop/mcp/bistro</code>" in home.text, home.text
        assert f"href='{admin}'" in home.text, home.text
        page = httpx.get(gateway.url(admin), timeout=TIMEOUT)
    if upstream.framework == "django":
        # (Its ``next=`` is Django's request.path, which under ASGI leaves out FORCE_SCRIPT_NAME.)
        assert page.status_code == 302 and page.headers["location"].startswith("/shop/admin/login/?next=")
    else:
        assert page.status_code == 200 and 'href="/shop/mcp-admin/"' in page.text, page.text


def test_the_flask_demos_panel_refuses_a_client_the_proxy_names_as_remote(upstream: LiveServer) -> None:
    """The demo opens its review panel to requests from the machine itself: behind a proxy on
    that machine, every request comes from it, so the app takes the client's address from the
    proxy's ``X-Forwarded-For`` (``ProxyFix(x_for=1)``)."""
    if upstream.framework != "flask":
        pytest.skip("The Django demo's admin asks for a login")
    forwarded = {**FORWARDED, "X-Forwarded-For": "203.0.113.5"}
    with reverse_proxy(upstream.base_url, prefix="/shop", headers=forwarded) as gateway:
        assert httpx.get(gateway.url("/shop/mcp-admin/"), timeout=TIMEOUT).status_code == 403


def test_the_proxy_stopped_mid_response_closes_both_sides_and_leaves_nothing_running() -> None:
    """The test proxy itself: stopped while a response still streams (a legacy client's GET
    stream as its test ends) and while a request it has not yet accepted waits in its listening
    socket (a client's last request on a busy machine), it must close every connection on both
    sides and finish every task before its loop closes. It once stopped its loop as soon as it
    had cancelled the tasks it saw: the connection accepted a moment later went on without it,
    and its task, transports and sockets were left for the garbage collector, which reported
    them in the test."""
    listener = socket.create_server(("127.0.0.1", 0))
    upstream_saw: list[bytes] = []

    def serve_one() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: open\n\n")
            connection.settimeout(10)
            upstream_saw.append(connection.recv(1))  # b"": the proxy closed its side

    host, port = listener.getsockname()
    server = threading.Thread(target=serve_one)
    server.start()
    release = threading.Event()
    with reverse_proxy(f"http://{host}:{port}") as gateway:
        streaming = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        streaming.sendall(b"GET /stream HTTP/1.1\r\nHost: app\r\n\r\n")
        received = b""
        while b": open" not in received:
            piece = streaming.recv(65536)
            assert piece, received
            received += piece
        gateway._loop.call_soon_threadsafe(release.wait, 10)  # the proxy busy for a moment
        late = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        late.sendall(b"GET /late HTTP/1.1\r\nHost: app\r\n\r\n")
        threading.Timer(0.3, release.set).start()
    for client in (streaming, late):
        with client, contextlib.suppress(ConnectionResetError):  # refused, if still unaccepted
            while client.recv(65536):
                pass  # until the proxy closes the client's connection
    server.join(10)
    listener.close()
    assert received.startswith(b"HTTP/1.1 200 OK"), received
    assert upstream_saw == [b""]
    gc.collect()  # a transport or socket left unclosed warns here, and the warning is an error
