"""The example app on a real socket (werkzeug's threaded server), driven by the official client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)
from sqlalchemy import text

from example_project.flask_app import create_app
from example_project.servers import files
from mcp_flask import MCP

LEGACY = "legacy"
MODERN = "2026-07-28"

questions: list[str] = []


async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """The user: says yes, and gives Ada's name."""
    questions.append(params.message)
    return ElicitResult(action="accept", content={"name": "Ada Lovelace", "ok": True})


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def _text(result: Any) -> str:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


@pytest.fixture
def example(
    flask_live_server: Callable[..., Any], backend: tuple[str, dict[str, Any]], fast_config: dict[str, Any]
) -> str:
    """The example app's base URL, its sessions in each backend."""
    uri, options = backend
    app = create_app({"MCP_DATABASE_URI": uri, "MCP_ENGINE_OPTIONS": options, **fast_config})
    return str(flask_live_server(app).url)


def test_home_page_lists_the_endpoints(example: str) -> None:
    page = httpx.get(f"{example}/").text
    for url in ("/mcp", "/mcp/conformance", "/mcp/files", "/mcp/bistro", "/mcp/library"):
        assert f"<code>{url}</code>" in page


def test_the_review_panel_is_served_to_this_machine_only(
    example: str, fast_config: dict[str, Any], sqlite_uri: str
) -> None:
    page = httpx.get(f"{example}/mcp-admin/")
    assert page.status_code == 200 and "elicitations" in page.text
    app = create_app({"MCP_DATABASE_URI": sqlite_uri, **fast_config})
    try:
        refused = app.test_client().get("/mcp-admin/", environ_base={"REMOTE_ADDR": "203.0.113.5"})
        assert refused.status_code == 403
    finally:
        app.extensions["mcp"].close()


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
def test_list_tools_and_client_features(example: str, mode: str) -> None:
    async def scenario() -> None:
        async with Client(f"{example}/mcp/library", mode=mode, elicitation_callback=answer) as client:
            tools = await client.list_tools()
            assert sorted(tool.name for tool in tools.tools) == ["client_features", "issue_card"]
            features = await client.call_tool("client_features")
            assert features.structured_content == {"result": ["elicitation"]}

    run(scenario())


def test_issue_card_elicits_mid_call_in_a_legacy_session(example: str) -> None:
    async def scenario() -> None:
        async with Client(f"{example}/mcp/library", mode=LEGACY, elicitation_callback=answer) as client:
            assert _text(await client.call_tool("issue_card")) == "Card issued to Ada Lovelace."

    questions.clear()
    run(scenario())
    assert questions == ["What name should go on the card?"]


def test_resolver_round_trip_in_the_2026_era(example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The example keeps its folders in a module dict: give each run its own.
    monkeypatch.setattr(files, "_FOLDERS", {"/tmp/empty": [], "/tmp/project": ["main.py", "README.md"]})

    async def scenario() -> None:
        async with Client(f"{example}/mcp/files", mode=MODERN, elicitation_callback=answer) as client:
            assert _text(await client.call_tool("delete_folder", {"path": "/tmp/empty"})) == "deleted /tmp/empty"
            assert questions == []  # an empty folder needs no confirmation
            result = await client.call_tool("delete_folder", {"path": "/tmp/project"})
            assert _text(result) == "deleted /tmp/project"

    questions.clear()
    run(scenario())
    assert questions == ["/tmp/project has 2 file(s). Delete anyway?"]


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
def test_demo_at_mcp(example: str, mode: str) -> None:
    async def scenario() -> None:
        async with Client(f"{example}/mcp", mode=mode) as client:
            assert _text(await client.call_tool("greet", {"name": "Flask"})) == "Hello, Flask!"

    run(scenario())


def test_questions_keyed_longer_than_their_column_in_the_2026_era(
    flask_live_server: Callable[..., Any],
    make_app: Callable[..., Any],
    backend: tuple[str, dict[str, Any]],
    fast_config: dict[str, Any],
) -> None:
    """A tool keys its questions by the client's own text, one longer than the row's column:
    the official client is asked both and its answers reach the tool, on every database."""
    server = MCPServer("Picker")
    long_item = "item " + "x" * 295

    @server.tool()
    async def pick(items: list[str], ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses or {}
        if all(item in answers for item in items):
            return ", ".join(str(answers[item].action) for item in items)
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        form = ElicitRequestFormParams
        asks = {item: ElicitRequest(params=form(message=item, requested_schema=schema)) for item in items}
        return InputRequiredResult(input_requests=asks, request_state="picking")

    uri, options = backend
    app = make_app(MCP_DATABASE_URI=uri, MCP_ENGINE_OPTIONS=options, **fast_config)
    mcp = MCP(app, server=server)
    live = flask_live_server(app)

    async def scenario() -> None:
        async with Client(f"{live.url}/mcp", mode=MODERN, elicitation_callback=answer) as client:
            assert _text(await client.call_tool("pick", {"items": [long_item, "short"]})) == "accept, accept"

    questions.clear()
    run(scenario())
    assert sorted(questions) == sorted([long_item, "short"])
    with mcp.store(app).engine.connect() as connection:
        rows = connection.execute(
            text("SELECT message, status, answer FROM mcp_elicitation WHERE server_name = 'Picker'")
        ).all()
    given = '{"name":"Ada Lovelace","ok":true}'
    assert sorted(rows) == sorted([(long_item, "accepted", given), ("short", "accepted", given)])
