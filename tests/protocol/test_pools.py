"""Under the connection pools production sites run, with few connections: Django's psycopg
pool (``OPTIONS["pool"]``) and SQLAlchemy's pool limits (Flask), on PostgreSQL, under gunicorn
with 2 workers of 4 threads. Both eras; legacy questions left waiting while other calls run;
a completion and the purge from other processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from mcp.client import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult

from tests.conftest import ROOT, DatabaseFactory, LiveServer, ServerPool, stop
from tests.protocol.clients import WorkerLog, spread_client
from tests.protocol.test_bad_input import initialize
from tests.protocol.test_elicitation_live import FAST, Notifications, handle_elicitation, wait_for
from tests.protocol.test_official_client import text
from tests.protocol.test_pgbouncer import conversations

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POOLS = {
    # 3 connections per process: fewer than the endpoint's 8 database threads.
    "django": {"MCP_EXAMPLE_DB_POOL": json.dumps({"min_size": 1, "max_size": 3, "timeout": 3})},
    "flask": {"MCP_EXAMPLE_ENGINE_OPTIONS": json.dumps({"pool_size": 2, "max_overflow": 1, "pool_timeout": 3})},
}


@pytest.fixture(params=["django", "flask"])
def pooled(request: pytest.FixtureRequest, server_pool: ServerPool, databases: DatabaseFactory) -> Iterator[LiveServer]:
    env = {**FAST, "MCP_EXAMPLE_THREADS": "4", **POOLS[request.param]}
    live = server_pool.start(request.param, "gunicorn", 2, databases.new("postgres"), env=env)
    yield live
    stop(live)


class Held:
    """An elicitation callback that answers once released."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.set()
        await self.release.wait()
        return ElicitResult(action="accept", content={"name": "Ada Lovelace"})


def test_both_eras_and_waiting_questions_on_a_small_pool(pooled: LiveServer) -> None:
    async def greet(n: int) -> None:
        async with spread_client(pooled.url(), "2026-07-28", WorkerLog()) as client:
            for _ in range(3):
                assert text(await client.call_tool("greet", {"name": f"Ada {n}"})) == f"Hello, Ada {n}!"

    async def run() -> None:
        await conversations(pooled.url(), pooled.base_url)
        helds = [Held() for _ in range(3)]
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    spread_client(pooled.url("/library"), "legacy", WorkerLog(), elicitation_callback=held)
                )
                for held in helds
            ]
            calls = [asyncio.create_task(c.call_tool("issue_card")) for c in clients]
            for held in helds:
                await asyncio.wait_for(held.asked.wait(), 20)
            # The questions wait for their humans (their calls past their first stream, polling
            # for answers, the heartbeat beating); other calls go on meanwhile.
            await asyncio.wait_for(asyncio.gather(*(greet(n) for n in range(12))), 60)
            for held in helds:
                held.release.set()
            for call in calls:
                assert text(await asyncio.wait_for(call, 30)) == "Card issued to Ada Lovelace."
        if pooled.framework == "django":
            await completed_and_purged_elsewhere(pooled)

    try:
        asyncio.run(run())
    except BaseException:
        print(pooled.log())
        raise


async def completed_and_purged_elsewhere(live: LiveServer) -> None:
    """Django: ``complete_elicitation`` in a process of its own, on the same pool settings,
    reaches the legacy client waiting on a worker; then ``manage.py mcp_purge``."""
    env = {**os.environ, **POOLS["django"], "MCP_EXAMPLE_DATABASE_URL": live.database.url}
    env["DJANGO_SETTINGS_MODULE"] = "example_project.django_site.settings"
    complete = "import django; django.setup(); from mcp_django import complete_elicitation; "
    complete += "print(complete_elicitation('deposit-p'))"
    notes = Notifications()
    async with spread_client(
        live.url("/bistro"), "legacy", WorkerLog(), elicitation_callback=handle_elicitation, message_handler=notes
    ) as client:
        paid = await client.call_tool("pay_deposit", {"booking_id": "p"})
        assert text(paid) == "Complete the payment in your browser."
        done = await asyncio.to_thread(_run, [sys.executable, "-c", complete], env)
        assert done.stdout.strip() == "1"
        await wait_for(notes, "deposit-p")
    purged = await asyncio.to_thread(_run, [sys.executable, "-m", "django", "mcp_purge"], env)
    assert purged.stdout.startswith("Deleted 0 expired MCP session(s) and 0 old elicitation(s)"), purged.stdout


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done


ONE_CONNECTION = {
    "MCP_EXAMPLE_DB_POOL": json.dumps({"min_size": 1, "max_size": 1, "timeout": 0.3}),
    "MCP_EXAMPLE_ENGINE_OPTIONS": json.dumps({"pool_size": 1, "max_overflow": 0, "pool_timeout": 0.3}),
    "MCP_EXAMPLE_THREADS": "16",
}


@pytest.mark.parametrize("framework", ["django", "flask"])
def test_streams_hold_no_pooled_connection_while_they_wait(
    framework: str, server_pool: ServerPool, databases: DatabaseFactory
) -> None:
    """Idle legacy clients keep a GET stream open, which a WSGI worker holds for a moment
    (``BLOCKING_HOLD_SECONDS``) before the client polls again: with one pooled connection,
    six such streams and the sessions' calls at once all get through."""
    live = server_pool.start(framework, "gunicorn", 1, databases.new("postgres"), env={**FAST, **ONE_CONNECTION})
    try:
        sessions = [initialize(live.url()) for _ in range(6)]
        legacy = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}

        async def stream(http: httpx.AsyncClient, session: str) -> httpx.Response:
            return await http.get(live.url(), headers={**legacy, "Mcp-Session-Id": session})

        async def listing(http: httpx.AsyncClient, session: str) -> httpx.Response:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            return await http.post(live.url(), json=body, headers={**legacy, "Mcp-Session-Id": session})

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as http:
                return await asyncio.gather(
                    *(stream(http, s) for s in sessions), *(listing(http, s) for s in sessions * 2)
                )

        answers = asyncio.run(run())
        assert [(a.request.method, a.status_code) for a in answers if a.status_code != 200] == [], live.log()
    finally:
        stop(live)
