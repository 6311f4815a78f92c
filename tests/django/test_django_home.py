"""Under WSGI a call's blocking work runs on its request's own thread while that thread waits
for the call (``mcp_common.home``): a tool the SDK runs (one taking a ``Context``), the ORM
work of an async tool, the store's queries. So a Django ``TestCase`` (pytest-django's ``db``)
works for every tool, not only for plain sync ones: they all see the test's uncommitted rows,
on SQLite's in-memory test database (where another connection met "database table is
locked") and on PostgreSQL (where another connection saw none of them); and under
``ATOMIC_REQUESTS`` a tool's queries run in the request's transaction."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings

from tests.django import home_site

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.django.home_site")]

PATH = "/home-mcp"
MODERN, LEGACY = "2026-07-28", "2025-11-25"
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(autouse=True)
def fresh_records() -> Any:
    home_site.seen.clear()
    yield
    home_site.seen.clear()
    # The endpoint's own database threads (its heartbeat) keep their connections: closed here,
    # or a test database on PostgreSQL could not be dropped.
    from mcp_django.registry import get_endpoint

    get_endpoint(home_site.home).shutdown()


def post(client: Client, body: dict[str, Any], **headers: str) -> Any:
    return client.post(PATH, json.dumps(body), content_type="application/json", HTTP_ACCEPT=ACCEPT, **headers)


def messages(response: Any) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, JSON or SSE (read here, on the test's thread)."""
    if not response.streaming:
        return [response.json()]
    text = b"".join(response.streaming_content).decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line[6:].strip()]


def modern_call(client: Client, name: str, **params: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta, **params},
    }
    response = post(client, body, HTTP_MCP_PROTOCOL_VERSION=MODERN, HTTP_MCP_METHOD="tools/call", HTTP_MCP_NAME=name)
    assert response.status_code == 200, response.content
    return messages(response)[-1]


def legacy_session(client: Client) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    response = post(client, init)
    assert response.status_code == 200, response.content
    session = response["Mcp-Session-Id"]
    messages(response)
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(client, done, HTTP_MCP_SESSION_ID=session, HTTP_MCP_PROTOCOL_VERSION=LEGACY).status_code == 202
    return session


def legacy_call(client: Client, session: str, name: str, **params: Any) -> dict[str, Any]:
    return legacy_messages(client, session, name, **params)[-1]


def legacy_messages(client: Client, session: str, name: str, **params: Any) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name, "arguments": {}, **params}}
    response = post(client, body, HTTP_MCP_SESSION_ID=session, HTTP_MCP_PROTOCOL_VERSION=LEGACY)
    assert response.status_code == 200, response.content
    return messages(response)


@pytest.mark.parametrize("tool", ["users_with_context", "users_async"])
@pytest.mark.parametrize("era", ["2026-07-28", "legacy"])
def test_tools_off_the_fast_path_see_the_tests_rows(era: str, tool: str) -> None:
    User.objects.create(username="ada")
    client = Client()
    reply = legacy_call(client, legacy_session(client), tool) if era == "legacy" else modern_call(client, tool)
    assert reply["result"]["structuredContent"] == {"result": 1}, reply
    (record,) = home_site.seen
    assert record["thread"] is threading.current_thread()
    assert record["in_transaction"], "the test's transaction"


def test_a_legacy_sync_tool_that_notifies_its_client_sees_the_tests_rows() -> None:
    """Each notification of a legacy call is written to the session's event log from the loop
    while the tool, on the request's thread, waits for it (``anyio.from_thread``): the write
    runs there too. It waited a quarter of a second for that busy thread each time, then ran
    on a thread of its own, which SQLite's in-memory test database refused ("database table
    is locked"): the tool failed."""
    User.objects.create(username="ada")
    client = Client()
    seen = legacy_messages(client, legacy_session(client), "users_logging")
    assert [m.get("method") for m in seen] == ["notifications/message"] * 3 + [None], seen
    assert seen[-1]["result"]["structuredContent"] == {"result": 1}, seen[-1]
    (record,) = home_site.seen
    assert record["thread"] is threading.current_thread()


def test_a_2026_elicitation_round_trip_sees_the_tests_rows() -> None:
    User.objects.create(username="ada")
    User.objects.create(username="grace")
    client = Client()
    asked = modern_call(client, "users_after_asking")
    result = asked["result"]
    assert result["resultType"] == "input_required", asked
    (key,) = result["inputRequests"]
    answers = {key: {"action": "accept", "content": {"ok": True}}}
    reply = modern_call(client, "users_after_asking", inputResponses=answers, requestState=result["requestState"])
    assert reply["result"]["content"][0]["text"] == "True: 2", reply
    assert [(r["tool"], r["users"], r["thread"]) for r in home_site.seen] == [
        ("ask_ok", 2, threading.current_thread()),
        ("ask_ok", 2, threading.current_thread()),
        ("users_after_asking", 2, threading.current_thread()),
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("tool", ["users_with_context", "users_async"])
def test_under_atomic_requests_a_tools_queries_run_in_the_requests_transaction(tool: str) -> None:
    settings_dict = connection.settings_dict
    was = settings_dict["ATOMIC_REQUESTS"]
    settings_dict["ATOMIC_REQUESTS"] = True
    try:
        with override_settings():
            reply = modern_call(Client(), tool)
    finally:
        settings_dict["ATOMIC_REQUESTS"] = was
    assert reply["result"]["structuredContent"] == {"result": 0}, reply
    (record,) = home_site.seen
    assert record["in_transaction"], "the view's transaction (ATOMIC_REQUESTS)"
    assert not connection.in_atomic_block
