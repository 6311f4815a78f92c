"""Per-tool permissions with Django users, under WSGI and ASGI, on both protocol eras: a tool
the caller may not use is neither listed nor callable, and the refusal is the SDK's answer for
a tool that does not exist."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.test import AsyncClient, Client, override_settings

from tests.django.test_django_asgi import LEGACY_INIT

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = "application/json, text/event-stream"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def post(path: str, body: dict[str, Any], user: User | None, headers: dict[str, str]) -> Any:
    headers = {"Accept": ACCEPT, **headers}
    data = json.dumps(body)
    with override_settings(ROOT_URLCONF="tests.django.asgi_site"):
        if path.endswith("async"):

            async def send() -> Any:
                client = AsyncClient()
                if user is not None:
                    await client.aforce_login(user)
                response = await client.post(path, data, content_type="application/json", headers=headers)
                streaming = response.streaming
                response.body = (
                    b"".join([c async for c in response.streaming_content]) if streaming else response.content
                )
                return response

            return async_to_sync(send)()
        client = Client()
        if user is not None:
            client.force_login(user)
        response = client.post(path, data, content_type="application/json", headers=headers)
        response.body = b"".join(response.streaming_content) if response.streaming else response.content
        return response


def reply(response: Any) -> dict[str, Any]:
    """The JSON-RPC reply, from a JSON body or the last event of an SSE one."""
    assert response.status_code == 200, response.body
    if response["Content-Type"].startswith("text/event-stream"):
        data = [line[6:] for line in response.body.decode().splitlines() if line.startswith("data: ") and line[6:]]
        return json.loads(data[-1])
    return json.loads(response.body)


class Caller:
    """One user's view of the guarded server at ``path``, on one protocol era."""

    def __init__(self, path: str, era: str, user: User | None) -> None:
        self.path, self.era, self.user = path, era, user
        self.headers: dict[str, str] = {}
        if era == "legacy":
            opened = post(path, LEGACY_INIT, user, {})
            self.headers = {"Mcp-Session-Id": opened["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}

    def send(self, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        headers = dict(self.headers)
        if self.era == "modern":
            params = {**params, "_meta": MODERN_META}
            headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method})
            if name:
                headers["Mcp-Name"] = name
        return reply(
            post(self.path, {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, self.user, headers)
        )

    def tools(self) -> list[str]:
        return [tool["name"] for tool in self.send("tools/list", {})["result"]["tools"]]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.send("tools/call", {"name": name, "arguments": arguments}, name)


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
    for who, offered in OFFERED.items():
        caller = Caller(path, era, users[who])
        assert caller.tools() == offered, who
        unknown = json.dumps(caller.call("no_such_tool", {"units": 3})).replace("no_such_tool", "{name}")
        for name, text in (("stock", "12 teapots"), ("restock", "restocked 3"), ("report", "sales are up")):
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


def test_the_decorator_wants_permission_names() -> None:
    from mcp_django import permission_required

    with pytest.raises(TypeError, match="permission names"):
        permission_required()
    with pytest.raises(TypeError, match="permission names"):
        permission_required(lambda user: True)  # type: ignore[arg-type]
