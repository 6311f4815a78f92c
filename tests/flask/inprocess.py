"""Driving a Flask app's MCP endpoint in process, as one signed-in user, on one protocol era."""

from __future__ import annotations

import json
from typing import Any

from flask import Flask

from tests.flask.test_flask_extension import _initialize

SSE_AND_JSON = "application/json, text/event-stream"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def reply(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.get_data()
    body = response.get_data(as_text=True)
    if response.mimetype == "text/event-stream":
        return json.loads([line[6:] for line in body.splitlines() if line.startswith("data: ") and line[6:]][-1])
    return json.loads(body)


class Caller:
    """A test client of ``app`` signed in as ``who`` (by a POST to ``/login/<who>``, which the
    app provides; ``None``: anonymous) or sending ``headers`` with every request, speaking the
    ``legacy`` (a session) or ``modern`` (2026-07-28) era to the endpoint at ``url``."""

    def __init__(
        self, app: Flask, who: str | None, era: str, url: str = "/mcp", headers: dict[str, str] | None = None
    ) -> None:
        self.client = app.test_client()
        self.era = era
        self.url = url
        if who is not None:
            self.client.post(f"/login/{who}")
        self.headers = {"Accept": SSE_AND_JSON, **(headers or {})}
        if era == "legacy":
            opened = _initialize(self.client, url, **(headers or {}))
            self.headers.update(
                {"Mcp-Session-Id": opened.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
            )

    def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        extra = dict(self.headers)
        if self.era == "modern":
            params = {**params, "_meta": MODERN_META}
            extra.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method})
            if "name" in params:
                extra["Mcp-Name"] = params["name"]
        body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": params}
        return reply(self.client.post(self.url, json=body, headers=extra))

    def tools(self) -> dict[str, dict[str, Any]]:
        return {tool["name"]: tool for tool in self.send("tools/list", {})["result"]["tools"]}

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        answer = self.send("tools/call", {"name": name, "arguments": arguments})
        assert "result" in answer, answer
        return dict(answer["result"])
