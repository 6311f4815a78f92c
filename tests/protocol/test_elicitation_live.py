"""Elicitation under real deployments: the seed documents' examples under gunicorn with 4
workers, 50 rounds spread round-robin over 4 workers, and the asking worker SIGKILLed before
the answer arrives. Django and Flask, SQLite and PostgreSQL, the official ``mcp.Client``."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa
from celery import Celery
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, TextContent

from tests.conftest import ROOT, Database, DatabaseFactory, LiveServer, ServerPool, end_process, stop, stop_many
from tests.protocol.clients import MODES, Recorder, WorkerLog, roots, sampling, spread_client, spread_session

FRAMEWORKS = ["django", "flask"]
ROUNDS = 50
TABLE = {"django": "mcp_django_mcpelicitation", "flask": "mcp_elicitation"}
FAST = {"MCP_EXAMPLE_HEARTBEAT": "1", "MCP_EXAMPLE_STREAM_HOLD": "3"}


def text(result: Any) -> str:
    content = result.content
    assert len(content) == 1 and isinstance(content[0], TextContent), content
    return content[0].text


def elicitation_rows(live: LiveServer, **where: Any) -> list[dict[str, Any]]:
    url = live.database.url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    try:
        clause = " AND ".join(f"{name} = :{name}" for name in where) or "1 = 1"
        with engine.connect() as conn:
            result = conn.execute(sa.text(f"SELECT * FROM {TABLE[live.framework]} WHERE {clause}"), where)
            return [dict(row._mapping) for row in result]
    finally:
        engine.dispose()


@pytest.fixture(params=FRAMEWORKS)
def four_workers(
    request: pytest.FixtureRequest, server_pool: ServerPool, databases: DatabaseFactory, database_kind: str
) -> Iterator[LiveServer]:
    """A fresh 4-worker server and database, for a test that counts every row in it."""
    live = server_pool.start(request.param, "gunicorn", 4, databases.new(database_kind), env=FAST)
    yield live
    stop(live)


@pytest.fixture(scope="module")
def shared_servers() -> Iterator[dict[tuple[str, str], LiveServer]]:
    servers: dict[tuple[str, str], LiveServer] = {}
    yield servers
    stop_many(list(servers.values()))


@pytest.fixture(params=FRAMEWORKS)
def four_shared_workers(
    request: pytest.FixtureRequest,
    server_pool: ServerPool,
    databases: DatabaseFactory,
    database_kind: str,
    shared_servers: dict[tuple[str, str], LiveServer],
) -> LiveServer:
    """A 4-worker server shared, per framework and database, by this module's tests that look
    only at rows of their own making (each start costs seconds). A test that SIGKILLs a worker
    leaves gunicorn to start another; the next test is served by the others meanwhile."""
    key = (request.param, database_kind)
    live = shared_servers.get(key)
    if live is None or live.process.poll() is not None:
        live = shared_servers[key] = server_pool.start(
            request.param, "gunicorn", 4, databases.new(database_kind), env=FAST
        )
    return live


# -- the seed documents' examples, 4 workers ---------------------------------------------------


class Notifications:
    """``message_handler``: the server notifications the client saw."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, Exception):
            raise message
        self.seen.append(message)

    def completed(self) -> list[str]:
        return [
            n.params.elicitation_id
            for n in self.seen
            if getattr(n, "method", None) == "notifications/elicitation/complete"
        ]


async def handle_elicitation(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """The seed's callback, recording what it printed."""
    if isinstance(params, ElicitRequestURLParams):
        printed.append(f"Open this link to continue: {params.url}")
        return ElicitResult(action="accept")
    printed.append(params.message)
    return ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-27"})


printed: list[str] = []


def paid_ref(printed_link: str, booking_id: str) -> str:
    """The elicitation id the example bistro's payment link carries (the caller's own)."""
    prefix = f"Open this link to continue: https://pay.example.com/deposit/{booking_id}?ref=hold-{booking_id}."
    assert printed_link.startswith(prefix), printed_link
    return printed_link.partition("?ref=")[2]


@pytest.mark.slow
def test_seed_examples_under_four_workers(four_workers: LiveServer) -> None:
    live = four_workers

    async def run() -> None:
        workers = WorkerLog()
        printed.clear()
        async with spread_client(live.url("/bistro"), "legacy", workers, elicitation_callback=handle_elicitation) as c:
            booked = await c.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
            assert text(booked) == "Booked a table for 2 on 2025-12-27."
        assert printed == ["No tables for 2 on 2025-12-25. Would you like to try another date?"]

        printed.clear()
        notes = Notifications()
        async with spread_client(
            live.url("/bistro"), "legacy", workers, elicitation_callback=handle_elicitation, message_handler=notes
        ) as c:
            assert (
                text(await c.call_tool("pay_deposit", {"booking_id": "17"})) == "Complete the payment in your browser."
            )
            assert printed == ["Open this link to continue: https://pay.example.com/deposit/17"]
            assert (
                text(await c.call_tool("confirm_deposit", {"booking_id": "17"})) == "Deposit received for booking 17."
            )
            deadline = time.monotonic() + 15
            while "deposit-17" not in notes.completed() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert notes.completed() == ["deposit-17"]
        (row,) = elicitation_rows(live, elicitation_id="deposit-17")
        assert (row["mode"], row["status"], row["url"]) == ("url", "completed", "https://pay.example.com/deposit/17")

        card = Recorder(ElicitResult(action="accept", content={"name": "Ada Lovelace"}))
        async with spread_client(live.url("/library"), "legacy", workers, elicitation_callback=card) as c:
            assert text(await c.call_tool("issue_card")) == "Card issued to Ada Lovelace."
        (asked,) = card.asked
        assert (asked.mode, asked.message) == ("form", "What name should go on the card?")
        assert asked.requested_schema == {
            "properties": {"name": {"title": "Name", "type": "string"}},
            "required": ["name"],
            "title": "CardHolder",
            "type": "object",
        }
        (row,) = elicitation_rows(live, tool="issue_card")
        assert row["status"] == "accepted" and json.loads(row["answer"]) == {"name": "Ada Lovelace"}

        for callbacks, expected in [
            ({"elicitation_callback": card}, ["elicitation"]),
            (
                {"elicitation_callback": card, "sampling_callback": sampling, "list_roots_callback": roots},
                ["elicitation", "sampling", "roots"],
            ),
            ({}, []),
        ]:
            async with spread_client(live.url("/library"), "legacy", workers, **callbacks) as c:
                assert (await c.call_tool("client_features")).structured_content == {"result": expected}

        async with spread_client(live.url("/library"), "legacy", workers) as c:
            with pytest.raises(MCPError, match="Elicitation not supported"):
                await c.call_tool("issue_card")

        # delete_folder on both eras: no question for an empty folder; each answer's branch.
        for mode in ("legacy", "2026-07-28"):
            for answer, expected in [
                (ElicitResult(action="accept", content={"ok": False}), "kept the folder"),
                (ElicitResult(action="decline"), "declined: folder not deleted"),
                (ElicitResult(action="cancel"), "cancelled: folder not deleted"),
            ]:
                recorder = Recorder(answer)
                async with spread_client(live.url("/files"), mode, workers, elicitation_callback=recorder) as c:
                    assert text(await c.call_tool("delete_folder", {"path": "/tmp/empty"})) == "deleted /tmp/empty"
                    assert recorder.asked == []
                    assert text(await c.call_tool("delete_folder", {"path": "/tmp/project"})) == expected
                assert recorder.asked[0].message == "/tmp/project has 2 file(s). Delete anyway?"
        statuses = sorted(r["status"] for r in elicitation_rows(live, tool="delete_folder"))
        assert statuses == sorted(["accepted", "declined", "cancelled"] * 2)

        # The URL-mode resolver, both eras.
        for mode in ("legacy", "2026-07-28"):
            printed.clear()
            async with spread_client(live.url("/bistro"), mode, workers, elicitation_callback=handle_elicitation) as c:
                held = text(await c.call_tool("hold_table", {"booking_id": f"h-{mode}"}))
            (link,) = printed
            ref = paid_ref(link, f"h-{mode}")
            assert held == f"Holding booking h-{mode}; complete the payment at {link.split(': ', 1)[1]}."
            (row,) = elicitation_rows(live, elicitation_id=ref)
            assert (row["mode"], row["status"]) == ("url", "accepted")
        await spread_session(live.url("/library"), "legacy", workers)
        await replayed_and_forged_states_are_refused(live)
        # Accept with ok=True deletes (last: the folders live in each worker's memory).
        for mode in ("legacy", "2026-07-28"):
            recorder = Recorder(ElicitResult(action="accept", content={"ok": True}))
            async with spread_client(live.url("/files"), mode, workers, elicitation_callback=recorder) as c:
                assert text(await c.call_tool("delete_folder", {"path": "/tmp/project"})) == "deleted /tmp/project"

    asyncio.run(run())


async def replayed_and_forged_states_are_refused(live: LiveServer) -> None:
    """Raw 2026-07-28 exchanges: the handle works once, from any worker, for its own request."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "delete_folder",
    }

    def body(path: str, **extra: Any) -> dict[str, Any]:
        params = {"name": "delete_folder", "arguments": {"path": path}, "_meta": meta, **extra}
        return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}

    def refused(response: httpx2.Response) -> bool:
        error = response.json()["error"]
        return (
            response.status_code == 400
            and error["code"] == -32602
            and error["data"] == {"reason": "invalid_request_state"}
        )

    limits = httpx2.Limits(max_keepalive_connections=0)
    async with httpx2.AsyncClient(limits=limits, timeout=30) as http:
        asked = (await http.post(live.url("/files"), json=body("/tmp/project"), headers=headers)).json()["result"]
        handle = asked["requestState"]
        assert handle.startswith("mcp1.")
        ((key, _),) = asked["inputRequests"].items()
        answer = {key: {"action": "accept", "content": {"ok": False}}}
        forged = handle[:-3] + ("xyz" if not handle.endswith("xyz") else "abc")
        retry = body("/tmp/project", inputResponses=answer, requestState=forged)
        assert refused(await http.post(live.url("/files"), json=retry, headers=headers))
        other = body("/tmp/empty", inputResponses=answer, requestState=handle)
        assert refused(await http.post(live.url("/files"), json=other, headers=headers))
        retry = body("/tmp/project", inputResponses=answer, requestState=handle)
        done = await http.post(live.url("/files"), json=retry, headers=headers)
        assert done.json()["result"]["content"][0]["text"] == "kept the folder"
        assert refused(await http.post(live.url("/files"), json=retry, headers=headers))


# -- SIGKILL of the worker that asked -----------------------------------------------------------


@pytest.mark.slow
def test_worker_killed_while_waiting_for_the_answer(four_shared_workers: LiveServer) -> None:
    live = four_shared_workers
    killed: list[int] = []
    before = {row["id"] for row in elicitation_rows(live, tool="issue_card")}

    async def kill_the_asker(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        (row,) = [r for r in elicitation_rows(live, tool="issue_card", status="pending") if r["id"] not in before]
        pid = int(row["owner"].split(":")[1])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        return ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async def run() -> None:
        async with spread_client(live.url("/library"), "legacy", WorkerLog(), elicitation_callback=kill_the_asker) as c:
            with pytest.raises(MCPError, match="stopped while it waited for the client"):
                await c.call_tool("issue_card")
            # The deployment carries on: the next call is served by the surviving workers.
            card = Recorder(ElicitResult(action="accept", content={"name": "Grace Hopper"}))
        async with spread_client(live.url("/library"), "legacy", WorkerLog(), elicitation_callback=card) as c:
            assert text(await c.call_tool("issue_card")) == "Card issued to Grace Hopper."

    asyncio.run(run())
    assert len(killed) == 1
    rows = elicitation_rows(live, tool="issue_card")
    lost = [r for r in rows if r["owner"].split(":")[1] == str(killed[0])]
    (row,) = lost
    # The answer was not lost: the row holds it, and says the call itself did not complete.
    assert row["status"] == "accepted" and json.loads(row["answer"]) == {"name": "Ada Lovelace"}
    assert "stopped while it waited for the client" in row["detail"]


class CallWorker:
    """Response hook: the process that took the last ``tools/call`` (the example apps' header)."""

    def __init__(self) -> None:
        self.pid: int | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        if response.request.method == "POST" and b'"tools/call"' in response.request.content:
            self.pid = int(response.headers["x-example-worker"])


@pytest.mark.parametrize("tool", ["test_sampling", "test_tool_with_progress"])
def test_worker_killed_while_a_plain_call_runs(four_shared_workers: LiveServer, tool: str) -> None:
    """The worker running a call dies while the call waits for a sampling answer, or right
    after its first progress report: the official client's resumed stream ends with a clear
    error instead of reconnecting forever."""
    live = four_shared_workers
    worker = CallWorker()
    killed: list[int] = []

    def kill() -> None:
        if not killed:
            assert worker.pid is not None
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)

    async def kill_then_answer(context: ClientRequestContext, params: Any) -> Any:
        kill()
        return await sampling(context, params)

    async def kill_on_progress(progress: float, total: float | None, message: str | None) -> None:
        kill()

    async def run() -> None:
        url = live.url("/conformance")
        async with spread_client(url, "legacy", worker, sampling_callback=kill_then_answer) as c:  # type: ignore[arg-type]
            with pytest.raises(MCPError, match="stopped before it finished"):
                arguments = {"prompt": "Hi?"} if tool == "test_sampling" else {}
                await asyncio.wait_for(c.call_tool(tool, arguments, progress_callback=kill_on_progress), 60)

    asyncio.run(run())
    assert len(killed) == 1


# -- 50 rounds, round-robin over 4 workers ------------------------------------------------------


class RoundRobin(httpx2.AsyncBaseTransport):
    """Sends each HTTP request to the next of several servers, in turn."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = itertools.cycle(ports)
        self.used: list[int] = []
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        self.used.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def round_robin_client(url: str, mode: str, rr: RoundRobin, **callbacks: Any) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(transport=rr, timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, **callbacks) as client:
        yield client


@pytest.fixture(params=FRAMEWORKS)
def four_single_workers(
    request: pytest.FixtureRequest, server_pool: ServerPool, databases: DatabaseFactory, database_kind: str
) -> Iterator[list[LiveServer]]:
    database: Database = databases.new(database_kind)
    servers = server_pool.start_many(4, request.param, "gunicorn", 1, database, env=FAST)
    yield servers
    stop_many(servers)


@pytest.mark.slow
def test_fifty_rounds_round_robin_over_four_workers(four_single_workers: list[LiveServer]) -> None:
    servers = four_single_workers
    ports = [int(s.base_url.rsplit(":", 1)[1]) for s in servers]
    first = servers[0]
    rr = RoundRobin(ports)
    card = Recorder(*[ElicitResult(action="accept", content={"name": f"Reader {i}"}) for i in range(ROUNDS)])
    table = Recorder(
        *[ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-27"})] * ROUNDS
    )
    folder = Recorder(*[ElicitResult(action="accept", content={"ok": False})] * ROUNDS)

    async def run() -> None:
        async with round_robin_client(first.url("/library"), "legacy", rr, elicitation_callback=card) as c:
            for i in range(ROUNDS):
                assert text(await c.call_tool("issue_card")) == f"Card issued to Reader {i}."
        async with round_robin_client(first.url("/bistro"), "legacy", rr, elicitation_callback=table) as c:
            for _ in range(ROUNDS):
                booked = await c.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
                assert text(booked) == "Booked a table for 2 on 2025-12-27."
        async with round_robin_client(first.url("/files"), "2026-07-28", rr, elicitation_callback=folder) as c:
            for _ in range(ROUNDS):
                assert text(await c.call_tool("delete_folder", {"path": "/tmp/project"})) == "kept the folder"

    try:
        asyncio.run(run())
    except Exception as exc:
        # The servers' side of a failed round (a 500 says nothing more to the client).
        logs = "\n".join(f"--- {s.base_url}\n{s.log()[-6000:]}" for s in servers)
        raise AssertionError(f"a round failed: {exc!r}; the servers' logs:\n{logs}") from exc
    assert {p: rr.used.count(p) for p in ports} == {p: len(rr.used) // 4 for p in ports} or (
        max(rr.used.count(p) for p in ports) - min(rr.used.count(p) for p in ports) <= 1
    )
    rows = elicitation_rows(first)
    assert len(rows) == 3 * ROUNDS
    assert {r["status"] for r in rows} == {"accepted"}
    assert len(card.asked) == len(table.asked) == len(folder.asked) == ROUNDS


# -- completion from outside MCP: a payment webhook, a Celery task --------------------------------


@asynccontextmanager
async def celery_worker(live: LiveServer, broker: str, backend: str, queue: str) -> AsyncIterator[None]:
    env = {
        **os.environ,
        "MCP_EXAMPLE_DATABASE_URL": live.database.url,
        "MCP_EXAMPLE_CELERY_BROKER": broker,
        "MCP_EXAMPLE_CELERY_BACKEND": backend,
        "DJANGO_SETTINGS_MODULE": "example_project.django_site.settings",
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "example_project.django_site.celery",
        "worker",
        "--pool=solo",
        "-Q",
        queue,
        "--without-gossip",
        "--without-mingle",
        "--loglevel=WARNING",
    ]
    log_path = live.log_path.with_suffix(".celery.log")
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        end_process(process)


async def wait_for(notes: Notifications, elicitation_id: str) -> None:
    deadline = time.monotonic() + 20
    while elicitation_id not in notes.completed() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert elicitation_id in notes.completed(), notes.seen


@pytest.mark.slow
def test_webhook_and_celery_complete_url_elicitations(four_shared_workers: LiveServer) -> None:
    live = four_shared_workers
    webhook = live.base_url + "/payments/webhook"
    token = {"Authorization": "Bearer demo-webhook-token"}
    queue = f"mcp-test-{uuid.uuid4().hex[:8]}"
    # Both brokers the README names: Redis (results there too) and RabbitMQ (results by RPC).
    brokers = {"c": ("redis://127.0.0.1:6379/7",) * 2, "r": ("amqp://guest:guest@127.0.0.1:5672//", "rpc://")}

    async def run() -> None:
        notes = Notifications()
        async with httpx2.AsyncClient() as http:
            # Bad input gets a clear JSON error and completes nothing.
            assert (await http.post(webhook, json={"elicitation_id": "deposit-w"})).status_code == 401
            bad = await http.post(webhook, content=b"{", headers=token)
            assert bad.status_code == 400 and "elicitation_id" in bad.json()["error"]
            async with spread_client(
                live.url("/bistro"),
                "legacy",
                WorkerLog(),
                elicitation_callback=handle_elicitation,
                message_handler=notes,
            ) as c:
                for booking in ("w", *brokers):
                    paid = await c.call_tool("pay_deposit", {"booking_id": booking})
                    assert text(paid) == "Complete the payment in your browser."
                done = await http.post(webhook, json={"elicitation_id": "deposit-w"}, headers=token)
                assert done.json() == {"completed": 1}
                await wait_for(notes, "deposit-w")
                again = await http.post(webhook, json={"elicitation_id": "deposit-w"}, headers=token)
                assert again.json() == {"completed": 0}
                if live.framework == "django":
                    for booking, (broker, backend) in brokers.items():
                        sender = Celery(broker=broker, backend=backend)
                        try:
                            async with celery_worker(live, broker, backend, queue):
                                result = sender.send_task(
                                    "mcp_django.complete_elicitation", args=[f"deposit-{booking}"], queue=queue
                                )
                                assert await asyncio.to_thread(result.get, timeout=60) == 1, broker
                                # The purge as Celery beat sends it, by the task's name: fresh
                                # rows are kept (30 days), the worker reports what it deleted.
                                purged = sender.send_task(
                                    "mcp_django.purge", kwargs={"elicitation_days": 30}, queue=queue
                                )
                                counts = await asyncio.to_thread(purged.get, timeout=60)
                                assert set(counts) == {"sessions", "elicitations", "expired"}, broker
                                assert counts["elicitations"] == 0, broker
                        finally:
                            with sender.connection_for_write() as connection:
                                connection.default_channel.queue_delete(queue)
                            sender.backend.result_consumer.stop()  # its connection (RPC: RabbitMQ's)
                            sender.close()
                        await wait_for(notes, f"deposit-{booking}")
                    assert notes.completed().count("deposit-w") == 1
            # A 2026-07-28 client has no stream to notify: the row records the completion.
            printed.clear()
            async with spread_client(
                live.url("/bistro"), "2026-07-28", WorkerLog(), elicitation_callback=handle_elicitation
            ) as c:
                await c.call_tool("hold_table", {"booking_id": "m"})
            hold_m = paid_ref(printed[0], "m")  # the payment link carries the id to the provider
            assert (await http.post(webhook, json={"elicitation_id": hold_m}, headers=token)).json() == {"completed": 1}
            # The next call's resolver observes the completed row: the guest is not sent to pay again.
            printed.clear()
            for mode in MODES:
                async with spread_client(
                    live.url("/bistro"), mode, WorkerLog(), elicitation_callback=handle_elicitation
                ) as c:
                    held = text(await c.call_tool("hold_table", {"booking_id": "m"}))
                assert held == "Deposit received: table held for booking m.", mode
            assert printed == []
        (row,) = elicitation_rows(live, elicitation_id=hold_m)
        assert row["status"] == "completed"
        statuses = {r["elicitation_id"]: r["status"] for r in elicitation_rows(live, mode="url")}
        assert statuses["deposit-w"] == "completed"
        for booking in brokers:
            assert statuses[f"deposit-{booking}"] == ("completed" if live.framework == "django" else "accepted")

    asyncio.run(run())
