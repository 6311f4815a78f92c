"""The fast path: a 2026-07-28 ``tools/call`` answered without the SDK's per-request machinery.

The SDK's per-request entry builds a runner, a middleware chain, a telemetry span and an exit
stack for every call, re-validates the request's surface, and runs a synchronous tool on a
worker thread; served from a framework view that also costs a hop onto the event loop. For
the hot case - a plain call of a registered ``MCPServer`` tool on the stateless wire - this
module does the same work with the SDK's own pieces and nothing else:

* the SDK's inbound classifier and ``Mcp-Param`` checks, its request-surface validation, the
  tool's own argument model (``fn_metadata.validate_arguments``), result conversion
  (``fn_metadata.convert_result``), the result surface sieve and the ``serverInfo`` stamp;
* a synchronous tool runs in the thread that received the request (a WSGI worker thread is
  already a worker thread), an async one on the endpoint's loop;
* errors map exactly as ``Tool.run`` and ``MCPServer``'s handler map them.

A tool with resolvers (``Annotated[T, Resolve(fn)]``) on the 2026-07-28 wire is served here
too, when no resolver takes a ``Context``: once the call is admitted, its request-state handle
is redeemed in the request's thread (:func:`mcp_common.state.redeem_sync`), then one hop onto
the endpoint's loop runs the SDK's request-state boundary (unseal; seal an ``input_required``
answer) around the SDK's own resolver walk (``resolve_arguments``), the tool body runs where a
plain call's does, and an ``input_required`` answer is persisted in the request's thread.

Anything else takes the full path: other methods, tools taking a ``Context`` (or resolvers
that do), resolvers on the legacy era (they ask over the session's back-channel), tools
declared to return ``InputRequiredResult``, a ``requestState`` or ``inputResponses`` for a
tool without resolvers, a server with middleware or handlers of its own, an active
OpenTelemetry tracer provider, cache hints - and every request the fast path would reject
(the full path produces the exact error). ``tests/core/test_fast_path.py`` holds the two paths
to identical answers.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context as ToolContext
from mcp.server.mcpserver.resolve import returns_input_required
from mcp.server.request_state import RequestStateBoundary
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    PROTOCOL_VERSION_META_KEY,
    InboundLadderRejection,
    classify_inbound_request,
    validate_mcp_param_headers,
)
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from mcp_types.methods import serialize_server_result, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_common import _sdk
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_common.jsonrpc import JSON, accepts, dumps, is_json_content, json_response
from mcp_common.security import check_request

if TYPE_CHECKING:
    from mcp_common.endpoint import MCPEndpoint

# What the SDK logs on its full path, logged here on its loggers, with its levels and words.
_tool_logger, _runner_logger = _sdk.sdk_loggers()

SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"

_ToolError, _UnexpectedToolError, _ResourceError, _UnexpectedResourceError = _sdk.tool_error_types()


def _otel_active() -> bool:
    return _sdk.otel_active()


class FastPath:
    """Per-endpoint fast path for 2026-07-28 ``tools/call``; ``None`` answers mean "full path"."""

    def __init__(self, endpoint: MCPEndpoint) -> None:
        self.endpoint = endpoint
        server = endpoint.server
        lowlevel = endpoint.lowlevel
        self._base_enabled = _sdk.default_call_tool_handler(server) and not lowlevel.cache_hints.get("tools/call")
        self._eligible: dict[str, Any] = {}
        self._resolving: dict[str, Any] = {}
        self._inline: dict[str, Any] = {}
        """Per tool name: ``(tool, its resolvers never suspend)``, or ``False`` once a walk
        driven without a loop turned out to need one."""
        self._header_params: dict[str, bool] = {}
        self._json_keys: dict[str, frozenset[str]] = {}
        self._text_templates: dict[tuple[str, str], tuple[Any, tuple[str, ...] | None]] = {}
        """Per (tool name, protocol version): the tool's wire result for a returned ``str``, as
        JSON split around the text (``None``: that tool's text goes through the SDK's conversion)."""
        entry = lowlevel.get_request_handler("tools/call")
        self._params_type = entry.params_type if entry is not None else None
        # The serverInfo stamp, dumped once: each response is serialized at once, so sharing
        # it between responses aliases nothing a caller could mutate.
        self._server_info = lowlevel.server_info.model_dump(by_alias=True, mode="json", exclude_none=True)

    @property
    def enabled(self) -> bool:
        """Checked per request (middleware may be added after the endpoint was built).

        Middleware the fast path accounts for: the request-state boundary (inert without a
        requestState) and middleware declaring ``fast_path_safe``: the telemetry span (the fast
        path steps aside whenever a tracer provider is installed) and adapters' middleware
        (what it does around a handler, ``endpoint.tool_context()`` does around the tool).
        """
        return self._base_enabled and all(
            isinstance(m, RequestStateBoundary) or getattr(m, "fast_path_safe", False)
            for m in self.endpoint.lowlevel.middleware
        )

    # -- eligibility ---------------------------------------------------------------------------

    def _tool(self, name: str) -> Any | None:
        tool = _sdk.get_tool(self.endpoint.server, name)
        if tool is None:
            return None
        if self._eligible.get(name) is tool:
            return tool
        if tool.context_kwarg is not None or tool.resolved_params or returns_input_required(tool.fn):
            return None
        self._eligible[name] = tool
        self._learn(tool)
        return tool

    def _resolving_tool(self, name: str) -> Any | None:
        """A tool whose resolvers the fast path can walk: none of them takes a ``Context``."""
        tool = _sdk.get_tool(self.endpoint.server, name)
        if tool is None or not tool.resolved_params:
            return None
        if self._resolving.get(name) is tool:
            return tool
        if tool.context_kwarg is not None or returns_input_required(tool.fn) or _sdk.resolvers_take_context(tool):
            return None
        self._resolving[name] = tool
        self._learn(tool)
        return tool

    def _learn(self, tool: Any) -> None:
        """What is read of a tool's parameters once: whether any is sent as a header, and the
        names (and aliases) of those the SDK may pre-parse from a JSON text (not ``str``)."""
        self._header_params[tool.name] = "x-mcp-header" in json.dumps(tool.parameters)
        keys: set[str] = set()
        for field_name, field in tool.fn_metadata.arg_model.model_fields.items():
            if field.annotation is not str:
                keys.add(field_name)
                if field.alias:
                    keys.add(field.alias)
        self._json_keys[tool.name] = frozenset(keys)

    def _parse(
        self, request: HTTPRequest, resolving: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any], Any] | None:
        """``(decoded, params, tool)`` for a plain ``tools/call`` of an eligible tool (with
        ``resolving``: of a tool with resolvers, which may carry answers and state), else ``None``."""
        if not self.enabled or request.method != "POST" or _otel_active():
            return None
        started = self.endpoint._started
        if started is None or not started.done() or started.exception() is not None:
            return None  # the lifespan not entered yet (a WSGI request enters it first; ASGI: the full path)
        headers = request.headers
        if check_request(self.endpoint.config, headers, len(request.body), request.secure) is not None:
            return None
        has_json, has_sse = accepts(headers)
        if not (has_json and has_sse) or not is_json_content(headers):
            return None
        try:
            decoded = request.json()
        except (ValueError, RecursionError):
            return None
        if not isinstance(decoded, dict) or decoded.get("method") != "tools/call":
            return None
        if decoded.get("jsonrpc") != "2.0" or not _is_request_id(decoded.get("id")):
            return None  # a malformed envelope: the full path answers as the SDK does
        params = decoded.get("params")
        if not isinstance(params, dict):
            return None
        if not resolving and ("requestState" in params or "inputResponses" in params):
            return None
        name = params.get("name")
        if not isinstance(name, str) or (request.denied and name in request.denied):
            return None  # a tool this caller may not use: the full path answers "Unknown tool"
        tool = self._resolving_tool(name) if resolving else self._tool(name)
        if tool is None:
            return None
        return decoded, params, tool

    def _validate(
        self, tool: Any, version: str, params: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[dict[str, Any], Any] | None:
        """``(validated arguments, the handler's typed params)``, or ``None`` when the full path
        must answer (with its error)."""
        typed = None
        try:
            validate_client_request("tools/call", version, params)
            if self._params_type is not None:
                # The handler's own parameters, as the SDK validates them next: stricter than the
                # request surface in places (a null progressToken passes that, not this).
                typed = self._params_type.model_validate(params, by_name=False)
        except (ValidationError, ValueError, KeyError):
            return None
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, Mapping):
            return None
        checks_headers = self._header_params[tool.name] or any(h.startswith("mcp-param-") for h in headers)
        if checks_headers and validate_mcp_param_headers(tool.parameters, arguments, headers) is not None:
            return None
        metadata = tool.fn_metadata
        try:
            if type(arguments) is dict and not any(
                type(value) is str and key in self._json_keys[tool.name] for key, value in arguments.items()
            ):
                # What the SDK's ``pre_parse_json`` would change, nothing here is: a JSON text
                # given for a parameter that is not a string. Validated as the SDK does after it.
                return metadata.arg_model.model_validate(arguments).model_dump_one_level(), typed
            return metadata.validate_arguments(dict(arguments)), typed
        except Exception:
            return None  # the full path reports it, with the SDK's exact message

    def _modern(
        self, decoded: dict[str, Any], params: dict[str, Any], tool: Any, headers: Mapping[str, str]
    ) -> tuple[_Call, Any] | None:
        """A 2026-07-28 call and its envelope's raw client capabilities, when the SDK's inbound
        classifier and request surface accept it; else ``None`` (the full path answers)."""
        if headers.get("mcp-method") != "tools/call":
            return None
        verdict = classify_inbound_request(decoded, headers=headers if type(headers) is dict else dict(headers))
        if isinstance(verdict, InboundLadderRejection) or verdict.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        checked = self._validate(tool, verdict.protocol_version, params, headers)
        if checked is None:
            return None
        validated, typed = checked
        call = _Call(decoded["id"], tool, verdict.protocol_version, validated, typed=typed, params=params)
        return call, verdict.client_capabilities

    def _admit(self, request: HTTPRequest, lookup: Any = None) -> _Call | None:
        """The call to serve, or ``None`` for the full path.

        ``lookup(session_id)`` reads a legacy session (``None``: this caller cannot read the
        store from where it runs, so legacy calls take the full path).
        """
        parsed = self._parse(request)
        if parsed is None:
            return None
        decoded, params, tool = parsed
        headers = request.headers
        requested = headers.get("mcp-protocol-version")
        if requested is not None and requested not in HANDSHAKE_PROTOCOL_VERSIONS:
            modern = self._modern(decoded, params, tool, headers)
            return modern[0] if modern is not None else None
        # Legacy era: the session is read (one query), as the full path reads it.
        session_id = headers.get("mcp-session-id")
        meta = params.get("_meta")
        if lookup is None or not session_id or (isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta):
            return None
        if len(session_id) > 128 or not session_id.isascii():
            return None
        session = lookup(session_id)
        endpoint = self.endpoint
        now = time.time()
        if (
            session is None
            or session.server_name != endpoint.name
            or session.principal != request.owner
            or session.last_seen < now - endpoint.config.session_ttl
        ):
            return None
        checked = self._validate(tool, session.protocol_version, params, headers)
        if checked is None:
            return None
        if session.last_seen < now - 60:
            return None  # the full path records the activity
        return _Call(decoded["id"], tool, session.protocol_version, checked[0], session_id)

    # -- serving -------------------------------------------------------------------------------

    def handle_sync(self, request: HTTPRequest) -> HTTPResponse | None:
        """Answer from the calling (WSGI worker) thread, or ``None`` for the full path."""
        call = self._admit(request, self.endpoint.store.get_session)
        if call is None:
            return None
        from mcp_common.endpoint import current_request

        token = current_request.set(request)
        try:
            if call.tool.is_async:
                outcome = self.endpoint.run_call(self._call_async(call.tool, call.validated))
            else:
                outcome = self._call_sync(call.tool, call.validated)
        finally:
            current_request.reset(token)
        return self._respond(call, outcome)

    async def handle_async(self, request: HTTPRequest) -> HTTPResponse | None:
        """Answer from an ASGI loop (an async tool runs right there; a sync one on a thread).
        Legacy calls, which need a database read, take the full path here."""
        call = self._admit(request)
        if call is None:
            return None
        import asyncio

        from mcp_common.endpoint import current_request

        token = current_request.set(request)
        try:
            if call.tool.is_async:
                outcome = await self._call_async(call.tool, call.validated)
            else:
                outcome = await asyncio.to_thread(self._call_sync, call.tool, call.validated)
        finally:
            current_request.reset(token)
        return self._respond(call, outcome)

    # -- tools with resolvers (2026-07-28) -------------------------------------------------------

    def _admit_resolving(self, request: HTTPRequest) -> tuple[_Call, dict[str, Any], Any, Any] | None:
        """``(call, params, raw client capabilities, boundary)`` for a 2026-07-28 call of a tool
        whose resolvers the fast path can walk, else ``None``."""
        parsed = self._parse(request, resolving=True)
        if parsed is None:
            return None
        decoded, params, tool = parsed
        headers = request.headers
        requested = headers.get("mcp-protocol-version")
        if requested is None or requested in HANDSHAKE_PROTOCOL_VERSIONS:
            return None
        boundary = _sdk.request_state_boundary(self.endpoint.server)
        if boundary is None or self._params_type is None:
            return None
        modern = self._modern(decoded, params, tool, headers)
        if modern is None:
            return None
        call, capabilities = modern
        return call, params, capabilities, boundary

    async def handle_resolving_async(self, request: HTTPRequest) -> HTTPResponse | None:
        """A 2026-07-28 call of a tool with resolvers, from an ASGI loop: the handle redeemed
        and an ``input_required`` answer persisted on the endpoint's database threads, the
        walk (and an async tool body) right on this loop, a sync tool body on a thread."""
        admitted = self._admit_resolving(request)
        if admitted is None:
            return None
        import asyncio

        from mcp_common.endpoint import current_request
        from mcp_common.modern import _reply, _reply_status
        from mcp_common.state import persist_sync, record_refusals, redeem_sync

        call, params, capabilities, boundary = admitted
        endpoint = self.endpoint
        redeemed = params.get("requestState") is not None
        if redeemed:
            try:
                params = await endpoint.db(redeem_sync, endpoint, "tools/call", params, request.owner)
            except MCPError as exc:
                reply = _reply(call.request_id, None, exc)
                return json_response(reply, _reply_status(reply))
        token = current_request.set(request)
        try:
            outcome = await self._resolve(request, call, params, capabilities, boundary)
            if isinstance(outcome, _Resolved):
                outcome = await asyncio.to_thread(self._call_sync, call.tool, {**call.validated, **outcome.values})
        finally:
            current_request.reset(token)
        if isinstance(outcome, dict):
            result = await endpoint.db(persist_sync, endpoint, "tools/call", params, request.owner, outcome)
            return json_response({"jsonrpc": "2.0", "id": call.request_id, "result": result})
        if redeemed:
            await record_refusals(endpoint, request, params, outcome)
        return self._respond(call, outcome)

    def handle_resolving_sync(self, request: HTTPRequest) -> HTTPResponse | None:
        """A 2026-07-28 call of a tool with resolvers, from the calling (WSGI) thread: its
        handle redeemed once the call is admitted (a refused retry leaves it live), the walk
        and the tool body run here, an ``input_required`` answer persisted here; ``None``:
        the full path answers."""
        admitted = self._admit_resolving(request)
        if admitted is None:
            return None
        call, params, capabilities, boundary = admitted
        redeemed = params.get("requestState") is not None
        if redeemed:
            from mcp_common.modern import _reply, _reply_status
            from mcp_common.state import redeem_sync

            try:
                params = redeem_sync(self.endpoint, "tools/call", params, request.owner)
            except MCPError as exc:
                reply = _reply(call.request_id, None, exc)
                return json_response(reply, _reply_status(reply))
        tool = call.tool
        validated = call.validated
        from mcp_common.endpoint import current_request

        token = current_request.set(request)
        try:
            outcome: Any = _NEEDS_LOOP
            if self._inline.get(tool.name) is not False and self._never_suspends(tool):
                outcome = _drive(self._resolve(request, call, params, capabilities, boundary, inline=True))
                if outcome is _NEEDS_LOOP:
                    # It did need a loop after all: the walk runs again, on the loop, as for
                    # every call of this tool from now on (resolvers may re-run each round).
                    self._inline[tool.name] = False
            if outcome is _NEEDS_LOOP:
                outcome = self.endpoint.run_call(self._resolve(request, call, params, capabilities, boundary))
            if isinstance(outcome, _Resolved):
                arguments = {**validated, **outcome.values}
                if tool.is_async:
                    outcome = self.endpoint.run_call(self._call_async(tool, arguments))
                else:
                    outcome = self._call_sync(tool, arguments)
        finally:
            current_request.reset(token)
        if isinstance(outcome, dict):
            # input_required, its state sealed by the boundary: persisted here, as a handle.
            from mcp_common.state import persist_sync

            result = persist_sync(self.endpoint, "tools/call", params, request.owner, outcome)
            return json_response({"jsonrpc": "2.0", "id": call.request_id, "result": result})
        if redeemed:
            from mcp_common.state import record_refusals_sync

            record_refusals_sync(self.endpoint, request, params, outcome)
        return self._respond(call, outcome)

    def _never_suspends(self, tool: Any) -> bool:
        inline = self._inline.get(tool.name)
        if inline is None or inline[0] is not tool:
            inline = (tool, _sdk.resolvers_never_suspend(tool))
            self._inline[tool.name] = inline
        return bool(inline[1])

    async def _resolve(
        self,
        request: HTTPRequest,
        call: _Call,
        params: dict[str, Any],
        raw_capabilities: Any,
        boundary: Any,
        inline: bool = False,
    ) -> Any:
        """The request-state boundary around the SDK's resolver walk, on the endpoint's loop,
        or (``inline``) driven in the request's thread when no resolver can suspend.

        Gives the wire dict of an ``input_required`` answer (state sealed), an ``MCPError``, a
        tool-error result, :class:`_Resolved` values for the tool body (the caller runs a sync
        one in its thread; so it does an async one when ``inline``), or an async tool body's
        outcome.
        """
        from mcp_common.endpoint import current_request

        token = current_request.set(request)
        try:
            tool = call.tool
            server = self.endpoint.server
            ctx: ServerRequestContext[Any, Any] = ServerRequestContext(
                session=_EnvelopeSession(_sdk.client_capabilities(raw_capabilities)),  # type: ignore[arg-type]
                lifespan_context=self.endpoint.lifespan_state,
                protocol_version=call.version,
                method="tools/call",
                params=params,
                request_id=call.request_id,
            )

            async def walk(ctx: ServerRequestContext[Any, Any]) -> Any:
                assert self._params_type is not None
                typed = call.typed
                if typed is None or ctx.params is not call.params:
                    # A retry: the boundary put the unsealed state in the params.
                    typed = self._params_type.model_validate(ctx.params, by_name=False)
                context = ToolContext(request_context=ctx, mcp_server=server, input_params=typed)
                try:
                    async with self.endpoint.async_tool_context():
                        resolved = await _sdk.resolve_tool_arguments(tool, call.validated, context)
                except Exception as exc:
                    if inline and _wants_a_loop(exc):
                        raise _NeedsLoop from exc
                    return _Failed(exc)
                if isinstance(resolved, InputRequiredResult):
                    return self._wire_result(call.version, resolved)
                return _Resolved(resolved)

            try:
                outcome = await boundary(ctx, walk)
            except MCPError as exc:
                return exc
            if isinstance(outcome, _Failed):
                return self._failure(tool, outcome.exc)
            if isinstance(outcome, _Resolved) and tool.is_async and not inline:
                return await self._call_async(tool, {**call.validated, **outcome.values})
            return outcome
        finally:
            current_request.reset(token)

    def _call_sync(self, tool: Any, validated: dict[str, Any]) -> Any:
        try:
            # A tool's SystemExit or KeyboardInterrupt fails the call, as on the SDK's path:
            # raised on, it took a WSGI worker down with it, or answered a 500.
            with self.endpoint.tool_context(), _sdk.stops_are_failures():
                return self._convert(tool, tool.fn(**validated))
        except BaseException as exc:
            return self._failure(tool, exc)

    async def _call_async(self, tool: Any, validated: dict[str, Any]) -> Any:
        try:
            async with self.endpoint.async_tool_context():
                with _sdk.stops_are_failures():
                    return self._convert(tool, await tool.fn(**validated))
        except asyncio.CancelledError:
            # Whoever cancelled it hears it: close() (MCPEndpoint.run_call answers the call
            # "Request cancelled"), an ASGI server, an application's timeout around the view.
            raise
        except BaseException as exc:
            return self._failure(tool, exc)

    def _convert(self, tool: Any, result: Any) -> CallToolResult | MCPError | _Text:
        if type(result) is str:
            return _Text(result)  # converted in _respond, where the protocol version is known
        if inspect.isawaitable(result):
            raise TypeError("a synchronous tool returned an awaitable")
        if isinstance(result, InputRequiredResult):
            # Its requestState would need the boundary's seal: never serve it from here.
            self._eligible.pop(tool.name, None)
            raise RuntimeError("tool returned an InputRequiredResult without declaring it")
        return tool.fn_metadata.convert_result(result)

    def _failure(self, tool: Any, exc: BaseException) -> CallToolResult | MCPError:
        if isinstance(exc, MCPError):
            return exc
        if not isinstance(exc, Exception):
            raise exc
        name = tool.name
        if isinstance(exc, _UnexpectedToolError | _UnexpectedResourceError):
            wrapped: Exception = _UnexpectedToolError(f"Error executing tool {name}: {exc}")
        elif isinstance(exc, _ToolError | _ResourceError):
            wrapped = _ToolError(f"Error executing tool {name}: {exc}")
        else:
            wrapped = _UnexpectedToolError(f"Error executing tool {name}")
        wrapped.__cause__ = exc
        if isinstance(wrapped, _UnexpectedToolError):
            # The SDK's exception, the tool's as its cause: one issue in error monitoring either way.
            _tool_logger.error("Tool %r raised an unexpected exception", name, exc_info=wrapped)
        else:
            _tool_logger.info("Tool %r failed: %r", name, str(wrapped))
        return CallToolResult(content=[TextContent(type="text", text=str(wrapped))], is_error=True)

    def _respond(self, call: _Call, outcome: Any) -> HTTPResponse:
        from mcp_common.modern import _reply, _reply_status

        headers = {"Mcp-Session-Id": call.session_id} if call.session_id else None
        if isinstance(outcome, _Text):
            parts = self._text_template(call.tool, call.version)
            if parts is not None:
                result = _escaped(outcome.text).join(parts)
                out = {"Content-Type": JSON, **headers} if headers else {"Content-Type": JSON}
                request_id = call.request_id
                wire_id = str(request_id) if type(request_id) is int else dumps(request_id)
                reply = f'{{"jsonrpc":"2.0","id":{wire_id},"result":{result}}}'
                return HTTPResponse(200, out, reply.encode())
            try:
                with self.endpoint.tool_context():
                    outcome = call.tool.fn_metadata.convert_result(outcome.text)
            except Exception as exc:
                outcome = self._failure(call.tool, exc)
        if isinstance(outcome, MCPError):
            reply = _reply(call.request_id, None, outcome)
            # A legacy session answers errors with HTTP 200, as its stream would carry them.
            return json_response(reply, 200 if call.session_id else _reply_status(reply), headers=headers)
        dumped = self._wire_result(call.version, outcome)
        if isinstance(dumped, MCPError):
            reply = _reply(call.request_id, None, dumped)
            return json_response(reply, 200 if call.session_id else _reply_status(reply), headers=headers)
        return json_response({"jsonrpc": "2.0", "id": call.request_id, "result": dumped}, headers=headers)

    def _text_template(self, tool: Any, version: str) -> tuple[str, ...] | None:
        cached = self._text_templates.get((tool.name, version))
        if cached is None or cached[0] is not tool:
            cached = (tool, self._build_text_template(tool, version))
            self._text_templates[(tool.name, version)] = cached
        return cached[1]

    def _build_text_template(self, tool: Any, version: str) -> tuple[str, ...] | None:
        """The wire JSON of ``tool``'s result for a returned ``str``, split where the text goes.

        Only for a tool whose conversion cannot depend on the text: no output schema, or the
        SDK's ``{"result": str}`` wrapper with no constraint or validator on the string. The
        template is the SDK's own conversion of a probe text, and it is used only if putting a
        second probe in its place gives exactly what the SDK gives for that probe.
        """
        metadata = tool.fn_metadata
        if metadata.output_schema is not None:
            model = metadata.output_model
            field = getattr(model, "model_fields", {}).get("result") if metadata.wrap_output else None
            if field is None or field.annotation is not str or field.metadata or len(model.model_fields) != 1:
                return None
            decorators = model.__pydantic_decorators__
            if decorators.field_validators or decorators.model_validators or decorators.validators:
                return None
        wires = []
        for probe in _PROBES:
            try:
                wire = self._wire_result(version, metadata.convert_result(probe))
            except Exception:
                return None
            if isinstance(wire, MCPError):
                return None
            wires.append(dumps(wire))
        parts = tuple(wires[0].split(_escaped(_PROBES[0])))
        if len(parts) < 2 or _escaped(_PROBES[1]).join(parts) != wires[1]:
            return None
        return parts

    def _wire_result(self, version: str, outcome: Any) -> dict[str, Any] | MCPError:
        """A result model shaped for the wire as the SDK's runner shapes it: dumped, sieved by
        the version's result surface, ``resultType`` and the ``serverInfo`` stamp filled."""
        dumped = outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            dumped = serialize_server_result("tools/call", version, dumped)
        except ValidationError:
            _runner_logger.exception("handler for %r returned an invalid result", "tools/call")
            return MCPError(code=-32603, message="Handler returned an invalid result")
        if version in MODERN_PROTOCOL_VERSIONS:
            if dumped.get("resultType") is None:
                dumped["resultType"] = "complete"
            meta = dumped.get("_meta")
            if meta is None:
                dumped["_meta"] = {SERVER_INFO_META_KEY: self._server_info}
            elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
                dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self._server_info}
        return dumped


@dataclass
class _Call:
    request_id: Any
    tool: Any
    version: str
    validated: dict[str, Any]
    session_id: str | None = None
    typed: Any = None
    """The handler's typed params, validated from :attr:`params` on admission."""
    params: Any = None


class _EnvelopeSession:
    """What a resolver walk reads of the session on the 2026-07-28 wire: the capabilities the
    request's envelope declares, and no back-channel."""

    __slots__ = ("client_capabilities",)
    can_send_request = False

    def __init__(self, client_capabilities: Any) -> None:
        self.client_capabilities = client_capabilities


@dataclass
class _Text:
    """A tool's ``str`` return value, not converted yet."""

    text: str


_PROBES = ("\x00mcp-text-probe-1\x00", "\x00mcp-text-probe-2\x00")


def _escaped(text: str) -> str:
    """``text`` as it appears inside a JSON string written by :func:`~mcp_common.jsonrpc.dumps`
    (escaped throughout when it holds a lone surrogate)."""
    return dumps(text)[1:-1]


@dataclass
class _Resolved:
    values: dict[str, Any]


@dataclass
class _Failed:
    exc: Exception


class _NeedsLoop(BaseException):
    """A walk driven without an event loop reached code that needs one."""


_NEEDS_LOOP: Any = object()


def _wants_a_loop(exc: BaseException) -> bool:
    """asyncio's "no running event loop", or sniffio's "unknown async library" (anyio)."""
    if not isinstance(exc, RuntimeError):
        return False
    return "event loop" in str(exc) or type(exc).__name__ == "AsyncLibraryNotFoundError"


def _drive(coroutine: Any) -> Any:
    """Run a coroutine that should never suspend, in this thread and with no event loop; its
    result, or ``_NEEDS_LOOP`` (the coroutine closed) when it awaits something real after all."""
    try:
        while True:
            if coroutine.send(None) is not None:
                # A future to wait on: only an event loop can.
                coroutine.close()
                return _NEEDS_LOOP
            # A bare yield is ``asyncio.sleep(0)``: nothing to wait for.
    except StopIteration as stop:
        return stop.value
    except _NeedsLoop:
        return _NEEDS_LOOP


def _is_request_id(value: Any) -> bool:
    """Whether the SDK's ``RequestId`` takes ``value``: a string, or an integer that is not a
    bool (``null``, a float, ``NaN``, an object or a list is refused, as is any subclass here)."""
    return type(value) is str or type(value) is int
