"""The 2026-07-28 era: one POST, one exchange, nothing kept between requests.

The steps follow the SDK's own single-exchange entry (``mcp.server._streamable_http_modern``)
through its public building blocks: the inbound classifier, ``Connection.from_envelope`` and
``serve_one``. The answer is JSON unless the handler emits a notification (progress, opted-in
logging) before it finishes; then the response becomes an SSE stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.connection import Connection
from mcp.server.runner import modern_error_data
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    MCP_PARAM_HEADER_PREFIX,
    InboundLadderRejection,
    classify_inbound_request,
    unsupported_protocol_version_rejection,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import INVALID_REQUEST, PARSE_ERROR, JSONRPCNotification, JSONRPCRequest, RequestId
from mcp_types.methods import INPUT_REQUIRED_METHODS, validate_client_request
from pydantic import ValidationError

from mcp_common import _sdk
from mcp_common.home import keep_tools_away
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_common.jsonrpc import (
    SSE_HEADERS,
    accepts,
    dumps,
    error_body,
    error_response,
    is_json_content,
    json_response,
    method_not_allowed,
    request_cancelled,
    sse_frame,
    status_for,
)
from mcp_common.state import CompletionOutbound, handle_state_id, persist, record_refusals, redeem

if TYPE_CHECKING:
    from mcp_common.endpoint import MCPEndpoint

logger = logging.getLogger("mcp_common.modern")

_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_INVALID_BODY = "Body must be a single JSON-RPC request or notification object"


@dataclass
class ExchangeContext:
    """The SDK's ``DispatchContext`` for one 2026-07-28 exchange: no back-channel, by the spec."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: ServerMessageMetadata
    progress_token: Any = None
    sink: asyncio.Queue[bytes | None] | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = field(default=False, init=False)
    notified: bool = field(default=False, init=False)
    """A notification went out: the answer is an SSE stream, not JSON."""
    on_stream: Callable[[], None] | None = None
    """Called once, in the notifying handler's context, as its first notification turns the
    answer into an SSE stream."""

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        if self.sink is None:
            return
        if not self.notified and self.on_stream is not None:
            self.on_stream()
        self.notified = True
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.sink.put_nowait(sse_frame(dumps(message)))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


def _reply(request_id: RequestId, result: dict[str, Any] | None, exc: BaseException | None) -> dict[str, Any]:
    if exc is None:
        return {"jsonrpc": "2.0", "id": request_id, "result": result}
    error = modern_error_data(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
    return {"jsonrpc": "2.0", "id": request_id, "error": error.model_dump(mode="json", exclude_none=True)}


def _reply_status(reply: dict[str, Any]) -> int:
    return status_for(reply["error"]["code"]) if "error" in reply else 200


def admit_modern(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse | tuple[JSONRPCRequest, Any]:
    """The checks a 2026-07-28 request passes before any handler sees it: ``(request, the
    inbound classifier's verdict)``, or the refusal to answer (a notification's answer too)."""
    config = endpoint.config
    if request.method != "POST":
        return method_not_allowed(request.method, "POST")
    has_json, has_sse = accepts(request.headers)
    if not has_json or (not config.json_response and not has_sse):
        return error_response(406, INVALID_REQUEST, "Not Acceptable: Accept must list application/json")
    if not is_json_content(request.headers):
        return error_response(400, INVALID_REQUEST, "Invalid Content-Type header: expected application/json")
    try:
        decoded = request.json()
    except (ValueError, RecursionError):
        return error_response(400, PARSE_ERROR, "Parse error")
    if isinstance(decoded, dict) and "id" not in decoded:
        return _acknowledge_notification(decoded, request)
    try:
        req = JSONRPCRequest.model_validate(decoded)
    except ValidationError:
        return error_response(400, INVALID_REQUEST, _INVALID_BODY)
    if req.method == "subscriptions/listen" and not has_sse:
        return error_response(406, INVALID_REQUEST, "Not Acceptable: subscriptions/listen answers text/event-stream")

    verdict = classify_inbound_request(decoded, headers=dict(request.headers))
    if isinstance(verdict, InboundLadderRejection):
        body = error_body(verdict.code, verdict.message, req.id, verdict.data)
        return json_response(body, status_for(verdict.code, 400))
    rejection = _param_header_rejection(endpoint, req, request.headers)
    if rejection is not None:
        return json_response(error_body(rejection.code, rejection.message, req.id, rejection.data), 400)
    return req, verdict


def check_surface(method: str, version: str, params: Mapping[str, Any] | None) -> None:
    """Raise what the SDK's runner raises for a request whose params its request surface
    refuses (before any handler runs), so that a handle is not spent on a request that will
    be refused: the client's corrected retry still holds a live handle."""
    with contextlib.suppress(KeyError):  # not a spec method at this version: the runner answers
        validate_client_request(method, version, params)


async def handle_modern(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPResponse:
    admitted = admit_modern(endpoint, request)
    if isinstance(admitted, HTTPResponse):
        return admitted
    req, verdict = admitted
    config = endpoint.config
    connection = Connection.from_envelope(
        verdict.protocol_version,
        verdict.client_info,
        verdict.client_capabilities,
        outbound=CompletionOutbound(endpoint, request.owner),
    )
    dctx = ExchangeContext(
        transport=TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers),
        request_id=req.id,
        message_metadata=ServerMessageMetadata(request_context=request.native),
        progress_token=progress_token_from_params(req.params),
    )
    run = _run(endpoint, dctx, connection, req, request)
    if config.json_response and req.method != "subscriptions/listen":
        try:
            reply = _reply(req.id, await run, None)
        except Exception as exc:
            reply = _reply(req.id, None, exc)
        return json_response(reply, _reply_status(reply))

    # Run the handler beside the response: if it finishes before emitting anything the answer is
    # plain JSON with the table-mapped status; its first notification commits the response to SSE.
    sink: asyncio.Queue[bytes | None] = asyncio.Queue()
    dctx.sink = sink
    handler = req.params.get("name") if req.method == "tools/call" and req.params else None
    dctx.on_stream = functools.partial(
        endpoint.stream_started, request, handler if isinstance(handler, str) else req.method
    )
    replies: list[dict[str, Any]] = []

    async def run_handler() -> None:
        if dctx.progress_token is not None:
            # Its client wants the progress as it comes: a sync tool on the WSGI request's
            # thread would hold every frame until it returned.
            keep_tools_away()
        try:
            replies.append(_reply(req.id, await run, None))
        except Exception as exc:
            replies.append(_reply(req.id, None, exc))
        sink.put_nowait(None)

    def ended(task: asyncio.Task[None]) -> None:
        if not replies:
            # Cancelled: the client closed the stream (nobody reads this), or the endpoint
            # closed (its client hears why the stream ends, as on the legacy wire).
            run.close()  # if cancelled before it started
            replies.append(_reply(req.id, None, request_cancelled()))
            sink.put_nowait(None)

    task = asyncio.create_task(run_handler())
    task.add_done_callback(ended)
    endpoint.track(task)
    try:
        first = await sink.get()
    except asyncio.CancelledError:
        # An ASGI server cancels its view when the client closes the response: before the
        # answer began as after (_stream), the 2026-07-28 way to cancel the request.
        task.cancel()
        raise
    if first is None:
        return json_response(replies[0], _reply_status(replies[0]))
    return HTTPResponse(200, dict(SSE_HEADERS), stream=_stream(first, sink, task, replies))


async def _run(
    endpoint: MCPEndpoint,
    dctx: ExchangeContext,
    connection: Connection,
    req: JSONRPCRequest,
    request: HTTPRequest,
) -> Any:
    """``serve_one``, with the request state redeemed before and persisted after (when the
    endpoint persists states: it has the application's secret keys). A blocking (WSGI)
    request had its handle redeemed in its own thread, and has a JSON answer persisted there
    too (:func:`mcp_common.state.prepare_blocking`); only an SSE answer is persisted here."""
    params = req.params
    persisting = endpoint.persist_state and req.method in INPUT_REQUIRED_METHODS
    if persisting and not request.state_ready and params is not None and params.get("requestState") is not None:
        handle_state_id(endpoint, params)
        check_surface(req.method, connection.protocol_version, params)
        params = await redeem(endpoint, req.method, params, request.owner)
    result = await _sdk.serve_one(
        endpoint.lowlevel,
        dctx,
        req.method,
        params,
        connection=connection,
        lifespan_state=endpoint.lifespan_state,
    )
    if persisting and params is not None and params.get("requestState") is not None:
        await record_refusals(endpoint, request, params, result)
    if persisting and (not request.defer_persist or dctx.notified):
        result = await persist(endpoint, req.method, req.params, request.owner, result)
    return result


async def _stream(
    first: bytes, sink: asyncio.Queue[bytes | None], task: asyncio.Task[None], replies: list[dict[str, Any]]
) -> AsyncIterator[bytes]:
    try:
        yield first
        while (frame := await sink.get()) is not None:
            yield frame
        yield sse_frame(dumps(replies[0]))
    finally:
        # The client closing the stream is the 2026-07-28 way to cancel the request.
        if not task.done():
            task.cancel()


def _acknowledge_notification(decoded: dict[str, Any], request: HTTPRequest) -> HTTPResponse:
    try:
        JSONRPCNotification.model_validate(decoded)
    except ValidationError:
        return error_response(400, INVALID_REQUEST, _INVALID_BODY)
    requested = request.header("mcp-protocol-version", "") or ""
    rejection = unsupported_protocol_version_rejection(requested)
    if rejection is not None:
        return json_response(error_body(rejection.code, rejection.message, None, rejection.data), 400)
    return HTTPResponse(202)


def _param_header_rejection(
    endpoint: MCPEndpoint, req: JSONRPCRequest, headers: Mapping[str, str]
) -> InboundLadderRejection | None:
    """Check ``Mcp-Param-*`` headers against the called tool's ``x-mcp-header`` declarations."""
    if req.method != "tools/call":
        return None
    params = req.params or {}
    name = params.get("name")
    raw = params.get("arguments")
    if not isinstance(name, str) or (raw is not None and not isinstance(raw, Mapping)):
        return None  # arguments that are no object ([] too): the request surface refuses them
    arguments: Mapping[str, Any] = raw if raw is not None else {}
    if not arguments and not any(h.startswith(_PARAM_PREFIX) for h in headers):
        return None
    lookup = endpoint.lowlevel.get_tool_input_schema
    if lookup is None:
        return None
    try:
        schema = lookup(name)
    except Exception:
        # Header validation must never break a working call path (the SDK fails open here too).
        logger.exception("Mcp-Param header validation skipped: get_tool_input_schema raised")
        return None
    if schema is None:
        return None
    return validate_mcp_param_headers(schema, arguments, headers)
