"""Per-tool permissions in Flask, with Flask-Login users, on both protocol eras: a tool the
caller may not use is neither listed nor callable, and the refusal is the SDK's answer for a
tool that does not exist."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask_login import LoginManager, current_user, login_user
from mcp.server import MCPServer

from mcp_flask import MCP, permission_required
from tests.flask.test_flask_extension import _initialize

SSE_AND_JSON = "application/json, text/event-stream"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class User:
    is_authenticated = is_active = True
    is_anonymous = False

    def __init__(self, user_id: str) -> None:
        self.id = user_id
        self.is_admin = user_id == "admin"

    def get_id(self) -> str:
        return self.id


def build_server() -> MCPServer:
    server = MCPServer("Guarded Flask shop")

    @server.tool()
    def stock() -> str:
        return "12 teapots"

    @server.tool()
    @permission_required(lambda: current_user.is_authenticated and current_user.is_admin)
    def report() -> str:
        return "sales are up"

    return server


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    app = make_app()
    LoginManager(app).user_loader(User)
    app.add_url_rule("/login/<user_id>", "login", lambda user_id: str(login_user(User(user_id))), methods=["POST"])
    MCP(app, server=build_server())
    MCP.migrate(app)
    return app


def reply(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.get_data()
    body = response.get_data(as_text=True)
    if response.mimetype == "text/event-stream":
        return json.loads([line[6:] for line in body.splitlines() if line.startswith("data: ") and line[6:]][-1])
    return json.loads(body)


def caller(app: Flask, who: str | None, era: str) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    client = app.test_client()
    if who is not None:
        client.post(f"/login/{who}")
    headers = {"Accept": SSE_AND_JSON}
    if era == "legacy":
        opened = _initialize(client)
        headers.update({"Mcp-Session-Id": opened.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"})

    def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
        extra = dict(headers)
        if era == "modern":
            params = {**params, "_meta": MODERN_META}
            extra.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method})
            if "name" in params:
                extra["Mcp-Name"] = params["name"]
        body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": params}
        return reply(client.post("/mcp", json=body, headers=extra))

    return send


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize(("who", "offered"), [(None, ["stock"]), ("ann", ["stock"]), ("admin", ["stock", "report"])])
def test_each_caller_is_offered_and_may_call_only_its_tools(
    app: Flask, era: str, who: str | None, offered: list[str]
) -> None:
    send = caller(app, who, era)
    assert [tool["name"] for tool in send("tools/list", {})["result"]["tools"]] == offered
    report = send("tools/call", {"name": "report", "arguments": {}})
    if "report" in offered:
        assert report["result"]["content"][0]["text"] == "sales are up"
    else:
        unknown = send("tools/call", {"name": "no_such_tool", "arguments": {}})
        assert json.dumps(report) == json.dumps(unknown).replace("no_such_tool", "report")


def test_the_check_must_be_callable() -> None:
    with pytest.raises(TypeError, match="takes a check"):
        permission_required("admin")  # type: ignore[arg-type]
