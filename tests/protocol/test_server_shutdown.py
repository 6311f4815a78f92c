"""Stopping a server while MCP conversations are open: Ctrl-C (SIGINT) and SIGTERM must end
the example servers within seconds, whatever the clients hold open (a legacy session's GET
stream, a call waiting for its client's answer, a running tool)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import DatabaseFactory, LiveServer, ServerPool, stop

ACCEPT = "application/json, text/event-stream"
PROMPT_STOP_SECONDS = 8.0
"""How long a stopped server may take: its own grace period and a worker's exit, with room."""


def open_conversations(live: LiveServer) -> list[threading.Thread]:
    """A legacy session on the bistro with its GET stream open and a call waiting for the
    client's answer (``ctx.elicit``), each read on a thread of its own until the server ends it."""
    url = live.url("/bistro")
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "stopper", "version": "0"},
        },
    }
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    response = httpx.post(url, json=init, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    assert httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers).is_success
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "book_table", "arguments": {"date": "2025-12-25", "party_size": 2}},
    }
    asked = threading.Event()

    def read(method: str, body: object, stream_headers: dict[str, str]) -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream(method, url, json=body, headers=stream_headers, timeout=120) as stream,
        ):
            for line in stream.iter_lines():
                if "elicitation/create" in line:
                    asked.set()

    readers = [
        threading.Thread(target=read, args=("GET", None, {**headers, "Accept": "text/event-stream"}), daemon=True),
        threading.Thread(target=read, args=("POST", call, headers), daemon=True),
    ]
    for reader in readers:
        reader.start()
    assert asked.wait(10), "the tool did not ask its question"
    return readers


@pytest.fixture
def fresh_server(
    server_pool: ServerPool, databases: DatabaseFactory, request: pytest.FixtureRequest
) -> Iterator[LiveServer]:
    framework, kind, workers = request.param
    live = server_pool.start(framework, kind, workers, databases.new("sqlite"))
    yield live
    stop(live)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fresh_server",
    [
        ("django", "uvicorn", 2),
        ("django", "gunicorn", 2),
        ("flask", "gunicorn", 2),
        ("django", "dev", 1),
        ("flask", "dev", 1),
    ],
    indirect=True,
    ids=lambda p: f"{p[0]}-{p[1]}",
)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_server_stops_promptly_with_conversations_open(fresh_server: LiveServer, sig: signal.Signals) -> None:
    live = fresh_server
    # Under uvicorn a stream is held open (no thread each): the GET stream for
    # STREAM_HOLD_SECONDS, a call waiting for its client until its answer.
    readers = open_conversations(live)
    started = time.monotonic()
    live.process.send_signal(sig)
    try:
        live.process.wait(PROMPT_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{live.framework}/{live.server} still ran {PROMPT_STOP_SECONDS:.0f} s after {sig.name}:\n{live.log()}"
        )
    took = time.monotonic() - started
    for reader in readers:
        reader.join(5)
        assert not reader.is_alive(), "a stream outlived its server"
    assert took < PROMPT_STOP_SECONDS, took
