"""Driving an MCP view in process with Django's test clients, as a signed-in user, on both
protocol eras: ``MCPView`` through ``Client``, ``AsyncMCPView`` (paths ending in ``async``)
through ``AsyncClient``."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import AsyncClient, Client, override_settings

from tests.django.test_django_asgi import LEGACY_INIT

ACCEPT = "application/json, text/event-stream"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def post(urlconf: str, path: str, body: dict[str, Any], user: User | None, headers: dict[str, str]) -> Any:
    """The response to ``body`` POSTed to ``path`` of ``urlconf``; its whole body in ``.body``."""
    headers = {"Accept": ACCEPT, **headers}
    data = json.dumps(body)
    with override_settings(ROOT_URLCONF=urlconf):
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
    """One user's view of the server at ``path`` of ``urlconf``, on one protocol era."""

    def __init__(self, urlconf: str, path: str, era: str, user: User | None = None) -> None:
        self.urlconf, self.path, self.era, self.user = urlconf, path, era, user
        self.headers: dict[str, str] = {}
        if era == "legacy":
            opened = post(urlconf, path, LEGACY_INIT, user, {})
            self.headers = {"Mcp-Session-Id": opened["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}

    def send(self, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        headers = dict(self.headers)
        if self.era == "modern":
            params = {**params, "_meta": MODERN_META}
            headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method})
            if name:
                headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        return reply(post(self.urlconf, self.path, body, self.user, headers))

    def tool_list(self) -> list[dict[str, Any]]:
        return list(self.send("tools/list", {})["result"]["tools"])

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The whole JSON-RPC reply to a ``tools/call``."""
        return self.send("tools/call", {"name": name, "arguments": arguments}, name)
