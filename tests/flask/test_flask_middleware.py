"""The endpoint behind the Flask extensions production apps install around every view:
Flask-Compress and Flask-Limiter, on a real socket, driven by the official client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import httpx
import pytest
from flask import Flask, Response, abort
from flask_compress import Compress
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from mcp import Client
from mcp.server import MCPServer
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, Resolve
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from werkzeug.exceptions import HTTPException

from mcp_flask import MCP
from tests.protocol.clients import modern_tools_list, timed_elicitations

LEGACY = "legacy"
MODERN = "2026-07-28"


class Holder(BaseModel):
    name: str


async def ask_name() -> Elicit[Holder]:
    return Elicit("Whose card?", Holder)


server = MCPServer("Cards")


@server.tool()
async def issue_card(holder: Annotated[ElicitationResult[Holder], Resolve(ask_name)]) -> str:
    """A question in either era: over the call's SSE stream (legacy), or as input_required."""
    if isinstance(holder, AcceptedElicitation):
        return f"Card issued to {holder.data.name}."
    return "No card issued."


def cards_app(make_app: Callable[..., Flask], fast_config: dict[str, Any], **config: Any) -> Flask:
    app = make_app(**fast_config, **config)
    MCP(app, server=server)
    return app


def test_flask_compress_leaves_the_sse_stream_alone_so_a_question_arrives_while_the_call_waits(
    make_app: Callable[..., Flask], fast_config: dict[str, Any], flask_live_server: Callable[..., Any]
) -> None:
    """Flask-Compress compresses streamed responses (``COMPRESS_STREAMS``, on by default) of the
    types in ``COMPRESS_MIMETYPES``; an app that lists ``text/event-stream`` there would have a
    legacy call's question held in the compressor until the stream ends (under WSGI, once the
    call has waited ``WAIT_DETACH_SECONDS``; under a proxy that holds it open, never). The SSE
    answer is sent uncompressed, each event as it is written; a JSON answer may still be."""
    app = cards_app(
        make_app,
        fast_config,
        MCP_WAIT_DETACH_SECONDS=5.0,
        COMPRESS_MIMETYPES=["application/json", "text/event-stream"],
        COMPRESS_MIN_SIZE=0,
    )
    Compress(app)
    url = f"{flask_live_server(app).url}/mcp"

    seen = timed_elicitations(url, "issue_card", {}, {"name": "Ada"})

    assert seen[LEGACY][1] == seen[MODERN][1] == "Card issued to Ada."
    assert seen[LEGACY][0] < 2.0, seen  # not held back for WAIT_DETACH_SECONDS
    listed = modern_tools_list(url, {"Accept-Encoding": "gzip"})
    assert (listed.headers["Content-Type"], listed.headers.get("Content-Encoding")) == ("application/json", "gzip")


def test_a_request_flask_limiter_refuses_is_answered_in_json_rpc_which_the_client_shows(
    make_app: Callable[..., Flask], fast_config: dict[str, Any], flask_live_server: Callable[..., Any]
) -> None:
    """Flask-Limiter refuses a request over its limit before any view runs, with werkzeug's
    HTML 429 page: the official client could only say "Server returned an error response".
    On an MCP URL the refusal is a JSON-RPC error, with the limiter's status and headers; the
    app's other pages keep theirs."""
    app = cards_app(make_app, fast_config, RATELIMIT_HEADERS_ENABLED=True)
    Limiter(get_remote_address, app=app, default_limits=["2 per minute"], storage_uri="memory://")
    app.add_url_rule("/page", "page", lambda: "<p>A page</p>")
    base = flask_live_server(app).url
    for _ in range(2):
        httpx.get(f"{base}/page")
        httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})

    refused = httpx.post(
        f"{base}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert refused.status_code == 429
    assert refused.headers["Content-Type"] == "application/json"
    assert "Retry-After" in refused.headers  # the limiter's own headers are kept
    error = refused.json()["error"]
    assert error["code"] == -32600 and error["message"].startswith("Too Many Requests"), error

    async def call() -> str:
        async with Client(f"{base}/mcp", mode=MODERN) as client:
            with pytest.raises(MCPError) as refusal:
                await client.call_tool("issue_card")
        return str(refusal.value)

    assert asyncio.run(asyncio.wait_for(call(), 30)) == "Too Many Requests: 2 per 1 minute"
    page = httpx.get(f"{base}/page")
    assert page.status_code == 429 and page.headers["Content-Type"].startswith("text/html")


def test_the_apps_own_error_handlers_answer_as_before(
    make_app: Callable[..., Flask], fast_config: dict[str, Any]
) -> None:
    """A ``before_request`` hook's ``abort()`` on an MCP URL is JSON-RPC too; the app's other
    pages are answered by its own handler for ``Exception`` as they were, an exception that
    carries its response (Flask-Limiter's ``on_breach``) keeps it, and an app with a handler
    of its own for ``HTTPException`` keeps it for every URL."""

    def closed() -> None:
        abort(503)

    def own(exc: Exception) -> tuple[dict[str, Any], int]:
        return {"app": "handled"}, 503

    app = make_app(**fast_config)
    app.before_request(closed)
    app.register_error_handler(Exception, own)
    MCP(app, server=server)
    with app.test_client() as client:
        refused = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 503
        assert refused.json["error"]["code"] == -32603, refused.json  # type: ignore[index]
        assert refused.json["error"]["message"].startswith("Service Unavailable")  # type: ignore[index]
        assert client.get("/elsewhere").json == {"app": "handled"}
    app.extensions["mcp"].close()

    app = make_app(**fast_config)
    app.before_request(lambda: abort(Response("Closed for lunch.", 503)))
    MCP(app, server=server)
    with app.test_client() as client:
        assert client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).text == "Closed for lunch."
    app.extensions["mcp"].close()

    app = make_app(**fast_config)
    app.before_request(closed)
    app.register_error_handler(HTTPException, own)
    MCP(app, server=server)
    with app.test_client() as client:
        assert client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).json == {"app": "handled"}
    app.extensions["mcp"].close()


def test_readmes_exemption_keeps_flask_limiters_default_limits_off_the_endpoint(
    make_app: Callable[..., Flask], fast_config: dict[str, Any]
) -> None:
    """Under WSGI a connected legacy client polls its GET stream about 40 times a minute: README
    exempts the endpoint from default limits sized for pages, by its route's view function."""
    app = make_app(**fast_config)
    limiter = Limiter(get_remote_address, app=app, default_limits=["1 per minute"], storage_uri="memory://")
    MCP(app, server=server)
    limiter.exempt(app.view_functions["mcp"])
    app.add_url_rule("/page", "page", lambda: "<p>A page</p>")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with app.test_client() as client:
        answers = [client.post("/mcp", json=ping).status_code for _ in range(3)]
        pages = [client.get("/page").status_code for _ in range(2)]
    app.extensions["mcp"].close()
    assert 429 not in answers, answers
    assert pages == [200, 429]
