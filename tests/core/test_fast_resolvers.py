"""Tools with resolvers on the 2026-07-28 wire: the fast path answers every round exactly as the
SDK's full path does (questions, sealed-then-persisted state, answers, errors), each path
accepts the other's handles, and whatever the fast path cannot walk goes to the full path."""

from __future__ import annotations

import asyncio
import json
import re
import threading
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
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from mcp_common import HTTPRequest, HTTPResponse, MCPConfig, MCPEndpoint, MemoryStore
from mcp_common import fast as fast_module
from mcp_common.elicitation import ElicitUrl, UrlConsent
from tests.core.test_endpoint import SECRET, modern_call


class Name(BaseModel):
    name: str


class Ok(BaseModel):
    ok: bool


class Age(BaseModel):
    years: int


async def ask_name() -> Name | Elicit[Name]:
    return Elicit("Who are you?", Name)


def ask_ok(text: str) -> Ok | Elicit[Ok]:
    """A synchronous resolver reading a tool argument by name."""
    return Elicit(f"Really {text}?", Ok)


async def ask_age(who: Annotated[Name, Resolve(ask_name)]) -> Age | Elicit[Age]:
    return Elicit(f"How old is {who.name}?", Age)


async def shouted(text: str) -> str:
    return text.upper()


async def refuse() -> Name | Elicit[Name]:
    raise ToolError("not today")


async def crash() -> Name | Elicit[Name]:
    raise ValueError("secret internals")


WHERE: list[str] = []
"""The threads the ``ask_where`` and ``ask_slowly`` resolvers ran in."""


async def ask_where() -> Name | Elicit[Name]:
    WHERE.append(threading.current_thread().name)
    return Elicit("Where are you?", Name)


async def ask_slowly() -> Name | Elicit[Name]:
    await asyncio.sleep(0)
    WHERE.append(threading.current_thread().name)
    return Elicit("Who are you, slowly?", Name)


async def ask_with_loop() -> Name | Elicit[Name]:
    asyncio.get_running_loop()  # never awaits, yet needs a running loop
    return Elicit("Who are you, with a loop?", Name)


async def ask_with_anyio() -> Name | Elicit[Name]:
    import anyio

    anyio.get_cancelled_exc_class()  # asks which async library runs it: needs a loop
    return Elicit("Who are you, with anyio?", Name)


async def from_context(ctx: Context) -> Name | Elicit[Name]:
    return Elicit(f"Who are you (request {ctx.request_id})?", Name)


async def deposit(booking_id: str) -> ElicitUrl:
    return ElicitUrl(
        "Pay the deposit.", url=f"https://pay.example.com/{booking_id}", elicitation_id=f"dep-{booking_id}"
    )


def build_server() -> MCPServer:
    server = MCPServer("FastResolvers")

    @server.tool()
    def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"Hello, {who.name}!"

    @server.tool()
    async def agreet(who: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"Hello again, {who.name}!"

    @server.tool()
    def confirm(text: str, ok: Annotated[Ok, Resolve(ask_ok)]) -> str:
        return f"echo: {text}" if ok.ok else "not confirmed"

    @server.tool()
    def maybe(who: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> str:
        match who:
            case AcceptedElicitation(data=data):
                return f"got {data.name}"
            case DeclinedElicitation():
                return "declined"
            case CancelledElicitation():
                return "cancelled"

    @server.tool()
    def both(text: str, who: Annotated[Name, Resolve(ask_name)], ok: Annotated[Ok, Resolve(ask_ok)]) -> str:
        return f"{who.name} says {text}: {ok.ok}"

    @server.tool()
    def aged(age: Annotated[Age, Resolve(ask_age)]) -> str:
        return f"{age.years} years"

    @server.tool()
    def upper(text: str, loud: Annotated[str, Resolve(shouted)]) -> str:
        return loud

    @server.tool()
    def refused(who: Annotated[Name, Resolve(refuse)]) -> str:
        return who.name

    @server.tool()
    def crashed(who: Annotated[Name, Resolve(crash)]) -> str:
        return who.name

    @server.tool()
    def contextual(who: Annotated[Name, Resolve(from_context)]) -> str:
        return who.name

    @server.tool()
    def where(who: Annotated[Name, Resolve(ask_where)]) -> str:
        return f"{who.name} is here"

    @server.tool()
    def slow(who: Annotated[Name, Resolve(ask_slowly)]) -> str:
        return f"{who.name}, slowly"

    @server.tool()
    def looped(who: Annotated[Name, Resolve(ask_with_loop)]) -> str:
        return f"{who.name}, looped"

    @server.tool()
    def anyio_looped(who: Annotated[Name, Resolve(ask_with_anyio)]) -> str:
        return f"{who.name}, anyio"

    @server.tool()
    async def hold(booking_id: str, consent: Annotated[ElicitationResult[UrlConsent], Resolve(deposit)]) -> str:
        if isinstance(consent, AcceptedElicitation):
            return f"accepted {consent.data.elicitation_id}"
        return consent.action

    return server


@pytest.fixture(scope="module")
def point() -> MCPEndpoint:
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("upper", {"text": "warm"}))  # enters the lifespan
    return endpoint


def fast(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    response = endpoint.fast.handle_resolving_sync(request)
    assert response is not None, "the fast path should have taken this call"
    return response


def fast_asgi(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    """The ASGI entry (from a loop other than the endpoint's, as under uvicorn)."""
    response = asyncio.run(endpoint.fast.handle_resolving_async(request))
    assert response is not None, "the ASGI fast path should have taken this call"
    return response


def full(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    return endpoint.runner.run(endpoint.handle_async(request))


HANDLE = re.compile(r"^mcp1\.[0-9a-f]{32}\.[A-Za-z0-9_-]+$")


def masked(response: HTTPResponse) -> tuple[int, Any]:
    """Status and body, with the (random) request-state handle checked and masked."""
    data = json.loads(response.body)
    result = data.get("result") or {}
    if "requestState" in result:
        assert HANDLE.match(result["requestState"]), result["requestState"]
        result["requestState"] = "<handle>"
    return response.status, data


def call(name: str, arguments: dict[str, Any], capabilities: dict[str, Any] | None = None, **extra: Any):
    request = modern_call(name, arguments, **extra)
    if capabilities is not None:
        body = json.loads(request.body)
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities
        request.body = json.dumps(body).encode()
    return request


def answers(response: HTTPResponse, reply: dict[str, Any] | Any) -> dict[str, Any]:
    """inputResponses for every question of an input_required answer (``reply`` per key, or one for all)."""
    result = json.loads(response.body)["result"]
    assert result["resultType"] == "input_required", result
    return {key: reply(key) if callable(reply) else reply for key in result["inputRequests"]}


FIRST_ROUNDS = [
    ("greet", {}),
    ("agreet", {}),
    ("confirm", {"text": "hi"}),
    ("maybe", {}),
    ("both", {"text": "hi"}),
    ("aged", {}),
    ("upper", {"text": "hi"}),
    ("refused", {}),
    ("crashed", {}),
    ("hold", {"booking_id": "42"}),
    ("greet", {"unexpected": 1}),
    ("slow", {}),
    ("looped", {}),
    ("anyio_looped", {}),
]


@pytest.mark.parametrize(("name", "arguments"), FIRST_ROUNDS, ids=[n for n, _ in FIRST_ROUNDS])
def test_first_round_answers_alike(point: MCPEndpoint, name: str, arguments: dict[str, Any]) -> None:
    expected = masked(full(point, call(name, arguments)))
    assert masked(fast(point, call(name, arguments))) == expected
    assert masked(fast_asgi(point, call(name, arguments))) == expected


ACCEPT = {
    "greet": {"name": "Ada"},
    "agreet": {"name": "Ada"},
    "confirm": {"ok": True},
    "maybe": {"name": "Ada"},
    "slow": {"name": "Ada"},
    "looped": {"name": "Ada"},
    "anyio_looped": {"name": "Ada"},
}
REPLIES = [
    ("accept", lambda content: {"action": "accept", "content": content}),
    ("decline", lambda content: {"action": "decline"}),
    ("cancel", lambda content: {"action": "cancel"}),
    ("wrong-content", lambda content: {"action": "accept", "content": {"nope": 1}}),
    ("no-content", lambda content: {"action": "accept"}),
]


@pytest.mark.parametrize("name", sorted(ACCEPT))
@pytest.mark.parametrize(("kind", "reply"), REPLIES, ids=[k for k, _ in REPLIES])
def test_retry_with_answers_answers_alike_and_each_path_takes_the_others_handle(
    point: MCPEndpoint, name: str, kind: str, reply: Any
) -> None:
    arguments = {"text": "hi"} if name == "confirm" else {}
    outcomes = []
    pairs = [(fast, fast), (full, full), (fast, full), (full, fast), (fast_asgi, fast_asgi), (fast_asgi, fast)]
    for ask, retry in pairs:
        asked = ask(point, call(name, arguments))
        state = json.loads(asked.body)["result"]["requestState"]
        responses = answers(asked, reply(ACCEPT[name]))
        outcomes.append(masked(retry(point, call(name, arguments, inputResponses=responses, requestState=state))))
    assert outcomes[0][0] == 200
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes


def test_dependent_resolvers_take_two_rounds_alike(point: MCPEndpoint) -> None:
    for path in (fast, full):
        first = path(point, call("aged", {}))
        ((key, question),) = json.loads(first.body)["result"]["inputRequests"].items()
        assert question["params"]["message"] == "Who are you?"
        second = path(
            point,
            call(
                "aged",
                {},
                inputResponses={key: {"action": "accept", "content": {"name": "Ada"}}},
                requestState=json.loads(first.body)["result"]["requestState"],
            ),
        )
        ((key2, question2),) = json.loads(second.body)["result"]["inputRequests"].items()
        assert question2["params"]["message"] == "How old is Ada?"
        third = path(
            point,
            call(
                "aged",
                {},
                inputResponses={key2: {"action": "accept", "content": {"years": 36}}},
                requestState=json.loads(second.body)["result"]["requestState"],
            ),
        )
        assert json.loads(third.body)["result"]["content"][0]["text"] == "36 years"


def test_two_questions_are_batched_and_answered_alike(point: MCPEndpoint) -> None:
    results = []
    for path in (fast, full):
        asked = path(point, call("both", {"text": "hi"}))
        content = {"ok": True, "name": "Ada"}

        def reply(key: str, content: dict[str, Any] = content) -> dict[str, Any]:
            field = "ok" if key.endswith("ask_ok") else "name"
            return {"action": "accept", "content": {field: content[field]}}

        state = json.loads(asked.body)["result"]["requestState"]
        retry = call("both", {"text": "hi"}, inputResponses=answers(asked, reply), requestState=state)
        results.append(masked(path(point, retry)))
    assert results[0] == results[1]
    assert results[0][1]["result"]["content"][0]["text"] == "Ada says hi: True"


@pytest.mark.parametrize("path", [fast, full], ids=["fast", "full"])
def test_a_question_left_out_of_a_retry_is_asked_again_and_leaves_the_pending_list(
    path: Any, point: MCPEndpoint
) -> None:
    """The client answers one of two questions: the tool asks the other again, in a row of its
    own; the first row of that question is no longer pending (no retry can answer it now)."""
    store = point.store
    asked = path(point, call("both", {"text": "hi"}))
    first = json.loads(asked.body)["result"]
    ok_key = next(key for key in first["inputRequests"] if key.endswith("ask_ok"))
    retry = call(
        "both",
        {"text": "hi"},
        inputResponses={ok_key: {"action": "accept", "content": {"ok": True}}},
        requestState=first["requestState"],
    )
    second = json.loads(path(point, retry).body)["result"]
    assert second["resultType"] == "input_required", second
    ((name_key, question),) = second["inputRequests"].items()
    assert question["params"]["message"] == "Who are you?"
    old_state = first["requestState"].split(".")[1]
    rows = {r.request_key: (r.status, r.detail) for r in store.elicitations_for_state(old_state)}
    assert rows == {ok_key: ("accepted", None), name_key: ("expired", "The client retried without answering it")}
    (again,) = store.elicitations_for_state(second["requestState"].split(".")[1])
    assert (again.request_key, again.status) == (name_key, "pending")


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"elicitation": {"url": {}}}, {"elicitation": {"form": {}}}, {"elicitation": "not an object"}],
    ids=["none", "url-only", "form", "malformed"],
)
def test_client_capabilities_are_checked_alike(point: MCPEndpoint, capabilities: dict[str, Any]) -> None:
    expected = masked(full(point, call("greet", {}, capabilities)))
    if capabilities.get("elicitation") == "not an object":
        # The request surface refuses it: the fast path steps aside, the full path answers.
        assert point.fast.handle_resolving_sync(call("greet", {}, capabilities)) is None
        assert expected[0] == 400
        assert masked(point.handle(call("greet", {}, capabilities))) == expected
        return
    assert masked(fast(point, call("greet", {}, capabilities))) == expected


def test_url_resolver_round_trip_on_the_fast_path(point: MCPEndpoint) -> None:
    url_mode = {"elicitation": {"url": {}}}
    asked = fast(point, call("hold", {"booking_id": "7"}, url_mode))
    result = json.loads(asked.body)["result"]
    ((key, question),) = result["inputRequests"].items()
    assert question["params"] == {"mode": "url", "message": "Pay the deposit.", "url": "https://pay.example.com/7"}
    retry = call(
        "hold",
        {"booking_id": "7"},
        url_mode,
        inputResponses={key: {"action": "accept"}},
        requestState=result["requestState"],
    )
    assert json.loads(fast(point, retry).body)["result"]["content"][0]["text"] == "accepted dep-7"
    (row,) = point.store.find_elicitations("dep-7")
    assert (row.mode, row.status) == ("url", "accepted")


def test_the_asgi_entry_serves_resolver_calls_and_refuses_bad_state(
    point: MCPEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = []
    original = point.fast.handle_resolving_async

    async def spy(request: HTTPRequest) -> HTTPResponse | None:
        response = await original(request)
        served.append(response is not None)
        return response

    monkeypatch.setattr(point.fast, "handle_resolving_async", spy)

    async def round_trip() -> list[HTTPResponse]:
        asked = await point.handle_from_other_loop(call("agreet", {}))
        state = json.loads(asked.body)["result"]["requestState"]
        responses = answers(asked, {"action": "accept", "content": {"name": "Lin"}})
        retry = call("agreet", {}, inputResponses=responses, requestState=state)
        done = await point.handle_from_other_loop(retry)
        replayed = await point.handle_from_other_loop(call("agreet", {}, inputResponses=responses, requestState=state))
        return [done, replayed]

    done, replayed = asyncio.run(round_trip())
    assert json.loads(done.body)["result"]["content"][0]["text"] == "Hello again, Lin!"
    assert replayed.status == 400
    assert json.loads(replayed.body)["error"]["data"] == {"reason": "invalid_request_state"}
    assert served == [True, True, True]


def test_bad_state_is_refused_alike_and_a_handle_is_single_use(point: MCPEndpoint) -> None:
    asked = fast(point, call("greet", {}))
    state = json.loads(asked.body)["result"]["requestState"]
    responses = answers(asked, {"action": "accept", "content": {"name": "Ada"}})
    assert json.loads(point.handle(call("greet", {}, inputResponses=responses, requestState=state)).body)["result"]
    replayed = point.handle(call("greet", {}, inputResponses=responses, requestState=state))
    forged = point.handle(call("greet", {}, inputResponses=responses, requestState="mcp1.x.y"))
    for response in (replayed, forged):
        assert response.status == 400
        assert json.loads(response.body)["error"]["data"] == {"reason": "invalid_request_state"}


def test_what_the_fast_path_leaves_to_the_full_path(point: MCPEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    def taken(request: HTTPRequest) -> bool:
        return point.fast.handle_resolving_sync(request) is not None

    # A resolver that takes the Context could notify or log through it.
    assert not taken(call("contextual", {}))
    assert json.loads(point.handle(call("contextual", {})).body)["result"]["resultType"] == "input_required"
    # The legacy era asks over the session's back-channel.
    legacy = call("greet", {})
    legacy.headers["mcp-protocol-version"] = "2025-11-25"
    assert not taken(legacy)
    # Tools without resolvers, and requests the full path must refuse, with its exact error.
    assert not taken(call("no_such_tool", {}))
    assert not taken(call("greet", {"text": 5}, _meta="not an object"))
    monkeypatch.setattr(fast_module, "_otel_active", lambda: True)
    assert not taken(call("greet", {}))


def test_the_wsgi_entry_serves_resolver_calls_on_the_fast_path(
    point: MCPEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = []
    original = point.fast.handle_resolving_sync

    def spy(request: HTTPRequest) -> HTTPResponse | None:
        response = original(request)
        served.append(response is not None)
        return response

    monkeypatch.setattr(point.fast, "handle_resolving_sync", spy)
    asked = point.handle(call("greet", {}))
    state = json.loads(asked.body)["result"]["requestState"]
    responses = answers(asked, {"action": "accept", "content": {"name": "Lin"}})
    done = point.handle(call("greet", {}, inputResponses=responses, requestState=state))
    assert json.loads(done.body)["result"]["content"][0]["text"] == "Hello, Lin!"
    assert served == [True, True]


def test_resolvers_that_never_await_run_in_the_request_thread_the_others_on_the_loop() -> None:
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("upper", {"text": "warm"}))
    loop_thread = endpoint.runner.run(_thread_name())
    WHERE.clear()
    for name in ("where", "slow"):
        asked = fast(endpoint, call(name, {}))
        state = json.loads(asked.body)["result"]["requestState"]
        responses = answers(asked, {"action": "accept", "content": {"name": "Ada"}})
        done = fast(endpoint, call(name, {}, inputResponses=responses, requestState=state))
        assert json.loads(done.body)["result"]["content"][0]["text"].startswith("Ada")
    me = threading.current_thread().name
    # No await in ask_where: both rounds in this (the request's) thread; ask_slowly awaits: on the loop.
    assert [me, me, loop_thread, loop_thread] == WHERE
    inline = endpoint.fast._inline
    assert inline["where"][1] is True and inline["slow"][1] is False
    # Sync resolvers run on the SDK's worker threads: never driven without a loop.
    fast(endpoint, call("confirm", {"text": "hi"}))
    assert inline["confirm"][1] is False


@pytest.mark.parametrize(
    ("name", "message", "text"),
    [
        ("looped", "Who are you, with a loop?", "Ada, looped"),
        ("anyio_looped", "Who are you, with anyio?", "Ada, anyio"),
    ],
)
def test_a_resolver_that_needs_a_loop_without_awaiting_is_walked_again_on_the_loop(
    name: str, message: str, text: str
) -> None:
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("upper", {"text": "warm"}))
    asked = fast(endpoint, call(name, {}))
    ((_, question),) = json.loads(asked.body)["result"]["inputRequests"].items()
    assert question["params"]["message"] == message
    # Learned once: later calls of the tool go straight to the loop.
    assert endpoint.fast._inline[name] is False
    state = json.loads(asked.body)["result"]["requestState"]
    responses = answers(asked, {"action": "accept", "content": {"name": "Ada"}})
    done = fast(endpoint, call(name, {}, inputResponses=responses, requestState=state))
    assert json.loads(done.body)["result"]["content"][0]["text"] == text


async def _thread_name() -> str:
    return threading.current_thread().name


class _Asker:
    async def __call__(self) -> Name | Elicit[Name]:
        return Elicit("Who, callable?", Name)

    async def ask(self) -> Name | Elicit[Name]:
        return Elicit("Who, method?", Name)

    async def ask_awaiting(self) -> Name | Elicit[Name]:
        await asyncio.sleep(0)
        return Elicit("Who, awaiting?", Name)


ASKER = _Asker()


def test_which_resolvers_count_as_never_suspending() -> None:
    from mcp_common import _sdk

    server = MCPServer("Kinds")

    @server.tool()
    def by_object(who: Annotated[Name, Resolve(ASKER)]) -> str:
        return who.name

    @server.tool()
    def by_method(who: Annotated[Name, Resolve(ASKER.ask)]) -> str:
        return who.name

    @server.tool()
    def by_awaiting_method(who: Annotated[Name, Resolve(ASKER.ask_awaiting)]) -> str:
        return who.name

    @server.tool()
    def chained(age: Annotated[Age, Resolve(ask_age)]) -> str:
        return str(age.years)

    @server.tool()
    def sync_resolver(text: str, ok: Annotated[Ok, Resolve(ask_ok)]) -> str:
        return text

    verdicts = {name: _sdk.resolvers_never_suspend(_sdk.get_tool(server, name)) for name in _sdk_tool_names(server)}
    assert verdicts == {
        "by_object": True,
        "by_method": True,
        "by_awaiting_method": False,
        "chained": True,
        "sync_resolver": False,
    }


def _sdk_tool_names(server: MCPServer) -> list[str]:
    from mcp_common import _sdk

    return [tool.name for tool in _sdk.registered_tools(server)]


REFUSALS = {
    "wrong-name-header": (400, -32020),
    "no-envelope": (400, -32602),
    "accepts-no-json": (406, -32600),
    "bad-input-responses": (400, -32602),
}


def _spoiled(kind: str, request: HTTPRequest) -> HTTPRequest:
    """``request`` (a retry) made into one the endpoint refuses before any tool runs."""
    body = json.loads(request.body)
    if kind == "wrong-name-header":
        request.headers["mcp-name"] = "someone_else"
    elif kind == "no-envelope":
        del body["params"]["_meta"]
    elif kind == "accepts-no-json":
        request.headers["accept"] = "text/event-stream"
    elif kind == "bad-input-responses":
        body["params"]["inputResponses"] = {key: "yes" for key in body["params"]["inputResponses"]}
    request.body = json.dumps(body).encode()
    return request


def _wsgi(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    return endpoint.handle(request)


def _asgi(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    return asyncio.run(endpoint.handle_from_other_loop(request))


@pytest.mark.parametrize("entry", [_wsgi, _asgi], ids=["wsgi", "asgi"])
@pytest.mark.parametrize("name", ["greet", "contextual"])
@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_a_refused_retry_leaves_the_handle_and_its_question_for_the_corrected_one(
    entry: Any, name: str, kind: str
) -> None:
    """A retry refused before the tool runs (transport checks, the envelope, the request's
    surface) neither spends the single-use handle nor records its answers: the client's
    corrected retry still completes, as it would against the SDK's own server."""
    store = MemoryStore()
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), store)
    asked = entry(endpoint, call(name, {}))
    state = json.loads(asked.body)["result"]["requestState"]
    responses = answers(asked, {"action": "accept", "content": {"name": "Ada"}})

    refused = entry(endpoint, _spoiled(kind, call(name, {}, inputResponses=responses, requestState=state)))
    assert (refused.status, json.loads(refused.body)["error"]["code"]) == REFUSALS[kind], refused.body
    assert [row.status for row in store._elicitations.values()] == ["pending"]

    done = entry(endpoint, call(name, {}, inputResponses=responses, requestState=state))
    assert json.loads(done.body)["result"]["content"][0]["text"] == ("Hello, Ada!" if name == "greet" else "Ada"), (
        done.body
    )
    assert [row.status for row in store._elicitations.values()] == ["accepted"]
