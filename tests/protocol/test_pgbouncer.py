"""Behind PgBouncer in transaction pooling mode, as many production sites reach PostgreSQL:
every transaction may run on another server connection, so nothing may live on one between
transactions (prepared statements, session settings, session-level locks, ``LISTEN``).

Django and Flask under gunicorn, with persistent connections (the example's ``CONN_MAX_AGE``,
SQLAlchemy's pool), through a PgBouncer with one server connection, many times the same
statements on each client connection (psycopg prepares a statement after it ran five times):
both eras, questions answered in both, a completion from outside.
"""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from mcp.types import ElicitResult

from tests.conftest import Database, DatabaseFactory, ServerPool, postgres_available, stop
from tests.pgbouncer import transaction_pooler
from tests.protocol.clients import Recorder, WorkerLog, spread_client
from tests.protocol.test_elicitation_live import FAST, handle_elicitation, paid_ref, printed, text

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROUNDS = 8
"""More than psycopg's ``prepare_threshold`` (5) for every statement of a round."""


@pytest.mark.parametrize("framework", ["django", "flask"])
def test_both_eras_through_pgbouncer_in_transaction_mode(
    framework: str, server_pool: ServerPool, databases: DatabaseFactory
) -> None:
    if not postgres_available():
        pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432: the test command starts it")
    direct = databases.new("postgres")
    with transaction_pooler(direct.url) as pooled:
        live = server_pool.start(framework, "gunicorn", 1, Database("postgres", pooled), env=FAST)
        try:
            asyncio.run(conversations(live.url(), live.base_url))
        except BaseException:
            print(live.log())
            raise
        finally:
            stop(live)


async def conversations(url: str, base_url: str) -> None:
    """Both eras, ``ROUNDS`` times each on one connection, questions answered in both, a
    completion from the payment webhook observed by the next 2026-07-28 call."""
    workers = WorkerLog()
    decline = Recorder(*[ElicitResult(action="decline")] * ROUNDS * 2)
    # 2026-07-28: plain calls, and questions whose request state is saved and redeemed.
    async with spread_client(url + "/files", "2026-07-28", workers, elicitation_callback=decline) as client:
        for _ in range(ROUNDS):
            result = await client.call_tool("delete_folder", {"path": "/tmp/project"})
            assert text(result) == "declined: folder not deleted"
    async with spread_client(url, "2026-07-28", workers) as client:
        for _ in range(ROUNDS):
            assert text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
    # Legacy: one session, a question asked and answered on its stream in every round.
    card = Recorder(*[ElicitResult(action="accept", content={"name": "Ada Lovelace"})] * ROUNDS)
    async with spread_client(url + "/library", "legacy", workers, elicitation_callback=card) as client:
        for _ in range(ROUNDS):
            assert text(await client.call_tool("issue_card")) == "Card issued to Ada Lovelace."
    # A completion from outside (the payment webhook), observed by the next 2026 call.
    token = {"Authorization": "Bearer demo-webhook-token"}
    printed.clear()
    async with spread_client(url + "/bistro", "2026-07-28", workers, elicitation_callback=handle_elicitation) as c:
        await c.call_tool("hold_table", {"booking_id": "b"})
        held = paid_ref(printed[0], "b")
        async with httpx2.AsyncClient() as http:
            done = await http.post(base_url + "/payments/webhook", json={"elicitation_id": held}, headers=token)
        assert done.json() == {"completed": 1}
        assert text(await c.call_tool("hold_table", {"booking_id": "b"})) == (
            "Deposit received: table held for booking b."
        )
