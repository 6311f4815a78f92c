"""The fast path answers exactly what the SDK's full path answers, for every kind of call it
takes, and steps aside for everything else."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import AfterValidator, BaseModel, Field

from mcp_common import HTTPRequest, HTTPResponse, MCPConfig, MCPEndpoint, MemoryStore
from mcp_common import fast as fast_module
from tests.core.test_endpoint import SECRET, events, initialize, legacy, modern_call


class Point(BaseModel):
    x: int
    y: int


def build_server() -> MCPServer:
    server = MCPServer("Fast")

    @server.tool()
    def add(a: int, b: int = 2) -> int:
        """Sync, structured int."""
        return a + b

    @server.tool()
    async def shout(text: str) -> str:
        return text.upper()

    @server.tool()
    def point(x: int) -> Point:
        return Point(x=x, y=-x)

    @server.tool()
    def many(n: int) -> list[str]:
        return [str(i) for i in range(n)]

    @server.tool()
    def as_dict(key: str) -> dict[str, Any]:
        return {key: [1, 2]}

    @server.tool()
    def nothing() -> None:
        return None

    @server.tool()
    def refuses(reason: str) -> str:
        raise ToolError(f"no: {reason}")

    @server.tool()
    def crashes() -> str:
        raise ValueError("secret internals")

    @server.tool()
    async def protocol_error() -> str:
        raise MCPError(code=-32602, message="bad thing", data={"why": "because"})

    @server.tool()
    def region(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return f"region {region}"

    @server.tool()
    async def with_context(ctx: Context) -> str:
        return f"request {ctx.request_id}"

    @server.tool()
    def total(items: list[int], scale: int = 1) -> int:
        """The SDK pre-parses a JSON text given for a list (some clients send one)."""
        return sum(items) * scale

    @server.tool()
    def norm(p: Point, label: str = "") -> str:
        return f"{label}{abs(p.x) + abs(p.y)}"

    @server.tool(structured_output=False)
    def text_only(text: str) -> str:
        return text

    @server.tool()
    def short(text: str) -> Annotated[str, Field(max_length=5)]:
        return text

    @server.tool()
    def medium(text: str) -> Annotated[str, Field(max_length=50)]:
        return text

    @server.tool()
    def upper(text: str) -> Annotated[str, AfterValidator(str.upper)]:
        return text

    @server.tool()
    def text_or_number(text: str) -> Any:
        return int(text) if text.isdigit() else text

    return server


CASES = [
    ("add", {"a": 1}),
    ("add", {"a": 1, "b": 5}),
    ("add", {"a": "seven"}),
    ("add", {}),
    ("shout", {"text": "hi"}),
    ("point", {"x": 3}),
    ("many", {"n": 3}),
    ("as_dict", {"key": "k"}),
    ("nothing", {}),
    ("refuses", {"reason": "because"}),
    ("crashes", {}),
    ("protocol_error", {}),
    ("region", {"region": "eu"}),
    ("with_context", {}),
    ("no_such_tool", {}),
]
FAST = {"add", "shout", "point", "many", "as_dict", "nothing", "refuses", "crashes", "protocol_error", "region"}
FAST |= {"text_only", "short", "medium", "upper", "text_or_number"}
CASES += [(name, {"text": "hi"}) for name in ("text_only", "short", "upper", "text_or_number")]
CASES += [("short", {"text": "longer than five"}), ("text_or_number", {"text": "42"})]
CASES += [
    ("total", {"items": [1, 2, 3]}),
    ("total", {"items": "[1, 2, 3]", "scale": "2"}),
    ("total", {"items": "not json"}),
    ("norm", {"p": {"x": 1, "y": -2}, "label": "[1]"}),
    ("norm", {"p": '{"x": 3, "y": 4}', "label": "{}"}),
]
FAST |= {"total", "norm"}
INVALID = [("add", {"a": "seven"}), ("add", {}), ("total", {"items": "not json"})]
"""Calls the fast path leaves to the full path, which answers with the SDK's exact error."""


@pytest.fixture(scope="module")
def point() -> MCPEndpoint:
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    # The first request enters the server's lifespan (the fast path needs it entered).
    endpoint.handle(modern_call("add", {"a": 0}))
    return endpoint


def full_path(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    return endpoint.runner.run(endpoint.handle_async(request))


def body(response: HTTPResponse) -> Any:
    return json.loads(response.body)


@pytest.mark.parametrize(("name", "arguments"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_fast_and_full_paths_answer_alike(point: MCPEndpoint, name: str, arguments: dict[str, Any]) -> None:
    request = modern_call(name, arguments)
    if name == "region":
        request.headers["mcp-param-region"] = "eu"
    fast = point.fast.handle_sync(request)
    valid_call = name in FAST and (name, arguments) not in INVALID
    if valid_call:
        assert fast is not None, "the fast path should have taken this call"
    else:
        assert fast is None, "the fast path must leave this call to the full path"
        fast = point.handle(request)
    full = full_path(point, request)
    assert (fast.status, body(fast)) == (full.status, body(full))


FAILURES = [("crashes", {}), ("refuses", {"reason": "because"}), ("short", {"text": "longer than five"})]


@pytest.mark.parametrize(("name", "arguments"), FAILURES, ids=[name for name, _ in FAILURES])
def test_fast_and_full_paths_log_a_tool_failure_alike(
    point: MCPEndpoint, name: str, arguments: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A failed call is logged once, as the SDK logs it (its logger, level and message; the
    traceback of an unexpected one), whichever path served it: an operator who routes the
    SDK's logger to error monitoring, or raises its level, sees every tool crash or none, not
    those of the calls the fast path happened to take."""
    logged = []
    for serve in (point.fast.handle_sync, lambda request: full_path(point, request)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mcp"):
            assert serve(modern_call(name, arguments)) is not None
        logged.append([(r.name, r.levelname, r.getMessage(), _raised(r.exc_info)) for r in caplog.records])
    fast, full = logged
    assert fast == full
    assert len(full) == 1 and full[0][1] == ("ERROR" if name != "refuses" else "INFO"), full


def _raised(exc_info: Any) -> tuple[str, ...]:
    """The types of a logged exception and of its causes (what error monitoring groups by)."""
    exc, types = exc_info[1] if exc_info else None, []
    while exc is not None:
        types.append(type(exc).__name__)
        exc = exc.__cause__
    return tuple(types)


TEXTS = [
    "",
    "hi",
    'a "quoted" back\\slash /slash',
    "line\nbreak\ttab\r\x01\x1f\x7f",
    "héllo ünïcode 漢字 🎉 \u2028\u2029",
    "</script><!--",
    "\x00mcp-text-probe-1\x00",
    "x" * 20_000,
    "lone \ud800 surrogate, then é",  # JSON may carry it; UTF-8 cannot: it must come back escaped
]


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
@pytest.mark.parametrize("name", ["shout", "text_only", "short", "medium", "upper", "text_or_number"])
def test_returned_text_answers_as_the_sdk_converts_it(
    point: MCPEndpoint, session: str, name: str, version: str
) -> None:
    """A returned ``str`` is written into the tool's result template, which exists only for
    tools whose conversion cannot depend on the text; every answer equals the SDK's own."""
    tool = point.fast._tool(name)
    template = point.fast._text_template(tool, version)
    assert (template is not None) == (name in ("shout", "text_only", "text_or_number"))
    for index, text in enumerate(TEXTS):
        if version == "2026-07-28":
            fast = point.fast.handle_sync(modern_call(name, {"text": text}))
            full = full_path(point, modern_call(name, {"text": text}))
            assert fast is not None and (fast.status, body(fast)) == (full.status, body(full)), text[:40]
        else:
            message = {"jsonrpc": "2.0", "id": index, "method": "tools/call"}
            message["params"] = {"name": name, "arguments": {"text": text}}
            fast = point.fast.handle_sync(legacy(session, message))
            streamed = full_path(point, legacy(session, message))
            (final,) = [e["data"] for e in events(point, streamed) if e["data"] and "id" in e["data"]]
            assert fast is not None and body(fast) == final, text[:40]
        result = body(fast)["result"]
        if name == "shout":
            assert result["content"] == [{"type": "text", "text": text.upper()}]
        elif (name == "short" and len(text) > 5) or (name == "medium" and len(text) > 50):
            assert result["isError"] is True
        elif name == "upper":
            assert result["structuredContent"] == {"result": text.upper()}
        elif name == "text_only":
            assert "structuredContent" not in result and result["content"][0]["text"] == text


def test_the_text_template_follows_a_replaced_tool(point: MCPEndpoint) -> None:
    server = build_server()
    endpoint = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("add", {"a": 0}))
    assert body(endpoint.handle(modern_call("shout", {"text": "a"})))["result"]["structuredContent"] == {"result": "A"}
    server.remove_tool("shout")

    @server.tool(name="shout")
    def shout_short(text: str) -> Annotated[str, Field(max_length=2)]:
        return text.upper()

    assert endpoint.fast.handle_sync(modern_call("shout", {"text": "abc"})) is not None
    result = body(endpoint.handle(modern_call("shout", {"text": "abc"})))["result"]
    assert result["isError"] is True  # the new tool's constraint holds: no stale template
    assert body(endpoint.handle(modern_call("shout", {"text": "ab"})))["result"]["structuredContent"] == {
        "result": "AB"
    }


def test_mismatched_param_header_goes_to_the_full_path_and_is_refused(point: MCPEndpoint) -> None:
    request = modern_call("region", {"region": "eu"})
    request.headers["mcp-param-region"] = "us"
    assert point.fast.handle_sync(request) is None
    assert point.handle(request).status == 400


@pytest.mark.parametrize("arguments", [[], ""], ids=["empty-list", "empty-string"])
def test_arguments_that_are_no_object_are_refused_as_params_not_as_a_header_mismatch(
    point: MCPEndpoint, arguments: Any
) -> None:
    """The SDK checks ``Mcp-Param-*`` headers only against an arguments object (or none): an
    empty list is invalid params (-32602), as a non-empty one is, not a header mismatch."""
    request = modern_call("region", {})
    message = json.loads(request.body)
    message["params"]["arguments"] = arguments
    request.body = json.dumps(message).encode()
    request.headers["mcp-param-region"] = "eu"
    answer = point.handle(request)
    assert answer.status == 400 and body(answer)["error"]["code"] == -32602, body(answer)


def test_crash_text_stays_on_the_server(point: MCPEndpoint) -> None:
    result = body(point.handle(modern_call("crashes", {})))["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "Error executing tool crashes"


def test_requests_the_fast_path_leaves_alone(point: MCPEndpoint) -> None:
    with_state = modern_call("add", {"a": 1}, requestState="x")
    assert point.fast.handle_sync(with_state) is None
    legacy = modern_call("add", {"a": 1})
    legacy.headers["mcp-protocol-version"] = "2025-11-25"
    assert point.fast.handle_sync(legacy) is None
    foreign_host = modern_call("add", {"a": 1})
    foreign_host.headers["host"] = "evil.example"
    assert point.fast.handle_sync(foreign_host) is None
    assert point.handle(foreign_host).status == 421


def test_active_telemetry_sends_everything_to_the_full_path(
    point: MCPEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fast_module, "_otel_active", lambda: True)
    assert point.fast.handle_sync(modern_call("add", {"a": 1})) is None
    assert body(point.handle(modern_call("add", {"a": 1})))["result"]["structuredContent"] == {"result": 3}


def test_servers_with_their_own_middleware_are_not_fast() -> None:
    server = build_server()

    async def audit(ctx: Any, call_next: Any) -> Any:
        return await call_next(ctx)

    from mcp_common import _sdk

    _sdk.lowlevel_server(server).middleware.append(audit)
    endpoint = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    assert endpoint.fast.enabled is False
    assert body(endpoint.handle(modern_call("add", {"a": 4})))["result"]["structuredContent"] == {"result": 6}


def test_a_removed_tool_is_not_served_from_the_cache() -> None:
    server = build_server()
    endpoint = MCPEndpoint(server, MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("add", {"a": 0}))
    assert endpoint.fast.handle_sync(modern_call("shout", {"text": "a"})) is not None
    server.remove_tool("shout")
    assert endpoint.fast.handle_sync(modern_call("shout", {"text": "a"})) is None


@pytest.fixture(scope="module")
def session(point: MCPEndpoint) -> str:
    return initialize(point, {"elicitation": {}})


@pytest.mark.parametrize(("name", "arguments"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_legacy_fast_and_full_paths_answer_alike(
    point: MCPEndpoint, session: str, name: str, arguments: dict[str, Any]
) -> None:
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    request = legacy(session, message)
    if name == "region":
        request.headers["mcp-param-region"] = "eu"
    fast = point.fast.handle_sync(request)
    full = full_path(point, legacy(session, message))
    assert full.status == 200
    (final,) = [e["data"] for e in events(point, full) if e["data"] and "id" in e["data"]]
    valid_call = name in FAST and (name, arguments) not in INVALID
    if not valid_call:
        assert fast is None
        return
    assert fast is not None and fast.status == 200
    assert fast.headers["Mcp-Session-Id"] == session
    assert body(fast) == final


def test_legacy_fast_path_checks_the_session(point: MCPEndpoint, session: str) -> None:
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1}}}
    assert point.fast.handle_sync(legacy("no-such-session", message)) is None
    assert point.handle(legacy("no-such-session", message)).status == 404
    stolen = legacy(session, message)
    stolen.principal = "someone-else"
    assert point.fast.handle_sync(stolen) is None
    assert point.handle(stolen).status == 404
    # The 2026 envelope on a legacy session is refused by the full path, not served fast.
    enveloped = {**message, "params": {**message["params"], "_meta": {"io.modelcontextprotocol/protocolVersion": "x"}}}
    assert point.fast.handle_sync(legacy(session, enveloped)) is None


BAD_ENVELOPES = {
    "null-id": {"id": None},
    "float-id": {"id": 1.5},
    "object-id": {"id": {"a": 1}},
    "list-id": {"id": [1]},
    "bool-id": {"id": True},
    "nan-id": {"id": float("nan")},  # written NaN by json.dumps: JSON texts carry it, json.loads reads it
    "infinite-id": {"id": float("-inf")},
    "jsonrpc-1.0": {"jsonrpc": "1.0"},
    "jsonrpc-number": {"jsonrpc": 2.0},
}


@pytest.mark.parametrize("envelope", BAD_ENVELOPES.values(), ids=list(BAD_ENVELOPES))
def test_a_malformed_envelope_is_refused_by_both_paths(point: MCPEndpoint, envelope: dict[str, Any]) -> None:
    """The SDK's ``JSONRPCRequest`` refuses these: no tool runs, no bad id is echoed."""
    request = modern_call("add", {"a": 1})
    request.body = json.dumps({**json.loads(request.body), **envelope}).encode()
    assert point.fast.handle_sync(request) is None
    answer, full = point.handle(request), full_path(point, request)
    assert (answer.status, body(answer)) == (full.status, body(full))
    assert answer.status == 400
    assert body(answer)["id"] is None and body(answer)["error"]["code"] == -32600


@pytest.mark.parametrize("envelope", BAD_ENVELOPES.values(), ids=list(BAD_ENVELOPES))
def test_a_malformed_legacy_envelope_goes_to_the_full_path(
    point: MCPEndpoint, session: str, envelope: dict[str, Any]
) -> None:
    """An id the SDK refuses makes the message a notification there (202, nothing runs); a
    wrong JSON-RPC version makes it no message at all."""
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1}}}
    message.update(envelope)
    assert point.fast.handle_sync(legacy(session, message)) is None
    answer = point.handle(legacy(session, message))
    if "jsonrpc" in envelope:
        assert (answer.status, body(answer)["error"]["code"]) == (400, -32600)
    else:
        assert (answer.status, answer.body) == (202, b"")


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_params_the_sdks_handler_refuses_go_to_the_full_path(point: MCPEndpoint, session: str, era: str) -> None:
    """``progressToken: null`` passes the SDK's request-surface check, but not the tools/call
    handler's own parameters (a token is a string or an integer): the SDK answers -32602 and
    runs nothing, so the fast path must not run the tool either."""
    if era == "modern":
        request = modern_call("add", {"a": 1})
        message = json.loads(request.body)
        message["params"]["_meta"]["progressToken"] = None
        request.body = json.dumps(message).encode()
    else:
        params = {"name": "add", "arguments": {"a": 1}, "_meta": {"progressToken": None}}
        request = legacy(session, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
    assert point.fast.handle_sync(request) is None
    answer = point.handle(request)
    reply = body(answer) if answer.stream is None else [e["data"] for e in events(point, answer) if e["data"]][-1]
    assert reply["error"]["code"] == -32602, reply
    assert answer.status == (400 if era == "modern" else 200)
