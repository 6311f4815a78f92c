"""Per-tool permissions with Django users, under WSGI and ASGI, on both protocol eras: a tool
the caller may not use is neither listed nor callable, and the refusal is the SDK's answer for
a tool that does not exist."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from tests.django import inprocess

pytestmark = pytest.mark.django_db(transaction=True)


class Caller(inprocess.Caller):
    """One user's view of the guarded server at ``path``, on one protocol era."""

    def __init__(self, path: str, era: str, user: User | None) -> None:
        super().__init__("tests.django.asgi_site", path, era, user)

    def tools(self) -> list[str]:
        return [tool["name"] for tool in self.tool_list()]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.call_tool(name, arguments)


@pytest.fixture
def users() -> dict[str, User | None]:
    clerk = User.objects.create_user("clerk")
    clerk.user_permissions.add(Permission.objects.get(codename="change_user", content_type__app_label="auth"))
    return {
        "anonymous": None,
        "plain": User.objects.create_user("plain"),
        "clerk": clerk,
        "staff": User.objects.create_user("staff", is_staff=True),
        "superuser": User.objects.create_superuser("root"),
    }


OFFERED = {
    "anonymous": ["stock"],
    "plain": ["stock"],
    "clerk": ["stock", "restock"],
    "staff": ["stock", "report"],
    "superuser": ["stock", "restock", "report"],
}


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("path", ["/guarded-sync", "/guarded-async"])
def test_each_caller_is_offered_and_may_call_only_its_tools(path: str, era: str, users: dict[str, User | None]) -> None:
    """``lounge``'s check raises for everyone: it is hidden (its traceback logged), and every
    caller's other tools are served as usual, not a server error page."""
    for who, offered in OFFERED.items():
        caller = Caller(path, era, users[who])
        assert caller.tools() == offered, who
        unknown = json.dumps(caller.call("no_such_tool", {"units": 3})).replace("no_such_tool", "{name}")
        tools = (("stock", "12 teapots"), ("restock", "restocked 3"), ("report", "sales are up"), ("lounge", "welcome"))
        for name, text in tools:
            answer = caller.call(name, {"units": 3} if name == "restock" else {})
            if name in offered:
                assert answer["result"]["content"][0]["text"] == text, (who, name)
            else:
                assert json.dumps(answer) == unknown.replace("{name}", name), (who, name)


def test_a_permission_withdrawn_mid_session_takes_effect_at_once(users: dict[str, User | None]) -> None:
    clerk = users["clerk"]
    assert clerk is not None
    caller = Caller("/guarded-sync", "legacy", clerk)
    assert caller.call("restock", {"units": 1})["result"]["content"][0]["text"] == "restocked 1"
    clerk.user_permissions.clear()
    caller.user = User.objects.get(pk=clerk.pk)  # a fresh user object: Django caches permissions per object
    assert "restock" not in caller.tools()
    assert "Unknown tool: restock" in json.dumps(caller.call("restock", {"units": 1}))


def test_a_permission_decorator_used_without_its_argument_fails_the_system_check() -> None:
    """``@user_passes_test`` without its test, above ``@mcp.tool()``, took the tool for the test
    and left the tool everyone's, silently. (Below it, the SDK refuses the decorator as a tool.)"""
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(MCP={"SERVER": "tests.django.bad_server.mcp"}):
        errors = [m.msg for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E008"]
    assert len(errors) == 1, errors
    assert "tool 'payroll'" in errors[0] and "without its argument" in errors[0]
    assert not [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E008"]


def test_the_decorator_wants_permission_names() -> None:
    from mcp_django import permission_required

    with pytest.raises(TypeError, match="permission names"):
        permission_required()
    with pytest.raises(TypeError, match="permission names"):
        permission_required(lambda user: True)  # type: ignore[arg-type]


def test_a_permission_on_a_resource_or_prompt_fails_the_system_check() -> None:
    """A permission is checked for tools only: on a resource or a prompt every caller would be
    served what it guards."""
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(MCP={"SERVER": "tests.django.bad_server.mcp"}):
        errors = [m.msg for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E006"]
    assert len(errors) == 2, errors
    assert "resource 'shop://takings'" in errors[0] and "prompt 'audit'" in errors[1]
    # The example project's servers (including those routed in its URLconf) all pass.
    assert not [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E006"]


@pytest.mark.parametrize("path", ["/guarded-sync", "/guarded-async"])
@pytest.mark.parametrize("method", [["tools/list"], {"name": "tools/call"}])
def test_a_method_that_is_not_a_string_is_a_json_rpc_error(path: str, method: Any) -> None:
    """Whether a request lists or calls tools was asked with ``method in {...}``: a list or an
    object there raised ``TypeError`` in the view, and the caller got Django's HTML 500 page."""
    from django.test import Client, override_settings

    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}
    with override_settings(ROOT_URLCONF="tests.django.asgi_site"):
        response = Client(raise_request_exception=False).post(
            path, json.dumps(body), content_type="application/json", HTTP_ACCEPT="application/json, text/event-stream"
        )
    assert response["Content-Type"] == "application/json", response.content[:300]
    assert response.status_code < 500 and "error" in json.loads(response.content), response.content[:300]
