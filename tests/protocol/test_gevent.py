"""gunicorn's ``gevent`` worker class: every thread of the worker is a greenlet of one OS thread,
the endpoint's event loop included. The example apps under ``gunicorn -k gevent``, driven by the
official client: both eras, a legacy question answered, a URL question completed by the
payment webhook, the site's own database views around them, and a prompt SIGTERM with a
conversation open. SQLite, and PostgreSQL through psycopg (which waits through gevent)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from mcp.types import ElicitResult

from tests.conftest import DatabaseFactory, LiveServer, ServerPool, stop
from tests.protocol.clients import MODES, Recorder, WorkerLog, spread_client, spread_session
from tests.protocol.test_elicitation_live import handle_elicitation, paid_ref, printed, text
from tests.protocol.test_server_shutdown import PROMPT_STOP_SECONDS, open_conversations


@pytest.fixture(params=["django", "flask"])
def gevent_server(
    request: pytest.FixtureRequest, server_pool: ServerPool, databases: DatabaseFactory, database_kind: str
) -> Iterator[LiveServer]:
    if importlib.util.find_spec("gevent") is None:
        message = "gevent is not installed (the dev extra installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    live = server_pool.start(
        request.param, "gunicorn", 2, databases.new(database_kind), env={"MCP_EXAMPLE_WORKER_CLASS": "gevent"}
    )
    yield live
    stop(live)


@pytest.mark.slow
def test_both_eras_and_the_site_under_gevent_workers(gevent_server: LiveServer) -> None:
    live = gevent_server
    webhook = live.base_url + "/payments/webhook"
    token = {"Authorization": "Bearer demo-webhook-token"}

    async def run() -> None:
        workers = WorkerLog()
        for mode in MODES:
            async with spread_client(live.url(), mode, workers) as client:
                for _ in range(4):
                    assert text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
        card = Recorder(ElicitResult(action="accept", content={"name": "Ada Lovelace"}))
        async with spread_client(live.url("/library"), "legacy", workers, elicitation_callback=card) as client:
            assert text(await client.call_tool("issue_card")) == "Card issued to Ada Lovelace."
        declined = Recorder(ElicitResult(action="decline"))
        async with spread_client(live.url("/files"), "2026-07-28", workers, elicitation_callback=declined) as client:
            deleted = text(await client.call_tool("delete_folder", {"path": "/tmp/project"}))
        assert deleted == "declined: folder not deleted"
        assert len(declined.asked) == 1
        printed.clear()
        async with spread_client(
            live.url("/bistro"), "2026-07-28", workers, elicitation_callback=handle_elicitation
        ) as client:
            await client.call_tool("hold_table", {"booking_id": "g"})
        completed = httpx.post(webhook, json={"elicitation_id": paid_ref(printed[0], "g")}, headers=token)
        assert completed.json() == {"completed": 1}, completed.text
        async with spread_client(
            live.url("/bistro"), "legacy", workers, elicitation_callback=handle_elicitation
        ) as client:
            held = text(await client.call_tool("hold_table", {"booking_id": "g"}))
        assert held == "Deposit received: table held for booking g."
        # Which worker accepts a connection is the kernel's choice: one session keeps calling,
        # for up to 30 s, until the other worker has served it too.
        await spread_session(live.url("/library"), "legacy", workers)
        assert len(set(workers.pids)) == 2, workers.pids

    asyncio.run(run())
    # Both workers run their endpoint's event loop now; the site's own views still reach the
    # database (Django's ORM refuses a thread where an event loop runs).
    for _ in range(6):
        unknown = httpx.post(webhook, json={"elicitation_id": "deposit-none"}, headers=token)
        assert unknown.status_code == 200 and unknown.json() == {"completed": 0}, unknown.text[:300]
        if live.framework == "django":
            order = httpx.get(live.base_url + "/orders/1001")
            assert order.status_code == 200 and "Ada Lovelace" in order.text, order.text[:300]

    readers = open_conversations(live)
    live.process.send_signal(signal.SIGTERM)
    try:
        live.process.wait(PROMPT_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {PROMPT_STOP_SECONDS:.0f} s after SIGTERM:\n{live.log()}")
    for reader in readers:
        reader.join(5)
        assert not reader.is_alive(), "a stream outlived its server"
    assert "Traceback" not in live.log(), live.log()
