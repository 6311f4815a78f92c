"""Per-tool permissions in the core: a tool the caller may not use is not there for that
request, on every path and both eras, and its refusal is the SDK's answer for a tool that does
not exist."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Elicit, Resolve
from pydantic import BaseModel

from mcp_common import HTTPRequest, HTTPResponse, MCPConfig, MCPEndpoint, MemoryStore
from mcp_common.permissions import asks_about_tools, denied_tools, protected_tools, require, tool_checks
from tests.core.test_endpoint import LEGACY, SECRET, events, initialize, legacy, modern_call, request


class Ok(BaseModel):
    ok: bool


async def ask_ok() -> Ok | Elicit[Ok]:
    return Elicit("Sure?", Ok)


def build_server() -> MCPServer:
    server = MCPServer("Guarded")

    @server.tool()
    def public() -> str:
        return "anyone"

    @server.tool()
    @require(lambda who: who == "admin")
    def secret() -> str:
        return "admins only"

    @require(lambda who: who in ("admin", "auditor"))
    @server.tool()
    async def audit(ok: Annotated[Ok, Resolve(ask_ok)]) -> str:
        return f"audited: {ok.ok}"

    return server


@pytest.fixture(scope="module")
def point() -> MCPEndpoint:
    endpoint = MCPEndpoint(build_server(), MCPConfig(secret_keys=(SECRET,)), MemoryStore())
    endpoint.handle(modern_call("public", {}))  # enters the lifespan: the fast path is on
    return endpoint


def as_user(point: MCPEndpoint, req: HTTPRequest, who: str) -> HTTPRequest:
    req.native = who
    req.denied = denied_tools(point.server, who) if asks_about_tools(req) else None
    return req


def full(point: MCPEndpoint, req: HTTPRequest) -> HTTPResponse:
    return point.runner.run(point.handle_async(req))


def asgi(point: MCPEndpoint, req: HTTPRequest) -> HTTPResponse:
    return asyncio.run(point.handle_from_other_loop(req))


def modern_list(point: MCPEndpoint, who: str) -> list[str]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    req = request("POST", body, mcp_protocol_version="2026-07-28", mcp_method="tools/list")
    response = point.handle(as_user(point, req, who))
    return [tool["name"] for tool in json.loads(response.body)["result"]["tools"]]


def legacy_messages(point: MCPEndpoint, session: str, body: dict[str, Any], who: str) -> list[dict[str, Any]]:
    response = point.handle(as_user(point, legacy(session, body), who))
    if response.stream is None:  # the legacy fast path answers a plain call with JSON
        return [json.loads(response.body)]
    return [e["data"] for e in events(point, response) if e["data"]]


def test_the_decorator_marks_the_function_above_or_below_the_tool_decorator() -> None:
    checks = protected_tools(build_server())
    assert sorted(checks) == ["audit", "secret"]
    assert checks["secret"]("admin") and not checks["secret"]("auditor")
    assert checks["audit"]("auditor") and not checks["audit"]("guest")


def test_a_call_runs_the_called_tools_check_alone_and_a_listing_runs_every_check(point: MCPEndpoint) -> None:
    def body(method: str, params: dict[str, Any]) -> HTTPRequest:
        return request("POST", {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})

    assert sorted(tool_checks(point.server, body("tools/list", {}))) == ["audit", "secret"]
    (check,) = tool_checks(point.server, body("tools/call", {"name": "secret", "arguments": {}})).values()
    assert check("admin") and not check("auditor")
    assert list(tool_checks(point.server, body("tools/call", {"name": "audit"}))) == ["audit"]
    for name in ("public", "no_such_tool", 7, None):
        assert tool_checks(point.server, body("tools/call", {"name": name})) == {}
    assert tool_checks(point.server, body("tools/call", [])) == {}
    assert tool_checks(point.server, body("resources/list", {})) == {}
    # A request that hides the tool from itself does not hide its check from the next one.
    hidden = as_user(point, modern_call("secret", {}), "guest")
    assert hidden.denied == frozenset({"secret", "audit"})
    assert list(tool_checks(point.server, hidden)) == ["secret"]


def test_a_permission_put_on_a_tool_after_the_first_call_applies_to_the_next() -> None:
    server = build_server()
    call = request("POST", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "public"}})
    assert tool_checks(server, call) == {}
    require(lambda who: who == "staff")(server._tool_manager.get_tool("public").fn)
    (check,) = tool_checks(server, call).values()
    assert check("staff") and not check("guest")


def test_a_check_that_raises_hides_its_tool_and_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    from mcp_common.permissions import run_checks

    def broken(native: Any) -> bool:
        raise AttributeError("'User' object has no attribute 'profile'")

    denied = run_checks({"lounge": broken, "stock": lambda native: True}, object())
    assert denied == frozenset({"lounge"})
    (record,) = [r for r in caplog.records if r.name == "mcp_common.permissions"]
    assert "'lounge'" in record.getMessage() and record.exc_info is not None


def test_stacked_checks_all_apply() -> None:
    fn = require(lambda who: who != "mallory")(require(lambda who: who.startswith("a"))(lambda: None))
    check = fn.__mcp_permission__  # type: ignore[attr-defined]
    assert [check(who) for who in ("admin", "amallory", "mallory", "bob")] == [True, True, False, False]


def test_tools_list_shows_each_caller_what_it_may_use(point: MCPEndpoint) -> None:
    assert modern_list(point, "admin") == ["public", "secret", "audit"]
    assert modern_list(point, "auditor") == ["public", "audit"]
    assert modern_list(point, "guest") == ["public"]
    session = initialize(point)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    for who, names in (("guest", ["public"]), ("admin", ["public", "secret", "audit"])):
        (reply,) = legacy_messages(point, session, listing, who)
        assert [tool["name"] for tool in reply["result"]["tools"]] == names


@pytest.mark.parametrize("entry", ["wsgi", "full", "asgi"])
@pytest.mark.parametrize("name", ["secret", "audit"])
def test_a_denied_call_is_answered_as_a_tool_that_does_not_exist(point: MCPEndpoint, entry: str, name: str) -> None:
    serve = {"wsgi": MCPEndpoint.handle, "full": full, "asgi": asgi}[entry]
    denied = serve(point, as_user(point, modern_call(name, {}), "guest"))
    unknown = serve(point, as_user(point, modern_call("no_such_tool", {}), "guest"))
    assert denied.status == unknown.status
    assert json.loads(denied.body) == json.loads(unknown.body.replace(b"no_such_tool", name.encode()))
    assert b"Unknown tool" in denied.body
    allowed = serve(point, as_user(point, modern_call(name, {}), "admin"))
    result = json.loads(allowed.body)["result"]
    assert result.get("resultType") == "input_required" if name == "audit" else result["content"][0]["text"]


def test_a_denied_legacy_call_is_answered_as_a_tool_that_does_not_exist(point: MCPEndpoint) -> None:
    session = initialize(point)

    def call(name: str, who: str) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": {}}}
        return legacy_messages(point, session, body, who)[-1]

    unknown = json.loads(json.dumps(call("no_such_tool", "guest")).replace("no_such_tool", "secret"))
    assert call("secret", "guest") == unknown
    assert call("secret", "admin")["result"]["content"][0]["text"] == "admins only"


def test_only_tool_requests_are_checked() -> None:
    assert asks_about_tools(modern_call("public", {}))
    assert not asks_about_tools(request("POST", {"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}))
    assert not asks_about_tools(HTTPRequest("POST", {}, b"not json"))
    assert LEGACY  # the legacy wire is covered above
