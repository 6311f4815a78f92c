"""Client-side helpers: the seed documents' callbacks, and an official client that reaches
every worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)
from pydantic import FileUrl

MODES = ["legacy", "2026-07-28"]


class Recorder:
    """Elicitation callback answering from a script, recording what it was asked."""

    def __init__(self, *answers: ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        if isinstance(params, ElicitRequestURLParams):
            return ElicitResult(action="accept")
        return self.answers.pop(0) if self.answers else ElicitResult(action="cancel")


async def sampling(context: ClientRequestContext, params: CreateMessageRequestParams) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text="The answer is 42."), model="my-llm"
    )


async def roots(context: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri=FileUrl("file:///home/ada/notebooks"), name="notebooks")])


class WorkerLog:
    """Which server process answered each HTTP request (the example apps' test header)."""

    def __init__(self) -> None:
        self.pids: list[str] = []

    async def __call__(self, response: httpx2.Response) -> None:
        pid = response.headers.get("x-example-worker")
        if pid:
            self.pids.append(pid)


@asynccontextmanager
async def spread_client(url: str, mode: str, workers: WorkerLog, **callbacks: Any) -> AsyncIterator[Client]:
    """An official ``mcp.Client`` that opens a new connection for every request.

    With keep-alive a client talks to one worker for its whole life; without it, each request
    is accepted by whichever worker process takes it, as behind a load balancer without
    sticky sessions.
    """
    http = httpx2.AsyncClient(
        limits=httpx2.Limits(max_keepalive_connections=0),
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"response": [workers]},
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, **callbacks) as client:
        yield client


def timed_elicitations(url: str, tool: str, arguments: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    """``tool`` called with the official client in each era (``MODES``), its question answered
    with ``content``: per era, how many seconds after the call the question reached the client
    (``None``: never asked) and the text of the call's result."""

    async def one(mode: str) -> tuple[float | None, str]:
        started = time.monotonic()
        asked: list[float] = []

        async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            asked.append(time.monotonic() - started)
            return ElicitResult(action="accept", content=content)

        async with Client(url, mode=mode, elicitation_callback=answer) as client:
            result = await client.call_tool(tool, arguments)
        first = result.content[0]
        assert isinstance(first, TextContent), result
        return (asked[0] if asked else None), first.text

    async def every() -> dict[str, Any]:
        return {mode: await one(mode) for mode in MODES}

    return asyncio.run(asyncio.wait_for(every(), 30))


def modern_tools_list(url: str, headers: dict[str, str]) -> httpx.Response:
    """A 2026-07-28 ``tools/list`` POSTed to ``url``, with ``headers`` besides the era's own."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    return httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}},
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/list",
            **headers,
        },
    )
