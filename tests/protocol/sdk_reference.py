"""The seed documents' servers served by the SDK itself, as the reference the project is held to.

    python -m tests.protocol.sdk_reference PORT

Each example server's own ``streamable_http_app()`` on uvicorn, under the same paths as the
example apps (``/mcp/files``, ``/mcp/bistro``, ``/mcp/library``, ``/mcp/conformance``). No
``MCPEndpoint`` is built in this process, so none of the project's hooks is installed into the
SDK: it runs exactly as it ships.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from example_project.servers import bistro, conformance, files, library

SERVERS = {
    "/mcp/conformance": conformance.mcp,
    "/mcp/files": files.mcp,
    "/mcp/bistro": bistro.mcp,
    "/mcp/library": library.mcp,
}


def build() -> Starlette:
    apps = [server.streamable_http_app(streamable_http_path=path) for path, server in SERVERS.items()]

    @asynccontextmanager
    async def lifespan(parent: Starlette) -> AsyncIterator[None]:
        # Each app's lifespan runs its session manager; the parent runs them all.
        async with AsyncExitStack() as stack:
            for app in apps:
                await stack.enter_async_context(app.router.lifespan_context(app))
            yield

    async def ready(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ready")

    routes = [Route("/", ready), *(route for app in apps for route in app.routes)]
    return Starlette(routes=routes, lifespan=lifespan)


if __name__ == "__main__":
    uvicorn.run(build(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
