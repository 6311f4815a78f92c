"""The endpoint behind the Flask extensions production apps install around every view:
Flask-Compress and Flask-Limiter, on a real socket, driven by the official client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any

import httpx
from flask import Flask
from flask_compress import Compress
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.server import MCPServer
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, Resolve
from mcp.types import ElicitRequestParams, ElicitResult, TextContent
from pydantic import BaseModel

from mcp_flask import MCP

LEGACY = "legacy"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


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


async def elicit(url: str, mode: str) -> tuple[float, str]:
    """How long after the call its question reached the client, and the call's text."""
    started = time.monotonic()
    asked: list[float] = []

    async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(time.monotonic() - started)
        return ElicitResult(action="accept", content={"name": "Ada"})

    async with Client(url, mode=mode, elicitation_callback=answer) as client:
        result = await client.call_tool("issue_card")
    first = result.content[0]
    assert isinstance(first, TextContent), result
    return asked[0], first.text


def elicit_in_both_eras(url: str) -> dict[str, tuple[float, str]]:
    async def both() -> dict[str, tuple[float, str]]:
        return {mode: await elicit(url, mode) for mode in (LEGACY, MODERN)}

    return asyncio.run(asyncio.wait_for(both(), 30))


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

    seen = elicit_in_both_eras(url)

    assert seen[LEGACY][1] == seen[MODERN][1] == "Card issued to Ada."
    assert seen[LEGACY][0] < 2.0, seen  # not held back for WAIT_DETACH_SECONDS
    listed = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}},
        headers={
            "Accept": "application/json, text/event-stream",
            "Accept-Encoding": "gzip",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/list",
        },
    )
    assert (listed.headers["Content-Type"], listed.headers.get("Content-Encoding")) == ("application/json", "gzip")
