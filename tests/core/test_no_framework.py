"""mcp_common imports and serves with Django, Flask and SQLAlchemy all unavailable."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_core_works_without_any_framework() -> None:
    script = textwrap.dedent(
        """
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"django", "flask", "sqlalchemy", "flask_sqlalchemy"}:
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, Block())
        import json
        from mcp.server import MCPServer
        from mcp_common import HTTPRequest, MCPConfig, MCPEndpoint, MemoryStore

        server = MCPServer("bare")

        @server.tool()
        def add(a: int, b: int) -> int:
            return a + b

        endpoint = MCPEndpoint(server, MCPConfig(secret_keys=("s" * 40,)), MemoryStore())
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": meta}}
        response = endpoint.handle(HTTPRequest("POST", {
            "host": "localhost", "content-type": "application/json", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "add"},
            json.dumps(body).encode()))
        assert response.status == 200, response.body
        print(json.loads(response.body)["result"]["structuredContent"]["result"])
        assert not [m for m in sys.modules if m.split(".")[0] in {"django", "flask", "sqlalchemy"}]
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "5"
