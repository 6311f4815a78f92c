"""2026-07-28 ``requestState`` kept in the database behind a single-use handle.

The SDK seals ``requestState`` (AES-GCM, bound to method, tool, arguments, principal and an
expiry) and trusts any unexpired copy: the same token can be replayed, and the state exists
only on the wire. Here, after ``serve_one`` answers ``input_required``, the sealed token goes
into a row and the client receives a handle instead: ``mcp1.<row id>.<HMAC>``. When the
client retries, the handle is redeemed with one guarded ``UPDATE`` (unconsumed, unexpired,
same server, method, tool, arguments digest and principal), the sealed token is put back for
the SDK's boundary to verify as usual, and the answers in ``inputResponses`` are written to
the elicitation rows that round asked. A replayed, forged, expired or foreign handle gets the
SDK's own refusal (``-32602`` ``{"reason": "invalid_request_state"}``) and nothing runs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required

from mcp_common import _sdk
from mcp_common.elicitation import COMPLETE_METHOD, complete_in_store, new_record, outcome_of, to_url_params
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_common.jsonrpc import json_response
from mcp_common.security import check_request
from mcp_common.store import (
    ONE_STATEMENT_ANSWERS,
    REFUSED_DETAIL,
    RequestStateRecord,
    new_row_id,
    storable_key,
    storable_text,
)

if TYPE_CHECKING:
    from mcp_common.endpoint import MCPEndpoint

logger = logging.getLogger("mcp_common.state")

HANDLE_PREFIX = "mcp1."


def invalid_state(reason: str) -> MCPError:
    """The SDK boundary's frozen refusal; the real reason goes to the log only."""
    logger.warning("requestState handle rejected: %s", reason)
    return MCPError(
        code=INVALID_PARAMS, message="Invalid or expired requestState", data={"reason": "invalid_request_state"}
    )


def _mac(key: bytes, state_id: str) -> str:
    digest = hmac.new(key, state_id.encode(), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def make_handle(endpoint: MCPEndpoint, state_id: str) -> str:
    return f"{HANDLE_PREFIX}{state_id}.{_mac(endpoint.handle_keys[0], state_id)}"


def parse_handle(endpoint: MCPEndpoint, handle: str) -> str | None:
    """The row id of an authentic handle (any key of the rotation ring), else ``None``."""
    if not handle.startswith(HANDLE_PREFIX):
        return None
    state_id, _, mac = handle[len(HANDLE_PREFIX) :].partition(".")
    # ASCII only: the client wrote it, and hmac.compare_digest raises on other text.
    if len(state_id) != 32 or not (state_id.isascii() and state_id.isalnum()) or not mac or not mac.isascii():
        return None
    for key in endpoint.handle_keys:
        if hmac.compare_digest(mac, _mac(key, state_id)):
            return state_id
    return None


def _stored_identity(method: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    """:func:`~mcp_common._sdk.request_identity`, its target as the database keeps it: a
    ``resources/read`` URI is the client's text, which may hold a NUL or a lone surrogate
    (:func:`~mcp_common.store.storable_text`). The SDK still binds the sealed state to the
    exact target."""
    target, args_digest = _sdk.request_identity(method, params)
    return storable_text(target), args_digest


def handle_state_id(endpoint: MCPEndpoint, params: Mapping[str, Any]) -> str:
    """The row id ``params``' ``requestState`` handle names; raises the SDK's
    ``invalid_request_state`` error for anything but a handle this server made. No database:
    checked before the request surface, as the SDK's boundary unseals before its runner
    validates (a forged state next to malformed answers is refused as a forged state)."""
    handle = params.get("requestState")
    if not isinstance(handle, str):
        raise invalid_state("non-string requestState")
    state_id = parse_handle(endpoint, handle)
    if state_id is None:
        raise invalid_state("unknown or forged handle")
    return state_id


def redeem_sync(endpoint: MCPEndpoint, method: str, params: Mapping[str, Any], principal: str | None) -> dict[str, Any]:
    """Params with the handle swapped for its sealed state, answers recorded; raises the SDK's
    ``invalid_request_state`` error for anything but a live handle bound to this request.

    Blocking (database calls): run it in the request's thread or on the endpoint's database
    threads (:func:`redeem`).
    """
    state_id = handle_state_id(endpoint, params)
    target, args_digest = _stored_identity(method, params)
    responses = params.get("inputResponses")
    answers: dict[str, tuple[str, str | None]] = {}
    if isinstance(responses, Mapping):
        for key, response in responses.items():
            if isinstance(response, Mapping) and "action" in response:
                answers[storable_key(str(key))] = outcome_of(response)  # as new_record keeps it
    store = endpoint.store
    if len(answers) > ONE_STATEMENT_ANSWERS:
        # The client chose how many answers it sent, and a store records each answer past a
        # few in a statement of its own: only those to questions this state asked go (one read).
        asked = {row.request_key for row in store.elicitations_for_state(state_id)}
        answers = {key: answer for key, answer in answers.items() if key in asked}
    state = store.consume_request_state(
        state_id, endpoint.name, method, target, args_digest, principal, time.time(), answers
    )
    if state is None:
        raise invalid_state("replayed, expired, or bound to another request or principal")
    new_params = {**params, "requestState": state.sealed}
    if isinstance(responses, Mapping) and any(
        isinstance(r, Mapping) and r.get("action") == "accept" and r.get("content") is None for r in responses.values()
    ):
        # A URL-mode accept carries no content; the stand-in form the SDK asked wants {}.
        url_keys = {r.request_key for r in store.elicitations_for_state(state_id) if r.mode == "url"}
        new_params["inputResponses"] = {
            key: ({**r, "content": {}} if storable_key(str(key)) in url_keys and isinstance(r, Mapping) else r)
            for key, r in responses.items()
        }
    return new_params


def refused_answers(params: Mapping[str, Any] | None, result: Any) -> list[str]:
    """The keys of the accepted ``inputResponses`` the SDK refused, going by the call's error
    result (a wire dict or a ``CallToolResult``). A call that did not fail costs one lookup."""
    if isinstance(result, Mapping):
        if result.get("isError") is not True:
            return []
        texts = [c.get("text") for c in result.get("content") or () if isinstance(c, Mapping)]
    elif getattr(result, "is_error", False) is True:
        texts = [getattr(c, "text", None) for c in getattr(result, "content", None) or ()]
    else:
        return []
    responses = params.get("inputResponses") if params is not None else None
    if not isinstance(responses, Mapping):
        return []
    said = [t for t in texts if isinstance(t, str)]
    return [
        str(key)
        for key, response in responses.items()
        if isinstance(response, Mapping)
        and response.get("action") == "accept"
        and any(f"{key!r}{_sdk.RESOLVER_REFUSAL}" in text for text in said)
    ]


def record_refusals_sync(endpoint: MCPEndpoint, request: HTTPRequest, params: Any, result: Any) -> None:
    """After the SDK answered a redeemed call: the questions whose answers it refused, recorded
    as such (``cancelled``, :data:`REFUSED_DETAIL`, status and detail in one guarded update).

    Redemption records answers before the SDK's walk validates them (so a valid answer costs
    no write of its own); only a refused one costs these statements. Blocking, like
    :func:`redeem_sync`."""
    keys = {storable_key(key) for key in refused_answers(params, result)}  # as the rows keep them
    if not keys:
        return
    try:
        # The body as the client sent it: the decoded message may carry the sealed state instead.
        handle = json.loads(request.body)["params"]["requestState"]
    except (ValueError, KeyError, TypeError):
        return
    state_id = parse_handle(endpoint, handle) if isinstance(handle, str) else None
    if state_id is None:
        return
    store = endpoint.store
    now = time.time()
    for row in store.elicitations_for_state(state_id):
        if row.request_key in keys and row.status == "accepted":
            store.update_elicitation(row.id, "cancelled", now, detail=REFUSED_DETAIL, from_statuses=("accepted",))


async def record_refusals(endpoint: MCPEndpoint, request: HTTPRequest, params: Any, result: Any) -> None:
    """:func:`record_refusals_sync` on the endpoint's database threads, when there is any."""
    if refused_answers(params, result):
        await endpoint.db(record_refusals_sync, endpoint, request, params, result)


async def redeem(
    endpoint: MCPEndpoint, method: str, params: Mapping[str, Any], principal: str | None
) -> dict[str, Any]:
    """:func:`redeem_sync` on the endpoint's database threads."""
    return await endpoint.db(redeem_sync, endpoint, method, params, principal)


def persist_sync(
    endpoint: MCPEndpoint, method: str, params: Mapping[str, Any] | None, principal: str | None, result: Any
) -> Any:
    """Swap an ``input_required`` result's sealed state for a handle; record its elicitations.
    Blocking, like :func:`redeem_sync`."""
    if not is_input_required(result) or not isinstance(result, Mapping):
        return result
    sealed = result.get("requestState")
    requests = result.get("inputRequests")
    if not isinstance(sealed, str) and not requests:
        return result
    endpoint.before_sending("an input_required result")
    state_id = new_row_id()
    now = time.time()
    expires = now + endpoint.config.request_state_ttl
    target, args_digest = _stored_identity(method, params)
    out = dict(result)
    rows = []
    if isinstance(requests, Mapping):
        rewritten: dict[str, Any] = {}
        for key, request in requests.items():
            if isinstance(request, Mapping) and request.get("method") == "elicitation/create":
                url_params = to_url_params(request.get("params"))
                asked = url_params if url_params is not None else request.get("params") or {}
                if url_params is not None:
                    # The row keeps the elicitationId (completion finds it by that); the
                    # 2026-07-28 URL request has no such field.
                    wire_params = {k: v for k, v in url_params.items() if k != "elicitationId"}
                    request = {**request, "params": wire_params}
                rows.append(
                    new_record(
                        server_name=endpoint.name,
                        tool=target if method == "tools/call" else None,
                        params=asked,
                        request_key=str(key),
                        principal=principal,
                        expires=expires,
                        state_id=state_id if isinstance(sealed, str) else None,
                    )
                )
            rewritten[key] = request
        out["inputRequests"] = rewritten
    if isinstance(sealed, str):
        record = RequestStateRecord(
            state_id=state_id,
            server_name=endpoint.name,
            method=method,
            target=target,
            args_digest=args_digest,
            principal=principal,
            sealed=sealed,
            created=now,
            expires=expires,
        )
        endpoint.store.save_request_state(record, rows)
        out["requestState"] = make_handle(endpoint, state_id)
    elif rows:
        # Questions with no state to come back to (a hand-built result): recorded all the same.
        done = RequestStateRecord(
            state_id, endpoint.name, method, target, args_digest, principal, "", now, expires, now
        )
        endpoint.store.save_request_state(done, rows)
    return out


async def persist(
    endpoint: MCPEndpoint, method: str, params: Mapping[str, Any] | None, principal: str | None, result: Any
) -> Any:
    """:func:`persist_sync` on the endpoint's database threads (only when there is something to
    persist: a call that asks nothing writes nothing and hops nowhere)."""
    if not is_input_required(result):
        return result
    return await endpoint.db(persist_sync, endpoint, method, params, principal, result)


# -- WSGI: the database work in the request's own thread --------------------------------------


def prepare_blocking(endpoint: MCPEndpoint, request: HTTPRequest) -> HTTPRequest | HTTPResponse:
    """Before a blocking (WSGI) 2026-07-28 request hops onto the event loop: redeem its handle
    here, in the request's thread, and mark the request so the loop side neither redeems it
    again nor persists a JSON answer (:func:`finish_blocking` does, here too).

    A handle is single-use, so it is redeemed only for a request nothing will refuse before
    its handler runs: one the transport checks, the envelope or the request's surface refuse
    is answered (or left to the loop side to answer) with the handle still live, and the
    client's corrected retry goes through.
    """
    try:
        decoded = request.json()
    except (ValueError, RecursionError):
        return request
    if not isinstance(decoded, dict) or "id" not in decoded:
        return request
    method = decoded.get("method")
    # A list or an object is no method (and no set can look one up): the loop side refuses it.
    if not isinstance(method, str) or method not in INPUT_REQUIRED_METHODS:
        return request
    params = decoded.get("params")
    if not isinstance(params, dict):
        return request
    if params.get("requestState") is None:
        return replace(request, state_ready=True, defer_persist=True, parsed=decoded)
    if check_request(endpoint.config, request.headers, len(request.body), request.secure) is not None:
        return request  # the loop side refuses it
    from mcp_common.modern import admit_modern, check_surface

    admitted = admit_modern(endpoint, request)
    if isinstance(admitted, HTTPResponse):
        return admitted
    try:
        handle_state_id(endpoint, params)
        check_surface(decoded["method"], admitted[1].protocol_version, params)
    except Exception:
        return request  # the loop side raises it again, before redeeming, as the SDK answers it
    try:
        new_params = redeem_sync(endpoint, decoded["method"], params, request.owner)
    except MCPError as exc:
        from mcp_common.modern import _reply, _reply_status

        reply = _reply(decoded["id"], None, exc)
        return json_response(reply, _reply_status(reply))
    # The steps after this one read the decoded message (``request.json()``), never the body
    # again: the body stays as the client sent it (its size is what the limit is about).
    return replace(request, state_ready=True, defer_persist=True, parsed={**decoded, "params": new_params})


def finish_blocking(endpoint: MCPEndpoint, request: HTTPRequest, response: HTTPResponse) -> HTTPResponse:
    """After the loop answered a request :func:`prepare_blocking` marked: persist an
    ``input_required`` JSON answer here (an SSE one was persisted on the loop)."""
    if response.stream is not None or b'"input_required"' not in response.body:
        return response
    reply = json.loads(response.body)
    result = reply.get("result")
    if not is_input_required(result):
        return response
    decoded = request.json()
    reply["result"] = persist_sync(endpoint, decoded["method"], decoded.get("params"), request.owner, result)
    return json_response(reply, response.status, headers=response.headers)


class CompletionOutbound:
    """The 2026-07-28 connection's outbound: no channel, except that
    ``notifications/elicitation/complete`` marks the elicitation rows completed (a legacy session
    that asked hears it on its GET stream; the 2026-07-28 wire has no such notification). Only
    the rows the calling principal asked of this server move, as for a legacy session."""

    def __init__(self, endpoint: MCPEndpoint, principal: str | None = None) -> None:
        self.endpoint = endpoint
        self.principal = principal

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> dict[str, Any]:
        from mcp.shared.exceptions import NoBackChannelError

        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        if method == COMPLETE_METHOD and params:
            elicitation_id = str(params.get("elicitationId", ""))
            endpoint = self.endpoint
            moved, _ = await endpoint.db(
                complete_in_store, endpoint.store, elicitation_id, endpoint.name, self.principal
            )
            for row in moved:
                if row.session_id:
                    self.endpoint.wake_streams(row.session_id)
