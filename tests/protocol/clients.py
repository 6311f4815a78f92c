"""Client-side helpers: the seed documents' callbacks, and an official client that reaches
every worker."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
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


async def spread_session(url: str, mode: str, workers: WorkerLog, seconds: float = 30.0) -> None:
    """Keep one session busy until its requests have reached two workers.

    Which worker accepts a new connection is the kernel's choice; a worker on an idle core may
    win every race for a while (80 in a row were seen while the other core was busy with the
    parallel test process), so the session keeps calling (``tools/list``), pausing between calls
    after the first few, until a second worker has served it or ``seconds`` have passed.
    """
    session_pids = WorkerLog()
    deadline = time.monotonic() + seconds
    async with spread_client(url, mode, session_pids) as client:
        calls = 0
        while len(set(session_pids.pids)) < 2 and time.monotonic() < deadline:
            assert (await client.list_tools()).tools
            calls += 1
            if calls > 20:
                await asyncio.sleep(0.05)
    workers.pids.extend(session_pids.pids)
    served = Counter(session_pids.pids)
    assert len(served) >= 2, f"in {seconds:g} s one session's requests all reached one worker: {dict(served)}"


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
