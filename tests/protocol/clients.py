"""Client-side helpers: the seed documents' callbacks, and an official client that reaches
every worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

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
