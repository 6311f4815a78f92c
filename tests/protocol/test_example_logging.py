"""The example apps' log, as an operator reads it under gunicorn: every line once.

The SDK's ``MCPServer()`` gives the root logger a handler (``logging.basicConfig``) unless it
has one; a handler on the ``mcp_common`` logger as well printed each of its records twice."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.conftest import LiveServer

pytestmark = pytest.mark.slow

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


@pytest.mark.parametrize("framework", ["django", "flask"])
def test_a_refused_origin_is_logged_once_under_gunicorn(
    framework: str, example_server: Callable[..., LiveServer]
) -> None:
    live = example_server(framework, "gunicorn", 1, "sqlite")
    before = len(live.log())
    response = httpx.post(
        live.url(),
        json=INIT,
        headers={"Origin": "http://elsewhere.example", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 403, response.text
    # Logged before the answer was sent, by handlers that write at once: all there by now.
    lines = live.log()[before:].splitlines()
    refused = [line for line in lines if "Invalid Origin header 'http://elsewhere.example'" in line]
    assert len(refused) == 1, lines
    if framework == "django":
        # django.request's WARNING for the 403, through the same single handler.
        assert lines.count("Forbidden: /mcp") == 1, lines
