"""``/mcp``: the MCP view (sync, or async with ``BENCH_DJANGO_ASYNC=1``); ``/bare``: a fixed answer."""

from __future__ import annotations

import os

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from mcp_django.views import AsyncMCPView, MCPView

BARE_RESULT = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"content": [{"type": "text", "text": "echo: hi"}], "isError": False},
}


@csrf_exempt
@require_POST
def bare(request: HttpRequest) -> JsonResponse:
    """What a Django view costs without MCP: the body is read, a fixed JSON-RPC result sent."""
    request.body  # noqa: B018 (read the request as the MCP view does)
    response = JsonResponse(BARE_RESULT)
    # As the MCP view does (and Flask does by itself): a length, so no chunked encoding.
    response["Content-Length"] = str(len(response.content))
    return response


@csrf_exempt
@require_POST
async def abare(request: HttpRequest) -> JsonResponse:
    """The same under ASGI: an async view (a sync one would run on a thread)."""
    request.body  # noqa: B018
    response = JsonResponse(BARE_RESULT)
    response["Content-Length"] = str(len(response.content))
    return response


ASYNC = os.environ.get("BENCH_DJANGO_ASYNC") == "1"
view = AsyncMCPView if ASYNC else MCPView

urlpatterns = [
    path("mcp", view.as_view(server="benchmarks.bench_server.mcp")),
    path("bare", abare if ASYNC else bare),
]
