"""Elicitations kept in the store, both eras: rows, single-use request-state handles, the URL
resolver marker, completion from anywhere, expiry, and a call whose worker died.

Two endpoints over one ``MemoryStore`` stand for two workers sharing a database.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import (
    AcceptedElicitation,
    CancelledElicitation,
    Context,
    DeclinedElicitation,
    Elicit,
    ElicitationResult,
    Resolve,
)
from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult, SamplingMessage, TextContent
from pydantic import BaseModel

from example_project.servers.bistro import mcp as bistro_server
from mcp_common import HTTPRequest, HTTPResponse, MCPConfig, MCPEndpoint, MemoryStore
from mcp_common.elicitation import (
    ElicitUrl,
    UrlConsent,
    caller_elicitation_id,
    complete_in_store,
    elicitation_completed,
    owner_alive,
    worker_id,
)
from mcp_common.legacy import OWNER_METHOD, Waiters
from mcp_common.schemas import ElicitationSchemaError, assert_server_schemas, check_server_schemas
from mcp_common.state import parse_handle
from mcp_common.store import GET_STREAM, REFUSED_DETAIL
from tests.core.test_endpoint import SECRET, events, follow, initialize, legacy, modern_call, request


class Name(BaseModel):
    name: str


class Address(BaseModel):
    street: str


class Person(BaseModel):
    name: str
    address: Address


async def ask_name() -> Name | Elicit[Name]:
    return Elicit("Who are you?", Name)


async def ask_person() -> Person | Elicit[Person]:
    return Elicit("Who?", Person)


async def deposit(booking_id: str) -> ElicitUrl:
    return ElicitUrl(
        "Pay the deposit.", url=f"https://pay.example.com/{booking_id}", elicitation_id=f"dep-{booking_id}"
    )


def build_server() -> MCPServer:
    server = MCPServer("Elicitations")

    @server.tool()
    async def hello(who: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"Hello, {who.name}!"

    @server.tool()
    async def greet(who: Annotated[Name, Resolve(ask_name)], ctx: Context) -> str:
        # A Context parameter: served by the SDK's own serve_one (hello takes the fast path).
        return f"Greetings, {who.name}!"

    @server.tool()
    async def hold(booking_id: str, consent: Annotated[ElicitationResult[UrlConsent], Resolve(deposit)]) -> str:
        match consent:
            case AcceptedElicitation(data=data):
                return f"accepted {data.elicitation_id} at {data.url}"
            case DeclinedElicitation():
                return "declined"
            case CancelledElicitation():
                return "cancelled"

    @server.tool()
    async def interview(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", schema=Name)
        return f"Interviewed {answer.data.name}" if answer.action == "accept" else f"No interview ({answer.action})"

    @server.tool()
    async def interview_or_guess(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Your name?", schema=Name)
        except ValueError:
            return "Interviewed a guest"  # went on without the answer
        return f"Interviewed {answer.data.name}" if answer.action == "accept" else f"No interview ({answer.action})"

    @server.tool()
    async def pay(booking_id: str, ctx: Context) -> str:
        result = await ctx.elicit_url(
            "Pay.", url=f"https://pay.example.com/{booking_id}", elicitation_id=f"dep-{booking_id}"
        )
        return "paying" if result.action == "accept" else f"no payment ({result.action})"

    @server.tool()
    async def nap(seconds: float, ctx: Context) -> str:
        await ctx.report_progress(0, 1, "napping")
        await asyncio.sleep(seconds)
        return "rested"

    @server.tool()
    async def ask_llm(ctx: Context) -> str:
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text="Hi?"))],
            max_tokens=10,
            related_request_id=ctx.request_id,
        )
        return f"LLM said {result.content.text}"

    @server.tool()
    async def pick(items: list[str], ctx: Context) -> str | InputRequiredResult:
        # One question per item, keyed by the item's own text (a hand-built result).
        answers = ctx.input_responses or {}
        if all(item in answers for item in items):
            return "picked " + ", ".join(str(answers[item].action) for item in items)
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        form = ElicitRequestFormParams
        asks = {item: ElicitRequest(params=form(message=item, requested_schema=schema)) for item in items}
        return InputRequiredResult(input_requests=asks, request_state="picking")

    @server.tool()
    async def confirm(booking_id: str, ctx: Context) -> str:
        await ctx.session.send_elicit_complete(f"dep-{booking_id}")
        return f"confirmed {booking_id}"

    return server


def endpoint(store: MemoryStore, **config: Any) -> MCPEndpoint:
    settings = {"secret_keys": (SECRET,), "poll_interval": 0.02, **config}
    return MCPEndpoint(build_server(), MCPConfig(**settings), store)


FORM_AND_URL = {"elicitation": {"form": {}, "url": {}}}


def call(
    point: MCPEndpoint,
    name: str,
    arguments: dict[str, Any],
    principal: str | None = None,
    capabilities: dict[str, Any] | None = None,
    asgi: bool = False,
    **extra: Any,
):
    """One 2026-07-28 exchange, served as a WSGI view serves it (or, ``asgi``, an ASGI one)."""
    req = modern_call(name, arguments, **extra)
    if capabilities is not None:
        body = json.loads(req.body)
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities
        req.body = json.dumps(body).encode()
    req.principal = principal
    response = asyncio.run(point.handle_from_other_loop(req)) if asgi else point.handle(req)
    return response.status, json.loads(response.body)


def ask(point: MCPEndpoint, name: str = "hello", arguments: dict[str, Any] | None = None, principal: str | None = None):
    status, body = call(point, name, arguments or {}, principal, FORM_AND_URL if name.startswith("hold") else None)
    assert status == 200, body
    result = body["result"]
    assert result["resultType"] == "input_required"
    ((key, question),) = result["inputRequests"].items()
    return key, question, result["requestState"]


def refused(status: int, body: dict[str, Any]) -> bool:
    return (
        status == 400
        and body["error"]["code"] == -32602
        and body["error"]["message"] == "Invalid or expired requestState"
        and body["error"]["data"] == {"reason": "invalid_request_state"}
    )


# -- 2026-07-28: persisted, single-use request state ------------------------------------------


def test_modern_round_trip_is_recorded_and_state_is_a_handle() -> None:
    store = MemoryStore()
    first, second = endpoint(store), endpoint(store)
    key, question, handle = ask(first, principal="user:1")
    assert handle.startswith("mcp1.") and len(handle) < 80
    (row,) = store._elicitations.values()
    assert (row.status, row.mode, row.tool, row.principal, row.request_key) == (
        "pending",
        "form",
        "hello",
        "user:1",
        key,
    )
    assert json.loads(row.requested_schema)["properties"]["name"]["type"] == "string"
    assert row.message == question["params"]["message"] == "Who are you?"
    status, body = call(
        second,
        "hello",
        {},
        "user:1",
        inputResponses={key: {"action": "accept", "content": {"name": "Ada"}}},
        requestState=handle,
    )
    assert status == 200 and body["result"]["content"][0]["text"] == "Hello, Ada!"
    row = store.get_elicitation(row.id)
    assert row.status == "accepted" and json.loads(row.answer) == {"name": "Ada"}
    state = store._states[row.state_id]
    assert state.consumed is not None and state.sealed.startswith("v1.")


REFUSED_ANSWERS = [
    pytest.param({"action": "accept", "content": {"nam": "Ada"}}, id="missing-field"),
    pytest.param({"action": "accept", "content": {"name": 5}}, id="wrong-type"),
    pytest.param({"action": "accept"}, id="no-content"),
]


def check_a_refused_answer_is_recorded_as_refused(
    store: Any, tool: str, answer: dict[str, Any], asgi: bool = False, done: Any = None
) -> None:
    """An answer the SDK's resolver refuses (it does not fit the requested schema) never
    reaches the tool: the row says so, rather than ``accepted`` with content nobody used.
    ``done(endpoint)``: run before the endpoint is closed (a store's own clean-up)."""
    point = endpoint(store)
    try:
        key, _, handle = ask(point, tool)
        status, body = call(point, tool, {}, asgi=asgi, inputResponses={key: answer}, requestState=handle)
        assert status == 200 and body["result"]["isError"] is True, body
        assert "received an accepted elicitation" in body["result"]["content"][0]["text"]
        (row,) = [r for r in store.elicitations_for_state(parse_handle(point, handle)) if r.request_key == key]
        assert (row.status, row.detail) == ("cancelled", REFUSED_DETAIL)
        # What the client sent stays on the row, for staff to see what was refused.
        assert json.loads(row.answer or "null") == answer.get("content")
        # A valid answer on the same store is still recorded as accepted, without a detail.
        key, _, handle = ask(point, tool)
        good = {key: {"action": "accept", "content": {"name": "Ada"}}}
        status, body = call(point, tool, {}, asgi=asgi, inputResponses=good, requestState=handle)
        assert body["result"]["isError"] is False, body
        (row,) = [r for r in store.elicitations_for_state(parse_handle(point, handle)) if r.request_key == key]
        assert (row.status, row.detail, json.loads(row.answer)) == ("accepted", None, {"name": "Ada"})
    finally:
        if done is not None:
            done(point)
        point.close()


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
@pytest.mark.parametrize("tool", ["hello", "greet"])
@pytest.mark.parametrize("answer", REFUSED_ANSWERS)
def test_a_refused_answer_is_recorded_as_refused(tool: str, answer: dict[str, Any], asgi: bool) -> None:
    check_a_refused_answer_is_recorded_as_refused(MemoryStore(), tool, answer, asgi)


LONG_KEY = "item " + "x" * 295


def check_a_question_with_a_long_key_round_trips(store: Any, done: Any = None) -> None:
    """An ``inputRequests`` key is the tool's to choose (a hand-built result may key its
    questions by the client's own text; the SDK keys a resolver's by its module and qualified
    name): one longer than the row's column still asks, and its answer still reaches the
    tool and its row."""
    point = endpoint(store)
    try:
        items = [LONG_KEY, "short"]
        status, body = call(point, "pick", {"items": items}, capabilities=FORM_AND_URL)
        assert status == 200, body
        result = body["result"]
        assert sorted(result["inputRequests"]) == sorted(items)
        handle = result["requestState"]
        state_id = parse_handle(point, handle)
        assert {r.message: r.status for r in store.elicitations_for_state(state_id)} == dict.fromkeys(items, "pending")
        answers = {LONG_KEY: {"action": "accept", "content": {"ok": True}}, "short": {"action": "decline"}}
        status, body = call(point, "pick", {"items": items}, inputResponses=answers, requestState=handle)
        assert status == 200 and body["result"]["content"][0]["text"] == "picked accept, decline", body
        rows = {r.message: r for r in store.elicitations_for_state(state_id)}
        assert (rows[LONG_KEY].status, json.loads(rows[LONG_KEY].answer)) == ("accepted", {"ok": True})
        assert (rows["short"].status, rows["short"].detail) == ("declined", None)
    finally:
        if done is not None:
            done(point)
        point.close()


def test_a_question_with_a_long_key_round_trips() -> None:
    check_a_question_with_a_long_key_round_trips(MemoryStore())


def test_keys_and_principals_that_differ_only_where_a_row_cannot_hold_them_stay_apart() -> None:
    """A row keeps a NUL as U+FFFD: two questions keyed ``"a\\x00"`` and ``"a\\ufffd"`` each
    keep their own answer, and a principal with a NUL is not the one with U+FFFD in its place."""
    store = MemoryStore()
    point = endpoint(store)
    items = ["a\x00", "a\ufffd"]
    status, body = call(point, "pick", {"items": items}, capabilities=FORM_AND_URL)
    handle = body["result"]["requestState"]
    answers = {"a\x00": {"action": "accept", "content": {"ok": True}}, "a\ufffd": {"action": "decline"}}
    status, body = call(point, "pick", {"items": items}, inputResponses=answers, requestState=handle)
    assert status == 200 and body["result"]["content"][0]["text"] == "picked accept, decline", body
    rows = store.elicitations_for_state(parse_handle(point, handle))
    assert sorted(row.status for row in rows) == ["accepted", "declined"]
    key, _, handle = ask(point, principal="user:a\x00")
    answer = {key: {"action": "accept", "content": {"name": "Mallory"}}}
    assert refused(*call(point, "hello", {}, "user:a\ufffd", inputResponses=answer, requestState=handle))
    point.close()


def check_a_long_answer_is_recorded(store: Any, done: Any = None) -> None:
    """A user's answer is as long as the request body allows (a pasted document in a text
    field): the tool receives it and its row keeps it whole."""
    point = endpoint(store)
    try:
        key, _, handle = ask(point)
        name = "Ada " * 50_000  # 200 kB, over MySQL's TEXT
        answer = {key: {"action": "accept", "content": {"name": name}}}
        status, body = call(point, "hello", {}, inputResponses=answer, requestState=handle)
        assert status == 200 and body["result"]["content"][0]["text"] == f"Hello, {name}!", str(body)[:300]
        (row,) = store.elicitations_for_state(parse_handle(point, handle))
        assert (row.status, json.loads(row.answer)) == ("accepted", {"name": name})
    finally:
        if done is not None:
            done(point)
        point.close()


def check_a_round_of_many_questions_is_recorded(store: Any, done: Any = None) -> None:
    """A tool may ask as many questions in one round as its client gives it items (``pick``
    asks one per item): more than one statement can carry (PostgreSQL takes 65,535
    parameters, some 3,100 questions) are recorded and answered all the same."""
    point = endpoint(store)
    try:
        items = [f"item {n}" for n in range(3200)]
        status, body = call(point, "pick", {"items": items}, capabilities=FORM_AND_URL)
        assert status == 200 and body["result"]["resultType"] == "input_required", str(body)[:300]
        handle = body["result"]["requestState"]
        state_id = parse_handle(point, handle)
        assert len(store.elicitations_for_state(state_id)) == len(items)
        answers = {item: {"action": "decline"} for item in items}
        status, body = call(point, "pick", {"items": items}, inputResponses=answers, requestState=handle)
        assert status == 200 and body["result"]["content"][0]["text"].startswith("picked decline"), str(body)[:300]
        assert {row.status for row in store.elicitations_for_state(state_id)} == {"declined"}
    finally:
        if done is not None:
            done(point)
        point.close()


def test_a_round_of_many_questions_is_recorded() -> None:
    check_a_round_of_many_questions_is_recorded(MemoryStore())


def check_a_long_principal_is_bound_like_a_short_one(store: Any, done: Any = None) -> None:
    """A principal is the application's string (a Flask-Login ``get_id()`` that is an
    alternative token, an OAuth subject, an e-mail address as a user's key): one longer than
    the rows' column still asks, binds its state and answers; another that shares all but its
    end is someone else."""
    alice = "user:" + "a" * 300
    mallory = alice[:-1] + "m"
    point = endpoint(store)
    try:
        key, _, handle = ask(point, principal=alice)
        answer = {key: {"action": "accept", "content": {"name": "Mallory"}}}
        assert refused(*call(point, "hello", {}, mallory, inputResponses=answer, requestState=handle))
        answer = {key: {"action": "accept", "content": {"name": "Alice"}}}
        status, body = call(point, "hello", {}, alice, inputResponses=answer, requestState=handle)
        assert status == 200 and body["result"]["content"][0]["text"] == "Hello, Alice!", body
        (row,) = store.elicitations_for_state(parse_handle(point, handle))
        assert row.status == "accepted"
        # A legacy session is bound to it the same way.
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        opening = request("POST", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        opening.principal = alice
        response = point.handle(opening)
        assert response.status == 200, response.body
        session = response.headers["Mcp-Session-Id"]
        for caller, status in ((mallory, 404), (alice, 200)):
            listing = legacy(session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            listing.principal = caller
            assert point.handle(listing).status == status
    finally:
        if done is not None:
            done(point)
        point.close()


ODD_TOOL_NAMES = ["ask_" + "x" * 246, "ask\x00nul"]
"""Tool names a question's row cannot keep as they are: longer than its column (the SDK only
warns past 128 characters), and with a NUL (PostgreSQL text cannot hold one)."""


def check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras(store: Any, done: Any = None) -> None:
    """A tool's name is the application's to choose: one the question's row cannot keep as it
    is asks, and is answered, on either era, as any other tool does."""
    server = build_server()

    async def by_resolver(who: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"Hello, {who.name}!"

    async def by_context(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", schema=Name)
        return f"Interviewed {answer.data.name}"

    for name in ODD_TOOL_NAMES:
        server.tool(name=name)(by_resolver)
        server.tool(name=name + "_legacy")(by_context)
    config = MCPConfig(secret_keys=(SECRET,), poll_interval=0.02)
    asking, answering = MCPEndpoint(server, config, store), MCPEndpoint(server, config, store)
    try:
        for name in ODD_TOOL_NAMES:
            status, body = call(asking, name, {})
            assert status == 200 and body["result"]["resultType"] == "input_required", body
            ((key, _),) = body["result"]["inputRequests"].items()
            handle = body["result"]["requestState"]
            answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
            status, body = call(asking, name, {}, inputResponses=answer, requestState=handle)
            assert status == 200 and body["result"]["content"][0]["text"] == "Hello, Ada!", body
            (row,) = store.elicitations_for_state(parse_handle(asking, handle))
            assert row.status == "accepted" and row.tool.startswith(name[:20].replace("\x00", "\ufffd"))

            session = initialize(asking, {"elicitation": {}})
            response = legacy_call(asking, session, name + "_legacy", {})
            seen = run_answering(asking, answering, session, response, {"action": "accept", "content": {"name": "Bo"}})
            assert seen[-1]["result"]["content"][0]["text"] == "Interviewed Bo", seen[-1]
            (row,) = store.call_elicitations(session, "5")
            assert row.status == "accepted"
    finally:
        for point in (asking, answering):
            if done is not None:
                done(point)
            point.close()


def test_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras() -> None:
    check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras(MemoryStore())


def test_a_call_that_asks_nothing_writes_nothing() -> None:
    store = MemoryStore()
    point = endpoint(store)
    # ``confirm`` with no elicitation rows: no state, no row (its completion finds nothing).
    status, body = call(point, "confirm", {"booking_id": "1"})
    assert status == 200 and body["result"]["content"][0]["text"] == "confirmed 1"
    assert store._states == {} and store._elicitations == {}


def test_replayed_handle_is_refused_and_nothing_runs_twice() -> None:
    store = MemoryStore()
    point = endpoint(store)
    key, _, handle = ask(point)
    answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
    assert call(point, "hello", {}, inputResponses=answer, requestState=handle)[0] == 200
    assert refused(*call(point, "hello", {}, inputResponses=answer, requestState=handle))


def test_concurrent_redemptions_let_exactly_one_through() -> None:
    store = MemoryStore()
    workers = [endpoint(store) for _ in range(4)]
    key, _, handle = ask(workers[0])
    answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
    outcomes: list[int] = []

    def redeem(point: MCPEndpoint) -> None:
        outcomes.append(call(point, "hello", {}, inputResponses=answer, requestState=handle)[0])

    threads = [threading.Thread(target=redeem, args=(w,)) for w in workers for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == [200] + [400] * 7


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h: h[:-2] + ("AA" if not h.endswith("AA") else "BB"),  # the MAC
        lambda h: h.replace("mcp1.", "mcp1.0", 1)[:-1],  # the row id
        lambda h: "v1.forged",  # an SDK-style token
        lambda h: "",
        lambda h: h[:-1] + "\u00e9",  # a MAC hmac.compare_digest cannot compare as text
        lambda h: "mcp1." + "\u00e9" * 32 + h[37:],  # a row id of letters, not ASCII ones
    ],
    ids=["mac", "row-id", "sdk-token", "empty", "non-ascii-mac", "non-ascii-row-id"],
)
def test_tampered_handle_is_refused_and_the_real_one_still_works(tamper: Any) -> None:
    store = MemoryStore()
    point = endpoint(store)
    key, _, handle = ask(point)
    answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
    assert refused(*call(point, "hello", {}, inputResponses=answer, requestState=tamper(handle)))
    status, body = call(point, "hello", {}, inputResponses=answer, requestState=handle)
    assert status == 200 and body["result"]["content"][0]["text"] == "Hello, Ada!"


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
@pytest.mark.parametrize("handle", [5, {"a": 1}, "", "garbage", "mcp1.0000.AAAA"])
@pytest.mark.parametrize("responses", [{"k": "yes"}, [1], {"k": {"action": "maybe"}}])
def test_a_forged_state_is_refused_before_malformed_answers(handle: Any, responses: Any, asgi: bool) -> None:
    """The SDK's boundary unseals ``requestState`` before its request surface reads the
    answers: a state that is no string or no handle of this server is refused as such (its
    own server answers these exactly so), however malformed the answers next to it."""
    point = endpoint(MemoryStore())
    assert refused(*call(point, "hello", {}, asgi=asgi, inputResponses=responses, requestState=handle))


def test_foreign_principal_is_refused_without_burning_the_state() -> None:
    store = MemoryStore()
    point = endpoint(store)
    key, _, handle = ask(point, principal="user:alice")
    answer = {key: {"action": "accept", "content": {"name": "Mallory"}}}
    assert refused(*call(point, "hello", {}, "user:mallory", inputResponses=answer, requestState=handle))
    assert refused(*call(point, "hello", {}, None, inputResponses=answer, requestState=handle))
    (row,) = store._elicitations.values()
    assert row.status == "pending"
    answer = {key: {"action": "accept", "content": {"name": "Alice"}}}
    status, body = call(point, "hello", {}, "user:alice", inputResponses=answer, requestState=handle)
    assert status == 200 and body["result"]["content"][0]["text"] == "Hello, Alice!"


@pytest.mark.parametrize("tool", ["hello", "greet"])
def test_a_handle_made_before_the_secret_key_was_rotated_is_redeemed_until_the_old_key_goes(tool: str) -> None:
    """``SECRET_KEY`` rotated, the old one kept in ``SECRET_KEY_FALLBACKS``: a question asked
    before the deploy is still answered after it (both the handle's MAC and the sealed state
    inside were made under the old key); once the old key is dropped, the handle is refused."""
    store = MemoryStore()
    before = endpoint(store)
    rotated = endpoint(store, secret_keys=("a-new-secret-" * 4, SECRET))
    dropped = endpoint(store, secret_keys=("a-new-secret-" * 4,))
    for redeemer, works in ((rotated, True), (dropped, False)):
        key, _, handle = ask(before, tool)
        answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
        status, body = call(redeemer, tool, {}, inputResponses=answer, requestState=handle)
        if works:
            assert status == 200 and body["result"]["content"][0]["text"].endswith("Ada!"), body
        else:
            assert refused(status, body)


def test_state_is_bound_to_tool_and_arguments() -> None:
    store = MemoryStore()
    point = endpoint(store)
    key, _, handle = ask(point, "hold", {"booking_id": "7"})
    answer = {key: {"action": "accept"}}
    assert refused(*call(point, "hold", {"booking_id": "8"}, inputResponses=answer, requestState=handle))
    assert refused(*call(point, "hello", {}, inputResponses=answer, requestState=handle))
    status, body = call(point, "hold", {"booking_id": "7"}, inputResponses=answer, requestState=handle)
    assert status == 200, body


def test_expired_state_is_refused_and_its_elicitation_expires_on_time() -> None:
    store = MemoryStore()
    point = endpoint(store, request_state_ttl=0.3, heartbeat_interval=0.05)
    key, _, handle = ask(point)
    (row,) = store._elicitations.values()
    assert row.status == "pending"
    # Nobody answered: the worker's heartbeat marks it expired, with no request involved.
    assert wait_for(lambda: store.get_elicitation(row.id).status == "expired")
    answer = {key: {"action": "accept", "content": {"name": "Late"}}}
    assert refused(*call(point, "hello", {}, inputResponses=answer, requestState=handle))
    assert store.get_elicitation(row.id).status == "expired"


@pytest.mark.parametrize(("action", "text"), [("accept", None), ("decline", "declined"), ("cancel", "cancelled")])
def test_url_resolver_on_the_2026_wire(action: str, text: str | None) -> None:
    store = MemoryStore()
    first, second = endpoint(store), endpoint(store)
    key, question, handle = ask(first, "hold", {"booking_id": "42"})
    assert question["method"] == "elicitation/create"
    # The 2026-07-28 URL request has no elicitationId (nothing completes it on that wire); the
    # row keeps it, for completion from elsewhere.
    assert question["params"] == {"mode": "url", "message": "Pay the deposit.", "url": "https://pay.example.com/42"}
    status, body = call(
        second,
        "hold",
        {"booking_id": "42"},
        capabilities=FORM_AND_URL,
        inputResponses={key: {"action": action}},
        requestState=handle,
    )
    assert status == 200, body
    expected = text or "accepted dep-42 at https://pay.example.com/42"
    assert body["result"]["content"][0]["text"] == expected
    (row,) = store.find_elicitations("dep-42")
    assert (row.mode, row.url) == ("url", "https://pay.example.com/42")
    assert row.status == {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}[action]


def test_completion_reaches_a_2026_row_once() -> None:
    store = MemoryStore()
    point = endpoint(store)
    key, _, handle = ask(point, "hold", {"booking_id": "5"})
    call(point, "hold", {"booking_id": "5"}, inputResponses={key: {"action": "accept"}}, requestState=handle)
    # ``confirm`` runs ``ctx.session.send_elicit_complete`` on the 2026 wire.
    status, body = call(point, "confirm", {"booking_id": "5"})
    assert status == 200 and body["result"]["content"][0]["text"] == "confirmed 5"
    (row,) = store.find_elicitations("dep-5")
    assert row.status == "completed"
    assert complete_in_store(store, "dep-5") == ([], True)


def bistro(store: MemoryStore) -> MCPEndpoint:
    """The example bistro, whose ``hold_table`` resolver observes completed deposits."""
    return MCPEndpoint(bistro_server, MCPConfig(secret_keys=(SECRET,), poll_interval=0.02), store)


PAID = "Deposit received: table held for booking 7."
PAY_AT = "https://pay.example.com/deposit/7?ref="


def paid_ref(url: str) -> str:
    """The elicitation id the example's payment link carries to the provider (its webhook
    reports it back)."""
    assert url.startswith(PAY_AT + "hold-7."), url
    return url.partition("?ref=")[2]


def test_a_2026_call_observes_its_callers_completed_url_question_and_is_not_sent_again() -> None:
    store = MemoryStore()
    point = bistro(store)
    key, question, handle = ask(point, "hold_table", {"booking_id": "7"}, principal="alice")
    alices = paid_ref(question["params"]["url"])
    # Bob asks to hold the same booking too, before Alice pays: his question has an id of his own.
    bobs = paid_ref(ask(point, "hold_table", {"booking_id": "7"}, principal="bob")[1]["params"]["url"])
    assert bobs != alices
    args = {"booking_id": "7"}
    answer = {key: {"action": "accept"}}
    status, body = call(point, "hold_table", args, "alice", FORM_AND_URL, inputResponses=answer, requestState=handle)
    assert body["result"]["content"][0]["text"] == f"Holding booking 7; complete the payment at {PAY_AT}{alices}."
    # Nothing reported the payment yet: a new call asks again, under the same id.
    assert ask(point, "hold_table", args, principal="alice")[1]["params"]["url"] == PAY_AT + alices
    moved, _ = complete_in_store(store, alices)  # the payment provider's webhook
    assert len(moved) == 2 and {row.principal for row in moved} == {"alice"}
    status, body = call(point, "hold_table", args, "alice", FORM_AND_URL)
    assert status == 200 and body["result"]["content"][0]["text"] == PAID
    # Bob's question is his: Alice's payment does not answer it, asked before it or after.
    assert ask(point, "hold_table", args, principal="bob")[1]["params"]["url"] == PAY_AT + bobs


def test_a_2026_retry_after_the_payment_was_reported_finds_it_completed() -> None:
    """The webhook can beat the client's retry (the user paid before their client sent its
    accept): the retry's answer must not reopen the completed question, and the tool hears
    the payment, not "complete the payment"."""
    store = MemoryStore()
    point = bistro(store)
    args = {"booking_id": "7"}
    key, question, handle = ask(point, "hold_table", args, principal="alice")
    ref = paid_ref(question["params"]["url"])
    assert len(complete_in_store(store, ref)[0]) == 1  # the payment provider's webhook
    answer = {key: {"action": "accept"}}
    status, body = call(point, "hold_table", args, "alice", FORM_AND_URL, inputResponses=answer, requestState=handle)
    assert status == 200 and body["result"]["content"][0]["text"] == PAID
    assert [row.status for row in store.find_elicitations(ref)] == ["completed"]


def test_one_of_a_callers_ids_tells_nothing_of_their_others() -> None:
    """The digest stands for the caller and the question: one payment link (a screenshot, a
    shared log, the provider's own records) neither gives the caller's id for another booking
    nor links their payments to one another."""
    point = bistro(MemoryStore())
    refs = [
        ask(point, "hold_table", {"booking_id": booking}, principal="alice")[1]["params"]["url"].partition("?ref=")[2]
        for booking in ("7", "8")
    ]
    assert [ref.partition(".")[0] for ref in refs] == ["hold-7", "hold-8"]
    assert refs[0].partition(".")[2] != refs[1].partition(".")[2]


def test_a_payment_made_before_the_secret_key_was_rotated_still_counts() -> None:
    """Rotating ``SECRET_KEY`` (the old one kept in ``SECRET_KEY_FALLBACKS``, as Django and
    Flask advise) changes the id ``caller_elicitation_id`` makes. A deposit paid through a link
    made under the old key must still be seen: else the user is sent to pay a second time."""
    store = MemoryStore()
    before = bistro(store)
    args = {"booking_id": "7"}
    alices = paid_ref(ask(before, "hold_table", args, principal="alice")[1]["params"]["url"])
    bobs = paid_ref(ask(before, "hold_table", args, principal="bob")[1]["params"]["url"])
    after = MCPEndpoint(bistro_server, MCPConfig(secret_keys=("a-new-secret-" * 4, SECRET), poll_interval=0.02), store)
    # Under the new key the same question has a new id; until something is paid, it is asked.
    fresh = paid_ref(ask(after, "hold_table", args, principal="alice")[1]["params"]["url"])
    assert fresh != alices
    complete_in_store(store, alices)  # the provider reports the payment made through the old link
    status, body = call(after, "hold_table", args, "alice", FORM_AND_URL)
    assert status == 200 and body["result"]["content"][0]["text"] == PAID
    # Still the caller's own: Alice's old payment answers no one else, and Bob's old id, unpaid,
    # answers nothing.
    assert ask(after, "hold_table", args, principal="bob")[1]["params"]["url"] != PAY_AT + alices
    assert "bob" not in {row.principal for row in store.find_elicitations(bobs) if row.status == "completed"}
    # Once the old key is dropped from the fallbacks, the old id is no longer the caller's.
    dropped = MCPEndpoint(bistro_server, MCPConfig(secret_keys=("a-new-secret-" * 4,), poll_interval=0.02), store)
    assert ask(dropped, "hold_table", args, principal="alice")[1]["params"]["url"] == PAY_AT + fresh


@pytest.mark.parametrize("value", [None, 17, b"hold-1"], ids=["None", "int", "bytes"])
def test_elicitation_ids_that_are_not_text_are_refused_naming_the_argument(value: Any) -> None:
    """``caller_elicitation_id(payload.get("booking"))`` must not make ``"None.<digest>"``, an id
    every caller missing the field would share; nor may completion fail deep in the store."""
    with pytest.raises(TypeError, match=rf"^base must be a str, not {type(value).__name__}"):
        caller_elicitation_id(value)
    with pytest.raises(TypeError, match=rf"^elicitation_id must be a str, not {type(value).__name__}"):
        complete_in_store(MemoryStore(), value)


def test_elicitation_completed_needs_a_request_being_served() -> None:
    with pytest.raises(RuntimeError, match="while an MCP request is served"):
        asyncio.run(elicitation_completed("dep-1"))


# -- legacy era ------------------------------------------------------------------------------


def legacy_call(point: MCPEndpoint, session: str, name: str, arguments: dict[str, Any], call_id: int = 5):
    body = {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return point.handle(legacy(session, body))


def run_answering(asking: MCPEndpoint, answering: MCPEndpoint, session: str, response: Any, result: dict[str, Any]):
    """Read a call stream (resuming it like the client), answer its server request through the
    other worker."""

    def answer(message: dict[str, Any]) -> None:
        if message.get("method") == "elicitation/create":
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            assert answering.handle(legacy(session, reply)).status == 202

    return follow(asking, session, response, answer, resumer=answering)


def test_legacy_elicitation_row_follows_the_answer() -> None:
    store = MemoryStore()
    asking, answering = endpoint(store), endpoint(store)
    session = initialize(asking, {"elicitation": {}})
    response = legacy_call(asking, session, "interview", {})
    seen = run_answering(asking, answering, session, response, {"action": "accept", "content": {"name": "Grace"}})
    assert seen[-1]["result"]["content"][0]["text"] == "Interviewed Grace"
    (row,) = store._elicitations.values()
    assert (row.session_id, row.tool, row.mode, row.status) == (session, "interview", "form", "accepted")
    assert json.loads(row.answer) == {"name": "Grace"} and json.loads(row.call_id) == 5


def check_a_refused_legacy_answer_is_recorded_as_refused(
    store: Any, tool: str, answer: dict[str, Any], done: Any = None
) -> None:
    """A legacy answer the SDK refuses (``ctx.elicit`` or a resolver: it does not fit the
    schema) never reaches the tool: the row says so, whether the call fails or goes on.
    ``done(endpoint)``: run before each endpoint is closed (a store's own clean-up)."""
    asking, answering = endpoint(store), endpoint(store)
    try:
        session = initialize(asking, {"elicitation": {}})
        seen = run_answering(asking, answering, session, legacy_call(asking, session, tool, {}), answer)
        final = seen[-1]["result"]
        if tool == "interview_or_guess":
            assert final["content"][0]["text"] == "Interviewed a guest", final
        else:
            assert final["isError"] is True, final
        (row,) = store.call_elicitations(session, "5")
        assert (row.status, row.detail) == ("cancelled", REFUSED_DETAIL)
        assert json.loads(row.answer or "null") == answer.get("content")
        # A valid answer in the same session is recorded as accepted, without a detail.
        good = {"action": "accept", "content": {"name": "Grace"}}
        seen = run_answering(asking, answering, session, legacy_call(asking, session, tool, {}, call_id=6), good)
        assert seen[-1]["result"]["isError"] is False, seen[-1]
        (row,) = store.call_elicitations(session, "6")
        assert (row.status, row.detail, json.loads(row.answer)) == ("accepted", None, {"name": "Grace"})
    finally:
        for point in (asking, answering):
            if done is not None:
                done(point)
            point.close()


@pytest.mark.parametrize("tool", ["interview", "interview_or_guess", "hello"])
@pytest.mark.parametrize("answer", REFUSED_ANSWERS)
def test_a_refused_legacy_answer_is_recorded_as_refused(tool: str, answer: dict[str, Any]) -> None:
    check_a_refused_legacy_answer_is_recorded_as_refused(MemoryStore(), tool, answer)


def test_a_refused_legacy_answer_stays_out_of_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """An answer the SDK refuses fails a tool that asked with ``ctx.elicit``: its traceback is
    logged, but not the answer (a form's content: a name, an address), which pydantic's error
    repeats and error monitoring would keep. The refused field is still named."""
    store = MemoryStore()
    asking, answering = endpoint(store), endpoint(store)
    try:
        session = initialize(asking, {"elicitation": {}})
        answer = {"action": "accept", "content": {"nam": "Ada Lovelace, 12 St James's Square"}}
        with caplog.at_level(logging.ERROR, logger="mcp"):
            seen = run_answering(asking, answering, session, legacy_call(asking, session, "interview", {}), answer)
        assert seen[-1]["result"]["isError"] is True, seen[-1]
        assert "Tool 'interview' raised an unexpected exception" in caplog.text
        assert "does not match the requested schema" in caplog.text and "name: Field required" in caplog.text
        assert "Lovelace" not in caplog.text
    finally:
        for point in (asking, answering):
            point.close()


def test_legacy_unanswered_elicitation_expires() -> None:
    store = MemoryStore()
    point = endpoint(store, request_timeout=0.3)
    session = initialize(point, {"elicitation": {}})
    final = follow(point, session, legacy_call(point, session, "interview", {}))[-1]
    assert final["result"]["content"][0]["text"] == "No interview (cancel)"
    (row,) = store._elicitations.values()
    assert row.status == "expired" and "No answer within 0.3 seconds" in row.detail


@pytest.mark.parametrize(("action", "text"), [("accept", None), ("decline", "declined")])
def test_url_resolver_on_the_legacy_wire(action: str, text: str | None) -> None:
    store = MemoryStore()
    asking, answering = endpoint(store), endpoint(store)
    session = initialize(asking, {"elicitation": {"form": {}, "url": {}}})
    response = legacy_call(asking, session, "hold", {"booking_id": "9"})
    seen = run_answering(asking, answering, session, response, {"action": action})
    assert seen[0]["params"] == {
        "mode": "url",
        "message": "Pay the deposit.",
        "url": "https://pay.example.com/9",
        "elicitationId": "dep-9",
    }
    assert seen[-1]["result"]["content"][0]["text"] == (text or "accepted dep-9 at https://pay.example.com/9")
    (row,) = store.find_elicitations("dep-9")
    assert row.status == ("accepted" if action == "accept" else "declined")


LONG_BOOKING = "b" * 260  # dep-<it>: an elicitation id longer than the 255 characters a row keeps


def test_an_elicitation_id_longer_than_a_row_keeps_is_the_tools_error_on_every_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row keeps a URL question's elicitation id (completion finds it by that) in 255
    characters. A longer one failed only on PostgreSQL and MySQL, as a 500 or as the driver's
    error (SQLite keeps any length): now it is the tool's error everywhere (the SDK's "Error
    executing tool" for the client; the reason in the server's log), on both wires, before
    anything is stored or asked."""
    store = MemoryStore()
    point = endpoint(store)
    status, body = call(point, "hold", {"booking_id": LONG_BOOKING}, capabilities=FORM_AND_URL)
    assert status == 200, body
    assert body["result"]["isError"] is True, body
    assert body["result"]["content"][0]["text"] == "Error executing tool hold", body

    session = initialize(point, {"elicitation": {"form": {}, "url": {}}})
    for tool in ("hold", "pay"):  # a resolver's ElicitUrl, ctx.elicit_url
        seen = follow(point, session, legacy_call(point, session, tool, {"booking_id": LONG_BOOKING}))
        assert [message.get("method") for message in seen] == [None], seen  # nothing asked
        assert seen[-1]["result"]["isError"] is True, seen
        assert seen[-1]["result"]["content"][0]["text"] == f"Error executing tool {tool}", seen
    assert store._elicitations == {} and store._states == {}
    reasons = [
        r
        for r in caplog.records
        if r.exc_info and "longer than 255 characters" in str(r.exc_info[1].__cause__ or r.exc_info[1])
    ]
    assert len(reasons) == 3, [r.getMessage() for r in caplog.records]
    point.close()


def get_stream_messages(point: MCPEndpoint, session: str) -> list[dict[str, Any]]:
    response = point.handle(request("GET", mcp_session_id=session, mcp_protocol_version="2025-11-25"))
    return [e["data"] for e in events(point, response) if e["data"]]


def test_complete_elicitation_from_anywhere_reaches_the_legacy_session_once() -> None:
    store = MemoryStore()
    asking, answering = endpoint(store, stream_hold_seconds=0.3), endpoint(store, stream_hold_seconds=0.3)
    session = initialize(asking, {"elicitation": {"form": {}, "url": {}}})
    seen = run_answering(
        asking, answering, session, legacy_call(asking, session, "pay", {"booking_id": "3"}), {"action": "accept"}
    )
    assert seen[-1]["result"]["content"][0]["text"] == "paying"
    (row,) = store.find_elicitations("dep-3")
    assert row.status == "accepted" and row.mode == "url"
    # A webhook, another process, a shell: the store alone is enough.
    moved, exists = complete_in_store(store, "dep-3")
    assert [r.id for r in moved] == [row.id] and exists
    assert complete_in_store(store, "dep-3") == ([], True)
    complete = {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": "dep-3"}}
    assert get_stream_messages(answering, session) == [complete]
    assert store.get_elicitation(row.id).status == "completed"


def test_send_elicit_complete_in_a_tool_goes_through_the_same_path() -> None:
    store = MemoryStore()
    point = endpoint(store, stream_hold_seconds=0.3)
    session = initialize(point, {"elicitation": {"form": {}, "url": {}}})
    run_answering(point, point, session, legacy_call(point, session, "pay", {"booking_id": "4"}), {"action": "accept"})
    for attempt in (1, 2):
        final = [
            e
            for e in events(point, legacy_call(point, session, "confirm", {"booking_id": "4"}, 10 + attempt))
            if e["data"]
        ]
        assert final[-1]["data"]["result"]["content"][0]["text"] == "confirmed 4"
    complete = {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": "dep-4"}}
    # Twice confirmed, once notified: completion is idempotent.
    assert get_stream_messages(point, session) == [complete]
    (row,) = store.find_elicitations("dep-4")
    assert row.status == "completed"


def test_completing_an_id_never_asked_here_notifies_the_calling_session() -> None:
    store = MemoryStore()
    point = endpoint(store, stream_hold_seconds=0.3)
    session = initialize(point, {"elicitation": {}})
    events(point, legacy_call(point, session, "confirm", {"booking_id": "elsewhere"}))
    complete = {
        "jsonrpc": "2.0",
        "method": "notifications/elicitation/complete",
        "params": {"elicitationId": "dep-elsewhere"},
    }
    assert get_stream_messages(point, session) == [complete]


DEAD_WORKER = "elsewhere:1234:dead"


def orphaned_call(
    store: MemoryStore,
    asking: MCPEndpoint,
    answering: MCPEndpoint,
    owner: str = DEAD_WORKER,
    beat_age: float = 3600,
) -> tuple[str, str, str]:
    """A legacy call (id 77) that asked a question, then lost its worker (``owner``, last
    beating ``beat_age`` seconds ago); the user's answer reached ``answering``. Returns the
    session, the stream's last event id and the row's id."""
    session = initialize(asking, {"elicitation": {}})
    # The asking worker will "die" once it has asked: from then on it never reads the store
    # again (its poll for answers given to other workers never runs).
    asking.legacy.poller.add = lambda session_id, request_id, **_: None  # type: ignore[method-assign]
    # The asking process dies (its tool coroutine is gone): here, it is a worker on another
    # machine that stopped beating long ago.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("mcp_common.legacy.worker_id", lambda: owner)
        store.beat_worker(owner, time.time() - beat_age)
        response = legacy_call(asking, session, "interview", {}, call_id=77)
        stream = asking.iter_body(response)
        question = None
        last_id = None
        for chunk in stream:
            text = chunk.decode()
            for line in text.split("\n"):
                if line.startswith("id: "):
                    last_id = line[4:]
                if line.startswith("data: ") and line[6:]:
                    question = json.loads(line[6:])
            if question:
                break
        stream.close()
    assert question["method"] == "elicitation/create" and last_id is not None
    (row,) = store._elicitations.values()
    assert row.owner == owner
    reply = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"name": "Kept"}}}
    assert answering.handle(legacy(session, reply)).status == 202
    return session, last_id, row.id


def resume(point: MCPEndpoint, session: str, last_id: str) -> list[dict[str, Any]]:
    response = point.handle(
        request("GET", mcp_session_id=session, mcp_protocol_version="2025-11-25", last_event_id=last_id)
    )
    return [e["data"] for e in events(point, response) if e["data"]]


def test_a_call_whose_worker_died_ends_with_a_clear_error_and_keeps_the_answer() -> None:
    store = MemoryStore()
    asking, survivor = endpoint(store), endpoint(store, stream_hold_seconds=5)
    session, last_id, row_id = orphaned_call(store, asking, survivor)
    final = resume(survivor, session, last_id)[-1]
    assert final["id"] == 77 and final.get("error", {}).get("code") == -32603, final
    assert "stopped while it waited for the client" in final["error"]["message"]
    row = store.get_elicitation(row_id)
    assert row.status == "accepted" and json.loads(row.answer) == {"name": "Kept"}
    assert "stopped while it waited" in row.detail


def unused_pid() -> int:
    """A process id that no process of this machine (of this container) has."""
    pid = 4_194_303
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_a_worker_of_another_container_with_the_same_host_name_is_not_taken_for_dead() -> None:
    """Containers of one Kubernetes pod, or of Docker's host network, share the host's name but
    not its process ids: a worker there is alive while its heartbeat is, though no process
    here has its pid. Another worker resuming its call's stream must leave the call waiting
    (it used to end it as "stopped while it waited" at once)."""
    other_container = f"{socket.gethostname()}:{unused_pid()}:a1b2c3d4:0123456789ab"
    store = MemoryStore()
    store.beat_worker(other_container, time.time())
    assert owner_alive(store, other_container, stale_after=30)
    store.beat_worker(other_container, time.time() - 60)
    assert not owner_alive(store, other_container, stale_after=30)  # stopped beating: dead
    # This container's own dead worker is known dead at once, whatever its heartbeat says.
    ours = worker_id().rsplit(":", 3)
    dead_here = ":".join([ours[0], str(unused_pid()), "a1b2c3d4", ours[3]])
    store.beat_worker(dead_here, time.time())
    assert not owner_alive(store, dead_here, stale_after=30)
    # An id written before pid spaces were recorded: judged by its heartbeat.
    older = f"{socket.gethostname()}:{unused_pid()}:a1b2c3d4"
    store.beat_worker(older, time.time())
    assert owner_alive(store, older, stale_after=30)

    asking, survivor = endpoint(store), endpoint(store, stream_hold_seconds=0.5)
    session, last_id, row_id = orphaned_call(store, asking, survivor, owner=other_container, beat_age=0)
    assert not [m for m in resume(survivor, session, last_id) if m.get("id") == 77]
    assert store.get_elicitation(row_id).detail is None
    asking.close()
    survivor.close()


@pytest.mark.parametrize(
    ("tool", "arguments", "capabilities", "sent"),
    [
        ("nap", {"seconds": 60}, {}, "notifications/progress"),
        ("ask_llm", {}, {"sampling": {}}, "sampling/createMessage"),
    ],
)
def test_a_plain_call_whose_worker_died_ends_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tool: str, arguments: dict[str, Any], capabilities: dict[str, Any], sent: str
) -> None:
    """A call that is not waiting on a question (a tool sleeping after its progress, one
    waiting for a sampling answer) loses its worker while the client is attached: the client
    resumes the stream on another worker and gets the same clear error, not an endless poll."""
    store = MemoryStore()
    asking, survivor = endpoint(store), endpoint(store, stream_hold_seconds=5)
    session = initialize(asking, capabilities)
    # The asking process is a worker on another machine that stopped beating long ago.
    monkeypatch.setattr("mcp_common.legacy.worker_id", lambda: DEAD_WORKER)
    store.beat_worker(DEAD_WORKER, time.time() - 3600)
    body = {
        "jsonrpc": "2.0",
        "id": 78,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": {"progressToken": "p"}},
    }
    stream = asking.iter_body(asking.handle(legacy(session, body)))
    last_id = None
    for chunk in stream:
        fields = dict(line.split(": ", 1) for line in chunk.decode().strip().split("\n") if ": " in line)
        last_id = fields.get("id", last_id)
        if fields.get("data") and json.loads(fields["data"]).get("method") == sent:
            break
    stream.close()  # the worker dies: the client's connection breaks
    monkeypatch.undo()
    assert last_id is not None
    final = resume(survivor, session, last_id)[-1]
    assert final["id"] == 78 and final.get("error", {}).get("code") == -32603, final
    assert "stopped" in final["error"]["message"]
    # Ended once: a client resuming after the error hears nothing more.
    stream_key = last_id.rpartition(".")[0]
    (ended,) = [e for e in store.events_after(session, stream_key, 0) if e.final]
    assert resume(endpoint(store, stream_hold_seconds=0.3), session, f"{stream_key}.{ended.event_id}") == []
    asking.close()


def test_a_call_that_outlives_the_detach_time_is_resumable_after_its_worker_died(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call that sends nothing at all (past its priming event) and whose worker dies after
    ``wait_detach_seconds``: its resumed stream ends with the error too."""
    store = MemoryStore()
    asking, survivor = endpoint(store, wait_detach_seconds=0.05), endpoint(store, stream_hold_seconds=5)
    session = initialize(asking, {})
    monkeypatch.setattr("mcp_common.legacy.worker_id", lambda: DEAD_WORKER)
    store.beat_worker(DEAD_WORKER, time.time() - 3600)
    stream = asking.iter_body(legacy_call(asking, session, "nap", {"seconds": 60}, call_id=79))
    priming = next(stream).decode()
    last_id = priming.split("id: ", 1)[1].split("\n", 1)[0]
    stream.close()
    assert wait_for(lambda: any(r.session_id == session for r in store._pending.values()))
    monkeypatch.undo()
    final = resume(survivor, session, last_id)[-1]
    assert final["id"] == 79 and "stopped" in final["error"]["message"], final
    asking.close()


def priming_id(point: MCPEndpoint, response: Any) -> tuple[Any, str]:
    """The body iterator of a call stream, and its priming event's id (the stream is left open)."""
    stream = point.iter_body(response)
    priming = next(stream).decode()
    return stream, priming.split("id: ", 1)[1].split("\n", 1)[0]


@pytest.mark.parametrize("call_id", [80, -3, "call-80_b"])
def test_a_call_whose_worker_died_before_anything_was_noted_ends_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, call_id: Any
) -> None:
    """The worker dies within ``wait_detach_seconds`` of the call's start, having sent only the
    priming event: no row says which worker ran it. A resuming worker still ends the stream
    with the error (addressed to the call's id) once the call is older than any live worker
    would have let pass without noting itself, instead of polling it for ever."""
    store = MemoryStore()
    # The dying worker never gets as far as noting its call (it dies before its detach time).
    monkeypatch.setattr("mcp_common.legacy.CallStream.note_owner_later", lambda stream: None)
    asking = endpoint(store, wait_detach_seconds=0.05)
    survivor = endpoint(store, stream_hold_seconds=5, heartbeat_interval=0.1)
    session = initialize(asking, {})
    stream, last_id = priming_id(asking, legacy_call(asking, session, "nap", {"seconds": 60}, call_id=call_id))
    stream.close()
    assert not any(r.session_id == session for r in store._pending.values())
    # The client resumes, as often as the survivor's ``retry:`` hints say, until the call ends.
    deadline = time.monotonic() + 4
    messages: list[dict[str, Any]] = []
    while not messages and time.monotonic() < deadline:
        messages = resume(survivor, session, last_id)
    (final,) = messages
    assert final["id"] == call_id and final["error"]["code"] == -32603, final
    assert "stopped before it finished" in final["error"]["message"]
    # Nothing was written for it; a client resuming again hears the same end.
    stream_key = last_id.rpartition(".")[0]
    assert store.events_after(session, stream_key, 0) == []
    assert resume(survivor, session, last_id)[-1] == final
    asking.close()


def test_a_young_call_without_a_noted_worker_is_not_ended() -> None:
    """Within the time a live worker takes to note its call, a resumed silent stream is a call
    still running: it is held and ended with a ``retry:`` hint, not with an error."""
    store = MemoryStore()
    asking = endpoint(store, wait_detach_seconds=60)
    survivor = endpoint(store, stream_hold_seconds=0.5, wait_detach_seconds=60)
    session = initialize(asking, {})
    stream, last_id = priming_id(asking, legacy_call(asking, session, "nap", {"seconds": 60}, call_id=81))
    stream.close()
    assert resume(survivor, session, last_id) == []
    asking.close()


def resumed_late(store: MemoryStore, call_id: int, running: dict[str, Any], resuming: dict[str, Any]):
    """What a client resuming a live, silent call (from its priming event) hears, once the call
    is past the resuming worker's orphan threshold (its heartbeat is 0.1 s unless set)."""
    asking = endpoint(store, **running)
    session = initialize(asking, {})
    stream, last_id = priming_id(asking, legacy_call(asking, session, "nap", {"seconds": 60}, call_id=call_id))
    stream.close()
    time.sleep(0.6)
    try:
        return resume(endpoint(store, **{"heartbeat_interval": 0.1, **resuming}), session, last_id)
    finally:
        asking.close()


def test_a_live_call_is_not_ended_by_a_worker_whose_detach_time_is_shorter() -> None:
    """Workers configured apart (a rolling deploy that changes ``WAIT_DETACH_SECONDS``, a WSGI
    and an ASGI server on one database): the worker running the call notes itself after its
    own detach time, not the resuming worker's. Its live call is held, not ended."""
    resuming = {"stream_hold_seconds": 0.3, "wait_detach_seconds": 0.05}
    assert resumed_late(MemoryStore(), 83, {"wait_detach_seconds": 60}, resuming) == []


def test_a_client_resuming_after_a_calls_answer_hears_no_second_end() -> None:
    """A quick call answered (its final response logged, no owner row left): a client that
    resumes after that answer, however late, hears nothing more, not an error for the same id."""
    store = MemoryStore()
    running = endpoint(store, wait_detach_seconds=0.05, heartbeat_interval=0.1)
    resuming = endpoint(store, stream_hold_seconds=0.3, heartbeat_interval=0.1)
    session = initialize(running, {})
    frames = events(running, legacy_call(running, session, "nap", {"seconds": 0}, call_id=85))
    assert frames[-1]["data"]["id"] == 85 and frames[-1]["data"]["result"], frames
    time.sleep(0.7)  # past the detach time (of either worker) and three heartbeats
    assert resume(resuming, session, frames[-1]["id"]) == []
    running.close()


class AnswersWhileRead(MemoryStore):
    """A ``MemoryStore`` where a long call answers between a resumer's read of its stream's
    events and its read of the call's owner row (as another worker's call may)."""

    def get_pending(self, session_id: str, request_id: str):
        if request_id.startswith("owner-") and (found := super().get_pending(session_id, request_id)):
            call_id = json.loads(found.params)["callId"]
            self.append_event(
                session_id, request_id[6:], json.dumps({"jsonrpc": "2.0", "id": call_id, "result": {}}), True
            )
            self.delete_pending(session_id, request_id)
        return super().get_pending(session_id, request_id)


def test_a_long_call_that_answers_while_its_resumer_reads_ends_with_its_answer() -> None:
    """The call, older than the orphan threshold, logs its answer and drops its owner row just
    after the resumer found no new event: the resumer sends that answer, not an error."""
    heard = resumed_late(AnswersWhileRead(), 86, {"wait_detach_seconds": 0.05}, {"stream_hold_seconds": 1})
    assert heard == [{"jsonrpc": "2.0", "id": 86, "result": {}}]


class OwnerRowFailsOnce(MemoryStore):
    """A ``MemoryStore`` whose first write of a call's owner row fails (a database blip)."""

    failed = False

    def create_pending(self, session_id: str, request_id: str, method: str, params: str, elicitation: Any = None):
        if request_id.startswith("owner-") and not self.failed:
            self.failed = True
            raise RuntimeError("the database went away for a moment")
        return super().create_pending(session_id, request_id, method, params, elicitation)


def test_a_silent_call_whose_owner_row_failed_once_is_noted_again_and_not_ended() -> None:
    """The row a silent call writes after ``wait_detach_seconds`` fails once: it is written
    again, so a client resuming the live call later is held, not told it stopped."""
    store = OwnerRowFailsOnce()
    running = {"wait_detach_seconds": 0.05, "heartbeat_interval": 0.1}
    assert resumed_late(store, 84, running, {"stream_hold_seconds": 0.3}) == []
    assert store.failed


def test_a_call_whose_id_the_stream_key_cannot_carry_notes_its_worker_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long or unusual request id does not fit the stream's key: the call notes its worker
    when it starts, not after ``wait_detach_seconds``, so its death is still found."""
    store = MemoryStore()
    asking = endpoint(store, wait_detach_seconds=60)
    survivor = endpoint(store, stream_hold_seconds=5)
    session = initialize(asking, {})
    monkeypatch.setattr("mcp_common.legacy.worker_id", lambda: DEAD_WORKER)
    store.beat_worker(DEAD_WORKER, time.time() - 3600)
    call_id = "a request id far too long to carry.in a key"
    stream, last_id = priming_id(asking, legacy_call(asking, session, "nap", {"seconds": 60}, call_id=call_id))
    stream.close()
    assert wait_for(lambda: any(r.session_id == session for r in store._pending.values()), 5)
    monkeypatch.undo()
    final = resume(survivor, session, last_id)[-1]
    assert final["id"] == call_id and "stopped" in final["error"]["message"], final
    asking.close()


def test_a_call_ended_by_a_worker_that_died_before_logging_the_end_still_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker that claimed a dead worker's call (its owner row answered) dies before it
    appends the error to the log: the next resumer ends the stream with the claimed error."""
    store = MemoryStore()
    asking, survivor = endpoint(store, wait_detach_seconds=0.05), endpoint(store, stream_hold_seconds=5)
    session = initialize(asking, {})
    monkeypatch.setattr("mcp_common.legacy.worker_id", lambda: DEAD_WORKER)
    store.beat_worker(DEAD_WORKER, time.time() - 3600)
    stream, last_id = priming_id(asking, legacy_call(asking, session, "nap", {"seconds": 60}, call_id=82))
    stream.close()
    assert wait_for(lambda: any(r.session_id == session for r in store._pending.values()))
    monkeypatch.undo()
    stream_key = last_id.rpartition(".")[0]
    claimed = {"jsonrpc": "2.0", "id": 82, "error": {"code": -32603, "message": "claimed, then the claimer died"}}
    assert store.answer_pending(session, f"owner-{stream_key}", json.dumps(claimed))
    assert resume(survivor, session, last_id)[-1] == claimed
    asking.close()


class MeetingStore(MemoryStore):
    """A ``MemoryStore`` whose first two reads of a stream's questions wait for each other."""

    def __init__(self) -> None:
        super().__init__()
        self.meet = threading.Barrier(2, timeout=10)
        self.meetings = 2

    def stream_elicitations(self, session_id: str, stream_key: str):
        rows = super().stream_elicitations(session_id, stream_key)
        with self._lock:
            self.meetings -= 1
            meeting = self.meetings >= 0
        if meeting:
            self.meet.wait()
        return rows


def test_two_workers_resuming_a_dead_workers_call_end_it_once() -> None:
    """The client comes back twice at once (two reconnects, two workers): both find the
    call's worker dead at the same moment, and the call still gets one final error."""
    store = MeetingStore()
    asking = endpoint(store)
    survivors = [endpoint(store, stream_hold_seconds=5) for _ in range(2)]
    session, last_id, row_id = orphaned_call(store, asking, survivors[0])
    stream_key = last_id.rpartition(".")[0]
    with ThreadPoolExecutor(2) as pool:
        resumed = list(pool.map(lambda point: resume(point, session, last_id), survivors))
    for messages in resumed:
        assert [m["id"] for m in messages if "error" in m or "result" in m] == [77]
    assert "stopped while it waited" in store.get_elicitation(row_id).detail
    # One final event in the log: a client resuming after the error it got (its Last-Event-ID)
    # hears no second answer to the call.
    (final,) = [e for e in store.events_after(session, stream_key, 0) if e.final]
    late = endpoint(store, stream_hold_seconds=0.3)
    assert resume(late, session, f"{stream_key}.{final.event_id}") == []


def test_session_delete_cancels_the_pending_row() -> None:
    store = MemoryStore()
    point = endpoint(store)
    session = initialize(point, {"elicitation": {}})
    response = legacy_call(point, session, "interview", {})
    stream = point.iter_body(response)
    for chunk in stream:
        if b"elicitation/create" in chunk:
            break
    assert point.handle(request("DELETE", mcp_session_id=session)).status == 200
    deadline = time.time() + 5
    while time.time() < deadline and next(iter(store._elicitations.values())).status == "pending":
        time.sleep(0.02)
    (row,) = store._elicitations.values()
    assert row.status == "cancelled" and row.detail == "The session ended"
    stream.close()


class CountingStore(MemoryStore):
    """A ``MemoryStore`` that counts the polls of waiting tools."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = {"get_pending": 0, "answered_since": 0, "pending_keys": 0}

    def get_pending(self, session_id: str, request_id: str):
        self.calls["get_pending"] += 1
        return super().get_pending(session_id, request_id)

    def answered_since(self, since: float):
        self.calls["answered_since"] += 1
        return super().answered_since(since)

    def pending_keys(self, session_ids):
        self.calls["pending_keys"] += 1
        return super().pending_keys(session_ids)


def detached_question(point: MCPEndpoint, session: str, call_id: int) -> str:
    """Start ``interview`` and read its response until the server ends it (the tool waits on)."""
    question = None
    for chunk in point.iter_body(legacy_call(point, session, "interview", {}, call_id=call_id)):
        for line in chunk.decode().split("\n"):
            if line.startswith("data: ") and "elicitation/create" in line:
                question = json.loads(line[6:])["id"]
    assert question is not None
    return question


def wait_for(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_tools_waiting_in_one_worker_share_one_poll_for_answers_given_to_another() -> None:
    store = CountingStore()
    asking = endpoint(store, poll_interval=0.05, wait_detach_seconds=0.02)
    answering = endpoint(store)
    sessions = [initialize(asking, {"elicitation": {}}) for _ in range(40)]
    questions = [detached_question(asking, session, n) for n, session in enumerate(sessions)]
    store.calls.update(get_pending=0, answered_since=0)
    started = time.monotonic()
    for n, (session, question) in enumerate(zip(sessions, questions, strict=True)):
        reply = {"jsonrpc": "2.0", "id": question, "result": {"action": "accept", "content": {"name": f"N{n}"}}}
        assert answering.handle(legacy(session, reply)).status == 202

    def finished() -> int:
        return sum('"Interviewed N' in event.message for event in store._events)

    assert wait_for(lambda: finished() == 40), finished()
    elapsed = time.monotonic() - started
    # Every tool got its own answer, found by the asking worker's poll, not by 40 pollers.
    texts = {json.loads(e.message)["result"]["content"][0]["text"] for e in store._events if e.final}
    assert texts >= {f"Interviewed N{n}" for n in range(40)}
    assert store.calls["get_pending"] == 0
    assert 1 <= store.calls["answered_since"] <= elapsed / (0.05 / 5) + 2  # one per round, at most
    assert all(row.status == "accepted" for row in store._elicitations.values())


def test_a_session_deleted_through_another_worker_cancels_the_questions_waiting_here() -> None:
    store = CountingStore()
    asking = endpoint(store, poll_interval=0.02, wait_detach_seconds=0.02)
    other = endpoint(store)
    session = initialize(asking, {"elicitation": {}})
    detached_question(asking, session, 1)
    detached_question(asking, session, 2)
    assert other.handle(request("DELETE", mcp_session_id=session)).status == 200
    assert wait_for(lambda: all(row.status != "pending" for row in store._elicitations.values()))
    rows = list(store._elicitations.values())
    assert [(row.status, row.detail) for row in rows] == [("cancelled", "The session ended")] * 2
    assert store.calls["pending_keys"] >= 1


class OutageStore(CountingStore):
    """A ``CountingStore`` whose poll for answers fails while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.failed = 0

    def answered_since(self, since: float):
        if self.down:
            self.failed += 1
            raise ConnectionError("the database went away")
        return super().answered_since(since)


def test_a_database_outage_under_the_answer_poll_is_logged_once_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The poll retries up to once a second: it logged a WARNING (and a traceback) at each
    failed round, for as long as the database was away."""
    store = OutageStore()
    point = endpoint(store, poll_interval=0.02, wait_detach_seconds=0.02)
    session = initialize(point, {"elicitation": {}})
    caplog.set_level(logging.INFO, logger="mcp_common.legacy")
    store.down = True
    detached_question(point, session, 1)
    assert wait_for(lambda: store.failed >= 8)
    store.down = False

    def logged() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "mcp_common.legacy"]

    assert wait_for(lambda: len(logged()) == 2), logged()
    point.close()
    (warning, back) = logged()
    assert warning == ("WARNING", "Polling for answers from other workers failed; retrying")
    assert back[0] == "INFO" and back[1].startswith("Polling for answers from other workers works again after")


class OwnerOutageStore(MemoryStore):
    """A ``MemoryStore`` whose writes of a call's owner row fail while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.failed = 0

    def create_pending(self, session_id: str, request_id: str, method: str, params: str, *args: Any, **kwargs: Any):
        if self.down and method == OWNER_METHOD:
            self.failed += 1
            raise ConnectionError("the database went away")
        return super().create_pending(session_id, request_id, method, params, *args, **kwargs)


def test_a_database_outage_under_the_noting_of_calls_workers_is_logged_once_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each running call retries the write of its owner row up to once a second: with several
    calls running, an outage logged a WARNING (and a traceback) per call per second."""
    store = OwnerOutageStore()
    point = endpoint(store, wait_detach_seconds=0.02, heartbeat_interval=0.05)
    session = initialize(point, {})
    caplog.set_level(logging.INFO, logger="mcp_common.legacy")
    store.down = True
    streams = [priming_id(point, legacy_call(point, session, "nap", {"seconds": 60}, call_id=n))[0] for n in (1, 2)]
    assert wait_for(lambda: store.failed >= 8)
    store.down = False
    assert wait_for(lambda: sum(r.method == OWNER_METHOD for r in store._pending.values()) == 2)

    def logged() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "mcp_common.legacy"]

    assert wait_for(lambda: len(logged()) >= 2), logged()
    for stream in streams:
        stream.close()
    point.close()
    (warning, back) = logged()
    assert warning == ("WARNING", "Recording which worker runs a call failed; retrying")
    assert back[0] == "INFO" and back[1].startswith("Recording which worker runs a call works again after")


def test_close_ends_the_calls_waiting_for_answers_and_their_polling() -> None:
    """``close()`` (a test's teardown, an orderly shutdown) exits the lifespan the tools run
    under: the calls waiting for a client's answer end with it, as the SDK's session manager
    ends its sessions' calls. Their questions are recorded as cancelled, a client resuming the
    call hears "Request cancelled", and nothing polls the database for their answers any more
    (it went on for the process's life, against a database the test may have dropped)."""
    store = CountingStore()
    point = endpoint(store, poll_interval=0.02, wait_detach_seconds=0.02)
    session = initialize(point, {"elicitation": {}})
    detached_question(point, session, 7)
    assert wait_for(lambda: store.calls["answered_since"] > 0)
    point.close()
    ((row,),) = [list(store._elicitations.values())]
    assert (row.status, row.detail) == ("cancelled", "The call was cancelled")
    (final,) = [json.loads(event.message) for event in store._events if event.final]
    assert final == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "Request cancelled"}}
    polls = store.calls["answered_since"]
    time.sleep(0.3)  # 15 poll intervals
    assert store.calls["answered_since"] == polls
    # The endpoint serves on, its lifespan entered again.
    status, body = call(point, "hello", {})
    assert (status, body["result"]["resultType"]) == (200, "input_required"), body
    point.close()


# -- registration-time schema checks ---------------------------------------------------------


def test_nested_elicitation_models_are_reported_with_the_sdk_message() -> None:
    server = MCPServer("Bad")

    @server.tool()
    async def register(who: Annotated[Person, Resolve(ask_person)]) -> str:
        return who.name

    @server.tool()
    async def inline(ctx: Context) -> str:
        await ctx.elicit("Who?", schema=Person)
        return "?"

    message = (
        "Elicitation schema field 'address' rendered as {'$ref': '#/$defs/Address'}, "
        "which is not a valid PrimitiveSchemaDefinition"
    )
    problems = check_server_schemas(server)
    assert ("tool 'register', resolver 'ask_person'", message) in problems
    assert ("tool 'inline'", message) in problems
    with pytest.raises(ElicitationSchemaError, match="not a valid PrimitiveSchemaDefinition"):
        assert_server_schemas(server)
    assert check_server_schemas(build_server()) == []


def test_get_stream_key_is_not_a_call_stream() -> None:
    # The GET stream never ends a call: the orphan check applies to call streams only.
    assert GET_STREAM == "get"


@pytest.mark.parametrize("where", ["same-worker", "other-worker"])
def test_a_cancelled_call_stops_waiting_and_its_tool_goes_no_further(where: str) -> None:
    """``notifications/cancelled`` cancels the call as the SDK does, whichever worker it
    reaches: the tool's ``ctx.elicit`` does not return (no "No interview (cancel)" runs), the
    call ends with the cancellation error, and the question's row says why."""
    store = MemoryStore()
    asking, other = endpoint(store), endpoint(store)
    receiver = asking if where == "same-worker" else other
    session = initialize(asking, {"elicitation": {}})

    def cancel(message: dict[str, Any]) -> None:
        if message.get("method") == "elicitation/create":
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 31}}
            assert receiver.handle(legacy(session, note)).status == 202

    seen = follow(asking, session, legacy_call(asking, session, "interview", {}, call_id=31), cancel, resumer=other)
    assert [m for m in seen if "result" in m] == []
    assert seen[-1]["id"] == 31 and seen[-1]["error"]["message"] == "Request cancelled"
    (row,) = store._elicitations.values()
    assert row.status == "cancelled"


def crunching_server() -> tuple[MCPServer, threading.Event, threading.Event]:
    """A server whose ``crunch`` runs a minute asking nothing (far longer than a busy machine
    takes to cancel it); set as it starts, and if it finishes."""
    running, finished = threading.Event(), threading.Event()
    server = MCPServer("Slow")

    @server.tool()
    async def crunch(ctx: Context) -> str:
        running.set()
        for _ in range(1200):
            await asyncio.sleep(0.05)
        finished.set()
        return "crunched"

    return server, running, finished


def test_a_running_call_is_cancelled_through_another_worker() -> None:
    """``notifications/cancelled`` that reaches another worker while the call runs here (it
    asks nothing: a long computation, a slow API) cancels it as the SDK does: the tool goes no
    further, and the call ends with the cancellation error, not with the tool's result."""
    server, running, finished = crunching_server()
    store = MemoryStore()
    asking, other = two_quick_workers(server, store)
    session = initialize(asking, {"elicitation": {}})
    response = legacy_call(asking, session, "crunch", {}, call_id=41)
    assert running.wait(5)
    # Running past ``wait_detach_seconds``, the call has noted which worker runs it.
    assert wait_for(lambda: any(r.session_id == session for r in store._pending.values()))
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}}
    assert other.handle(legacy(session, note)).status == 202
    started = time.monotonic()
    seen = follow(asking, session, response, resumer=other)
    assert not finished.is_set()
    assert seen[-1] == {"jsonrpc": "2.0", "id": 41, "error": {"code": -32001, "message": "Request cancelled"}}
    assert time.monotonic() - started < 20  # not the tool's minute
    asking.close()


def test_a_running_call_ends_with_its_session_deleted_through_another_worker() -> None:
    """DELETE reaching another worker while a call runs here (asking nothing) ends it as the
    SDK ends a deleted session's calls: the tool goes no further, and nothing is written to
    the deleted session's event log."""
    server, running, finished = crunching_server()
    store = MemoryStore()
    asking, other = two_quick_workers(server, store)
    session = initialize(asking, {})
    reader = threading.Thread(target=lambda: b"".join(asking.iter_body(legacy_call(asking, session, "crunch", {}))))
    reader.start()
    assert running.wait(5)
    assert wait_for(lambda: any(r.session_id == session for r in store._pending.values()))
    assert other.handle(request("DELETE", mcp_session_id=session)).status == 200
    reader.join(20)  # not the tool's minute
    assert not reader.is_alive() and not finished.is_set()
    time.sleep(0.2)
    assert [e for e in store._events if e.session_id == session] == []
    asking.close()


class SlowOwner:
    """Mixed into a store: its write of a call's owner row waits until the test lets it go, so
    whatever reaches another worker meanwhile reaches it before the row exists."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.owner_writing = threading.Event()
        self.let_owner_write = threading.Event()

    def create_pending(self, session_id: str, request_id: str, *args: Any, **kwargs: Any) -> None:
        if request_id.startswith("owner-"):
            self.owner_writing.set()
            assert self.let_owner_write.wait(10)
        super().create_pending(session_id, request_id, *args, **kwargs)  # type: ignore[misc]


class SlowOwnerStore(SlowOwner, MemoryStore):
    pass


@pytest.mark.parametrize("how", ["cancelled", "deleted"])
def test_a_call_ends_when_cancelled_through_another_worker_before_it_noted_its_worker(how: str) -> None:
    check_a_call_ends_when_cancelled_before_it_noted_its_worker(SlowOwnerStore(), how)


def check_a_call_ends_when_cancelled_before_it_noted_its_worker(store: Any, how: str) -> None:
    """``notifications/cancelled`` (or DELETE of the session) reaching another worker in a
    call's first moments, before the call's owner row exists (a call writes it once it has run
    for ``wait_detach_seconds``), still ends the call: the tool goes no further. ``store``: a
    :class:`SlowOwner` store."""
    server, running, finished = crunching_server()
    asking, other = two_quick_workers(server, store)
    try:
        session = initialize(asking, {})
        response = legacy_call(asking, session, "crunch", {}, call_id=43)
        assert running.wait(5) and store.owner_writing.wait(5)
        assert not any(key.startswith("owner-") for _, key in store.pending_keys([session]))
        if how == "cancelled":
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 43}}
            for _ in range(2):  # sent twice: each leaves its own mark
                assert other.handle(legacy(session, note)).status == 202
        else:
            assert other.handle(request("DELETE", mcp_session_id=session)).status == 200
        store.let_owner_write.set()
        if how == "cancelled":
            seen = follow(asking, session, response, resumer=other)
            assert seen[-1] == {"jsonrpc": "2.0", "id": 43, "error": {"code": -32001, "message": "Request cancelled"}}
        else:
            assert b"".join(asking.iter_body(response)).count(b'"result"') == 0
        assert not finished.is_set()
    finally:
        store.let_owner_write.set()
        asking.close()
        other.close()


def test_old_answered_elicitations_are_purged_pending_ones_kept() -> None:
    store = MemoryStore()
    point = endpoint(store)
    ask(point)
    key, _, handle = ask(point, "hold", {"booking_id": "1"})
    call(point, "hold", {"booking_id": "1"}, inputResponses={key: {"action": "decline"}}, requestState=handle)
    assert sorted(r.status for r in store._elicitations.values()) == ["declined", "pending"]
    assert store.purge_elicitations(time.time() + 1) == 1
    assert [r.status for r in store._elicitations.values()] == ["pending"]


class _Signed(MCPEndpoint):
    """An endpoint whose every request comes from ``self.user`` (the framework's principal)."""

    user: str | None = None

    def handle(self, request: HTTPRequest) -> HTTPResponse:
        request.principal = self.user
        return super().handle(request)


def test_a_tool_completes_only_what_its_own_caller_asked_on_its_own_server() -> None:
    """``ctx.session.send_elicit_complete`` in a tool is the calling client's business, as in
    the SDK: it completes the caller's own questions of this server (any of the caller's
    sessions), and the caller hears about it; another user's or another server's questions
    are left alone (``complete_elicitation`` is how a webhook or a task completes anyone's)."""
    store = MemoryStore()
    config = MCPConfig(secret_keys=(SECRET,), poll_interval=0.02, stream_hold_seconds=0.3)
    point = _Signed(build_server(), config, store)
    other_server = MCPServer("Other")

    @other_server.tool()
    async def confirm(booking_id: str, ctx: Context) -> str:
        await ctx.session.send_elicit_complete(f"dep-{booking_id}")
        return f"confirmed {booking_id}"

    other = _Signed(other_server, config, store)
    complete = {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": "dep-7"}}

    point.user = other.user = "alice"
    alice = initialize(point, {"elicitation": {"form": {}, "url": {}}})
    run_answering(point, point, alice, legacy_call(point, alice, "pay", {"booking_id": "7"}), {"action": "accept"})
    (row,) = store.find_elicitations("dep-7")

    point.user = "bob"
    bob = initialize(point, {"elicitation": {}})
    events(point, legacy_call(point, bob, "confirm", {"booking_id": "7"}))
    assert call(point, "confirm", {"booking_id": "7"})[1]["result"]["content"][0]["text"] == "confirmed 7"
    assert get_stream_messages(point, bob) == [complete]  # the caller's own session, as the SDK does
    assert store.get_elicitation(row.id).status == "accepted"

    alice_elsewhere = initialize(other, {"elicitation": {}})
    events(other, legacy_call(other, alice_elsewhere, "confirm", {"booking_id": "7"}))
    assert store.get_elicitation(row.id).status == "accepted"
    point.user = "alice"
    assert get_stream_messages(point, alice) == []

    assert call(point, "confirm", {"booking_id": "7"})[1]["result"]["content"][0]["text"] == "confirmed 7"
    assert store.get_elicitation(row.id).status == "completed"
    assert get_stream_messages(point, alice) == [complete]


URL_REFUSAL = {
    "code": -32021,
    "message": (
        "Client did not declare the url elicitation capability required by resolver "
        "'tests.core.test_elicitation:deposit'"
    ),
    "data": {"requiredCapabilities": {"elicitation": {"url": {}}}},
}


@pytest.mark.parametrize(
    "capabilities",
    [{"elicitation": {}}, {"elicitation": {"form": {}}}, {}],
    ids=["bare", "form-only", "none"],
)
def test_a_url_resolver_asks_only_clients_that_declared_url_mode_on_the_2026_wire(
    capabilities: dict[str, Any],
) -> None:
    """A URL-mode question goes only to a client that declared URL mode (a bare ``elicitation``
    capability means form only), as the SDK refuses a form question to a URL-only client."""
    store = MemoryStore()
    point = endpoint(store)
    status, body = call(point, "hold", {"booking_id": "1"}, capabilities=capabilities)
    assert (status, body["error"]) == (400, URL_REFUSAL)
    assert not store._elicitations
    status, body = call(point, "hold", {"booking_id": "1"}, capabilities={"elicitation": {"url": {}}})
    assert status == 200 and body["result"]["resultType"] == "input_required", body


@pytest.mark.parametrize(
    "capabilities",
    [{"elicitation": {}}, {"elicitation": {"form": {}}}],
    ids=["bare", "form-only"],
)
def test_a_url_resolver_asks_only_clients_that_declared_url_mode_on_the_legacy_wire(
    capabilities: dict[str, Any],
) -> None:
    store = MemoryStore()
    point = endpoint(store, stream_hold_seconds=0.3)
    session = initialize(point, capabilities)
    final = follow(point, session, legacy_call(point, session, "hold", {"booking_id": "2"}))[-1]
    assert final["error"] == URL_REFUSAL
    assert not store._elicitations

    url_only = initialize(point, {"elicitation": {"url": {}}})
    seen = run_answering(
        point, point, url_only, legacy_call(point, url_only, "hold", {"booking_id": "2"}), {"action": "accept"}
    )
    assert seen[0]["params"]["mode"] == "url"
    assert seen[-1]["result"]["content"][0]["text"] == "accepted dep-2 at https://pay.example.com/2"


def test_a_legacy_call_observes_a_completed_url_question_and_is_not_sent_again() -> None:
    store = MemoryStore()
    asking, answering = bistro(store), bistro(store)
    session = initialize(asking, {"elicitation": {"form": {}, "url": {}}})
    response = legacy_call(asking, session, "hold_table", {"booking_id": "7"})
    seen = run_answering(asking, answering, session, response, {"action": "accept"})
    assert seen[0]["method"] == "elicitation/create"
    paid = paid_ref(seen[0]["params"]["url"])
    assert seen[-1]["result"]["content"][0]["text"] == f"Holding booking 7; complete the payment at {PAY_AT}{paid}."
    complete_in_store(store, paid)
    again = follow(answering, session, legacy_call(answering, session, "hold_table", {"booking_id": "7"}, call_id=6))
    assert [message.get("method") for message in again if "method" in message] == []
    assert again[-1]["result"]["content"][0]["text"] == PAID


def two_quick_workers(server: MCPServer, store: MemoryStore) -> tuple[MCPEndpoint, MCPEndpoint]:
    """Two workers of ``server`` over one store, quick to detach and to poll."""
    config = MCPConfig(secret_keys=(SECRET,), poll_interval=0.02, wait_detach_seconds=0.02, request_timeout=30)
    return MCPEndpoint(server, config, store), MCPEndpoint(server, config, store)


@pytest.mark.parametrize("where", ["same-worker", "other-worker"])
def test_a_deleted_session_ends_its_waiting_call_whichever_worker_receives_the_delete(where: str) -> None:
    """DELETE ends the session's calls as the SDK ends them (cancelled, the tool goes no
    further), whichever worker it reaches: the tool neither carries on with a made-up "cancel"
    nor asks again into the deleted session (a question nobody can answer, waited for until
    the request timeout), and nothing more is written to the deleted session's event log."""
    went_on: list[str] = []
    server = MCPServer("Persistent")

    @server.tool()
    async def insist(ctx: Context) -> str:
        answer = await ctx.elicit("Your name?", schema=Name)
        went_on.append(answer.action)
        again = await ctx.elicit("Really, your name?", schema=Name)
        went_on.append(again.action)
        return "done"

    store = MemoryStore()
    asking, other = two_quick_workers(server, store)
    deleting = asking if where == "same-worker" else other
    session = initialize(asking, {"elicitation": {}})
    for chunk in asking.iter_body(legacy_call(asking, session, "insist", {})):
        if b"elicitation/create" in chunk:
            break
    assert deleting.handle(request("DELETE", mcp_session_id=session)).status == 200
    assert wait_for(lambda: all(row.status != "pending" for row in store._elicitations.values()))
    time.sleep(0.2)
    assert went_on == []
    assert [(row.status, row.detail) for row in store._elicitations.values()] == [("cancelled", "The session ended")]
    assert [e for e in store._events if e.session_id == session] == []


class HeldQuestionStore(MemoryStore):
    """A ``MemoryStore`` whose write of a question, once done, waits for the test's go."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()
        self.go = threading.Event()

    def create_pending(self, session_id: str, request_id: str, method: str, *args: Any, **kwargs: Any) -> None:
        super().create_pending(session_id, request_id, method, *args, **kwargs)
        if method == "elicitation/create":
            self.written.set()
            self.go.wait(10)


@pytest.mark.parametrize(
    ("ending", "detail"), [("DELETE", "The session ended"), ("notifications/cancelled", "The call was cancelled")]
)
def test_a_call_ended_while_its_question_is_written_records_the_question_as_ended(ending: str, detail: str) -> None:
    """A DELETE or ``notifications/cancelled`` that ends a call while its question's row is
    being written (or another worker's DELETE, found by the call's own check of its owner
    row): the row, written all the same, says the question ended. It said "pending" until it
    expired, and the staff panel listed it as waiting for a session that was gone (seen in CI
    under load)."""
    store = HeldQuestionStore()
    point = endpoint(store)
    session = initialize(point, {"elicitation": {}})
    response = legacy_call(point, session, "interview", {}, call_id=7)
    reader = threading.Thread(target=lambda: b"".join(point.iter_body(response)), daemon=True)
    reader.start()
    try:
        assert store.written.wait(10)
        if ending == "DELETE":
            assert point.handle(request("DELETE", mcp_session_id=session)).status == 200
        else:
            note = {"jsonrpc": "2.0", "method": ending, "params": {"requestId": 7}}
            assert point.handle(legacy(session, note)).status == 202
    finally:
        store.go.set()

    def questions() -> list[tuple[str, str | None]]:
        return [(row.status, row.detail) for row in store._elicitations.values()]

    assert wait_for(lambda: questions() == [("cancelled", detail)], 5), questions()
    reader.join(10)
    assert not reader.is_alive()
    point.close()
    # Nothing of the question is left for a worker to poll.
    assert [row for row in store._pending.values() if row.method == "elicitation/create"] == []


def test_a_question_whose_session_ended_before_its_call_awaited_it_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session's end fails its questions' futures and cancels their calls. A call cancelled
    before it awaited its future (still sending the question) never read it, and asyncio
    logged "Future exception was never retrieved" as an ERROR, with a traceback, for it."""
    waiters = Waiters()

    async def ask_then_end() -> None:
        waiters.expect("s1", "q1")
        waiters.end_session("s1")
        waiters.forget("s1", "q1")  # as the cancelled call's cleanup does

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(ask_then_end())
        gc.collect()
    assert [record.getMessage() for record in caplog.records if record.name == "asyncio"] == []


def test_a_purge_removes_events_left_for_a_session_that_is_gone() -> None:
    from tests.store_checks import check_a_purge_removes_events_left_for_a_session_that_is_gone

    check_a_purge_removes_events_left_for_a_session_that_is_gone(MemoryStore())


def test_a_session_deleted_through_another_worker_before_its_call_asks_ends_the_call() -> None:
    """The DELETE reaches another worker while the call still runs here, before its tool asks:
    the question must not be asked into the deleted session and waited for until the request
    timeout (nobody can answer it, and the tool would run on for all that time): the call ends
    as a deleted session's calls end, its question recorded as cancelled."""
    running, may_ask = threading.Event(), threading.Event()
    went_on: list[str] = []
    server = MCPServer("Slow")

    @server.tool()
    async def slow_interview(ctx: Context) -> str:
        running.set()
        await asyncio.to_thread(may_ask.wait, 10)
        answer = await ctx.elicit("Your name?", schema=Name)
        went_on.append(answer.action)
        return "done"

    store = MemoryStore()
    asking, other = two_quick_workers(server, store)
    session = initialize(asking, {"elicitation": {}})

    def read() -> None:
        with contextlib.suppress(Exception):
            for _ in asking.iter_body(legacy_call(asking, session, "slow_interview", {})):
                pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert running.wait(5)
    assert other.handle(request("DELETE", mcp_session_id=session)).status == 200
    may_ask.set()
    assert wait_for(lambda: store._elicitations and all(r.status != "pending" for r in store._elicitations.values()))
    time.sleep(0.2)
    assert went_on == []
    assert [(row.status, row.detail) for row in store._elicitations.values()] == [("cancelled", "The session ended")]
    assert not any(r.session_id == session for r in store._pending.values())
    assert [e for e in store._events if e.session_id == session] == []
    asking.close()
