"""Per-tool permissions in Flask, with Flask-Login users, on both protocol eras: a tool the
caller may not use is neither listed nor callable, and the refusal is the SDK's answer for a
tool that does not exist."""

from __future__ import annotations

import json
import logging
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


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_broken_check_is_logged_once_per_request_that_needs_it(
    make_app: Callable[..., Flask], era: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Checks that raise (``current_user.profile`` for an anonymous caller) deny, and say so
    in one ERROR for the request that ran them; a call of another tool runs none of them (each
    request ran every tool's check, and logged each broken one, whatever it asked for)."""
    server = build_server()
    vip_only = permission_required(lambda: current_user.profile.vip)

    @server.tool()
    @vip_only
    def lounge() -> str:
        return "welcome"

    @server.tool()
    @vip_only
    def champagne() -> str:
        return "cheers"

    app = make_app()
    LoginManager(app).user_loader(User)
    MCP(app, server=server)
    MCP.migrate(app)
    send = Caller(app, None, era).send

    def errors() -> list[logging.LogRecord]:
        found = [r for r in caplog.records if r.levelno >= logging.ERROR]
        caplog.clear()
        return found

    errors()
    assert [tool["name"] for tool in send("tools/list", {})["result"]["tools"]] == ["stock"]
    (listed,) = errors()
    assert listed.name == "mcp_common.permissions" and listed.exc_info is not None
    assert "'lounge'" in listed.getMessage() and "'champagne'" in listed.getMessage()
    assert send("tools/call", {"name": "stock", "arguments": {}})["result"]["content"][0]["text"] == "12 teapots"
    assert errors() == []
    refused = send("tools/call", {"name": "lounge", "arguments": {}})
    assert "Unknown tool" in json.dumps(refused) and "Traceback" not in json.dumps(refused)
    (called,) = errors()
    assert "'lounge'" in called.getMessage() and "'champagne'" not in called.getMessage()


def test_the_check_must_be_callable() -> None:
    with pytest.raises(TypeError, match="takes a check"):
        permission_required("admin")  # type: ignore[arg-type]


def test_a_permission_decorator_used_without_its_check_is_refused_at_start_up(make_app: Callable[..., Flask]) -> None:
    """``@permission_required`` without its check, above ``@mcp.tool()``, took the tool for the
    check and left the tool everyone's, silently. (Below it, the SDK refuses the decorator as a tool.)"""
    server = build_server()

    @permission_required  # type: ignore[arg-type]
    @server.tool()
    def payroll() -> str:
        return "everyone's salaries"

    with pytest.raises(TypeError, match=r"tool 'payroll'.*without its argument"):
        MCP(make_app(), server=server)


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
