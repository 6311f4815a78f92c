"""The site's own async code after an MCP call, under a real gunicorn (gthread).

asgiref notes on a thread the loop of the last ``sync_to_async`` work it ran, and runs every
later ``async_to_sync`` of that thread on that loop. Under WSGI the ORM work of an async tool
runs on the request's own thread: the note must not send the site's later async code (a
Django async view, a view's ``async_to_sync``) to the endpoint's event loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Database, LiveServer, free_port, stop
from tests.django.loop_site import CALL

HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "users",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``tests.django.loop_site`` under gunicorn: one gthread worker with two threads."""
    tmp_path = tmp_path_factory.mktemp("loop_site")
    env = {**os.environ, "LOOP_SITE_DB": str(tmp_path / "loop.sqlite3"), "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    migrate = "import tests.django.loop_wsgi; from django.core.management import call_command; call_command('migrate')"
    subprocess.run([sys.executable, "-c", migrate], cwd=ROOT, env=env, check=True, capture_output=True)
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--workers", "1", "--threads", "2"]
    command += ["--bind", f"127.0.0.1:{port}", "tests.django.loop_wsgi:application"]
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    live = LiveServer(base, "django", "gunicorn", 1, Database("sqlite", env["LOOP_SITE_DB"]), process, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, live.log()
            try:
                if httpx.get(f"{base}/async", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
        yield base
    finally:
        stop(live)


def _two_calls_at_once(base: str) -> None:
    """Two MCP calls of the async tool at once: each thread of the worker serves one."""
    body: dict[str, Any] = {**CALL, "params": {**CALL["params"], "arguments": {"together": True}}}
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda _: httpx.post(f"{base}/mcp", json=body, headers=HEADERS, timeout=30), range(2)))
    assert [reply.json()["result"]["structuredContent"] for reply in replies] == [{"result": 0}] * 2


def test_the_sites_async_code_runs_on_a_loop_of_its_own_after_an_mcp_call(site: str) -> None:
    _two_calls_at_once(site)
    for _ in range(2):  # whichever thread serves it
        seen = httpx.get(f"{site}/async", timeout=30).json()
        assert seen["coroutine_thread"] != "mcp-event-loop", seen
        assert seen["sync_thread"] != "mcp-event-loop"
        inside = httpx.get(f"{site}/sync", timeout=30).json()
        assert inside["coroutine_thread"] != "mcp-event-loop", inside
        # Its ORM work ran on the view's thread, inside the view's transaction, as always.
        assert (inside["sync_thread"], inside["users"]) == (inside["request_thread"], 1), inside


def test_an_async_view_calling_the_sites_own_endpoint_is_answered_after_an_mcp_call(site: str) -> None:
    """An async view that blocks on a request to this site's MCP endpoint: on the endpoint's
    loop it would hold the loop that request needs, and wait until its client gives up."""
    _two_calls_at_once(site)
    seen = httpx.get(f"{site}/calling", timeout=30).json()
    assert seen == {"answered": True, "coroutine_thread": seen["coroutine_thread"]}
    assert seen["coroutine_thread"] != "mcp-event-loop"
