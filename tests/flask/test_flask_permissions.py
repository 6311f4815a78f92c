"""Per-tool permissions in Flask, with Flask-Login users, on both protocol eras: a tool the
caller may not use is neither listed nor callable, and the refusal is the SDK's answer for a
tool that does not exist."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from flask import Flask
from flask_login import LoginManager, current_user, login_user
from mcp.server import MCPServer

from mcp_flask import MCP, permission_required
from tests.flask.inprocess import Caller


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


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize(("who", "offered"), [(None, ["stock"]), ("ann", ["stock"]), ("admin", ["stock", "report"])])
def test_each_caller_is_offered_and_may_call_only_its_tools(
    app: Flask, era: str, who: str | None, offered: list[str]
) -> None:
    send = Caller(app, who, era).send
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


def test_a_permission_on_a_resource_or_prompt_is_refused_at_start_up(make_app: Callable[..., Flask]) -> None:
    """A permission is checked for tools only: on a resource or a prompt every caller would be
    served what it guards, so the app does not start with one."""
    server = build_server()
    admin_only = permission_required(lambda: current_user.is_authenticated and current_user.is_admin)

    @server.resource("shop://takings")
    @admin_only
    def takings() -> str:
        return "152.15 EUR"

    @admin_only
    @server.resource("shop://tills/{till}")
    def till(till: str) -> str:
        return f"till {till}: 20.00 EUR"

    @server.prompt()
    @admin_only
    def audit() -> str:
        return "Audit the takings."

    with pytest.raises(TypeError) as refused:
        MCP(make_app(), server=server)
    message = str(refused.value)
    for what in ("resource 'shop://takings'", "resource template 'shop://tills/{till}'", "prompt 'audit'"):
        assert what in message, message
    assert "report" not in message
