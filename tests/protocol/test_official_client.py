"""The official ``mcp.Client``, both eras, against the example apps served by real servers.

Every configuration runs 2 worker processes and the client opens a new connection for every
request, so the requests of one session land on different workers; each test checks that
they did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult, TextContent

from tests.conftest import DatabaseFactory, LiveServer, ServerPool, stop
from tests.protocol.clients import MODES, Recorder, WorkerLog, roots, sampling, spread_client, spread_session

TARGETS = [("django", "gunicorn"), ("django", "uvicorn"), ("flask", "gunicorn")]


@pytest.fixture(params=TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def server(request: pytest.FixtureRequest, example_server: Callable[..., LiveServer], database_kind: str) -> LiveServer:
    framework, kind = request.param
    return example_server(framework, kind, 2, database_kind)


def text(result: object) -> str:
    content = result.content  # type: ignore[attr-defined]
    assert len(content) == 1 and isinstance(content[0], TextContent), content
    return content[0].text


def assert_spread(workers: WorkerLog) -> None:
    assert len(workers.pids) >= 4, workers.pids
    assert len(set(workers.pids)) >= 2, f"every request reached the same worker: {workers.pids}"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_list_and_call_tools(server: LiveServer, mode: str) -> None:
    async def run() -> None:
        workers = WorkerLog()
        async with spread_client(server.url("/library"), mode, workers) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == {"issue_card", "client_features"}
            for _ in range(4):
                result = await client.call_tool("client_features")
                assert result.structured_content == {"result": []}
        async with spread_client(server.url(), mode, workers) as client:
            assert text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
            bad = await client.call_tool("greet", {})
            assert bad.is_error
        await spread_session(server.url("/library"), mode, workers)
        assert_spread(workers)

    asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_client_features_follow_the_callbacks(server: LiveServer, mode: str) -> None:
    async def features(**callbacks: object) -> object:
        workers = WorkerLog()
        async with spread_client(server.url("/library"), mode, workers, **callbacks) as client:
            return (await client.call_tool("client_features")).structured_content

    async def run() -> None:
        assert await features(elicitation_callback=Recorder()) == {"result": ["elicitation"]}
        everything = await features(
            elicitation_callback=Recorder(), sampling_callback=sampling, list_roots_callback=roots
        )
        assert everything == {"result": ["elicitation", "sampling", "roots"]}
        assert await features() == {"result": []}

    asyncio.run(run())


@pytest.mark.slow
def test_legacy_form_elicitation_across_workers(server: LiveServer) -> None:
    async def run() -> None:
        workers = WorkerLog()
        card = Recorder(ElicitResult(action="accept", content={"name": "Ada Lovelace"}))
        async with spread_client(server.url("/library"), "legacy", workers, elicitation_callback=card) as client:
            assert text(await client.call_tool("issue_card")) == "Card issued to Ada Lovelace."
        assert card.asked[0].message == "What name should go on the card?"
        assert card.asked[0].requested_schema["required"] == ["name"]

        table = Recorder(ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-27"}))
        async with spread_client(server.url("/bistro"), "legacy", workers, elicitation_callback=table) as client:
            booked = await client.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
            assert text(booked) == "Booked a table for 2 on 2025-12-27."
            declined = Recorder(ElicitResult(action="decline"))
        assert table.asked[0].message == "No tables for 2 on 2025-12-25. Would you like to try another date?"
        async with spread_client(server.url("/bistro"), "legacy", workers, elicitation_callback=declined) as client:
            assert text(await client.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})) == (
                "No booking made."
            )
        await spread_session(server.url("/bistro"), "legacy", workers)
        assert_spread(workers)

    asyncio.run(run())


@pytest.mark.slow
def test_ctx_elicit_needs_a_legacy_connection(server: LiveServer) -> None:
    """The seed: ``ctx.elicit`` is a server-to-client request, absent from the 2026 wire."""

    async def run() -> None:
        workers = WorkerLog()
        card = Recorder(ElicitResult(action="accept", content={"name": "Ada Lovelace"}))
        async with spread_client(server.url("/library"), "2026-07-28", workers, elicitation_callback=card) as client:
            with pytest.raises(MCPError):
                await client.call_tool("issue_card")
        assert card.asked == []

    asyncio.run(run())


@pytest.mark.slow
def test_client_without_callback_gets_elicitation_not_supported(server: LiveServer) -> None:
    async def run() -> None:
        async with spread_client(server.url("/library"), "legacy", WorkerLog()) as client:
            with pytest.raises(MCPError, match="Elicitation not supported"):
                await client.call_tool("issue_card")

    asyncio.run(run())


async def _delete_project(url: str, mode: str, answer: ElicitResult) -> tuple[str, Recorder]:
    recorder = Recorder(answer)
    async with spread_client(url, mode, WorkerLog(), elicitation_callback=recorder) as client:
        assert text(await client.call_tool("delete_folder", {"path": "/tmp/empty"})) == "deleted /tmp/empty"
        assert recorder.asked == []
        result = text(await client.call_tool("delete_folder", {"path": "/tmp/project"}))
    return result, recorder


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ElicitResult(action="accept", content={"ok": False}), "kept the folder"),
        (ElicitResult(action="decline"), "declined: folder not deleted"),
        (ElicitResult(action="cancel"), "cancelled: folder not deleted"),
    ],
    ids=["accept-not-ok", "decline", "cancel"],
)
def test_resolver_asks_only_for_a_non_empty_folder(
    server: LiveServer, mode: str, answer: ElicitResult, expected: str
) -> None:
    result, recorder = asyncio.run(_delete_project(server.url("/files"), mode, answer))
    assert result == expected
    assert [q.message for q in recorder.asked] == ["/tmp/project has 2 file(s). Delete anyway?"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_resolver_accept_deletes_the_folder(
    server_pool: ServerPool, databases: DatabaseFactory, target: tuple[str, str], mode: str
) -> None:
    # The seed's folders live in each process's memory, so the deleting answer gets a server of
    # its own, with one worker: a second worker would still hold its own copy of the folder.
    live = server_pool.start(target[0], target[1], 1, databases.new("sqlite"))
    try:
        answer = ElicitResult(action="accept", content={"ok": True})
        result, recorder = asyncio.run(_delete_project(live.url("/files"), mode, answer))
        assert result == "deleted /tmp/project"
        assert len(recorder.asked) == 1
        again, recorder = asyncio.run(_delete_project(live.url("/files"), mode, answer))
        assert again == "deleted /tmp/project" and recorder.asked == []
    finally:
        stop(live)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gunicorn", "uvicorn"])
@pytest.mark.parametrize("mode", MODES)
def test_the_django_demos_page_and_model_are_tools(
    example_server: Callable[..., LiveServer], database_kind: str, kind: str, mode: str
) -> None:
    """The example shop's order page (``view_tool``) and its ``Order`` model (``model_tools``),
    through the official client, on whichever worker takes each request."""
    server = example_server("django", kind, 2, database_kind)

    async def run() -> None:
        workers = WorkerLog()
        async with spread_client(server.url(), mode, workers) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert tools["order_page"].description == "An order's page: its customer, status and total."
            assert tools["order_page"].input_schema["required"] == ["number"]
            page = await client.call_tool("order_page", {"number": "1002"})
            assert text(page) == "Order 1002\nOrder 1002\nCustomer: Grace Hopper\nStatus: Shipped\nTotal: 17.50 EUR"
            missing = await client.call_tool("order_page", {"number": "9999"})
            assert missing.is_error and text(missing) == "404 Not Found"
            # Not a number (a NUL, which PostgreSQL refuses in a query): no such order either.
            nul = await client.call_tool("order_page", {"number": "10\u0000"})
            assert nul.is_error and text(nul) == "404 Not Found"
            listed = await client.call_tool("list_orders", {"search": "ada", "page_size": 1})
            assert listed.structured_content is not None
            assert [row["number"] for row in listed.structured_content["results"]] == ["1003"]
            assert (listed.structured_content["count"], listed.structured_content["pages"]) == (2, 2)
            one = await client.call_tool("get_order", {"id": listed.structured_content["results"][0]["id"]})
            assert one.structured_content is not None and one.structured_content["customer"] == "Ada Lovelace"
            refused = await client.call_tool("list_orders", {"status": "lost"})
            assert refused.is_error
        assert len(workers.pids) >= 6
        async with httpx.AsyncClient() as http:
            page = await http.get(server.base_url + "/orders/%00")
            assert page.status_code == 404, page.text

    asyncio.run(run())
