"""The legacy era (protocol versions up to 2025-11-25): sessions kept in the database.

The SDK serves a legacy session from one long-lived in-memory loop per session, which ties
the session to one process. Here every HTTP request is served on its own by whichever worker
receives it: the session's facts (negotiated version, client capabilities, principal) come
from the store, each request runs through ``serve_one`` on a ``Connection`` rebuilt from them,
and everything that must outlive the request goes through the store:

* a server-to-client request (``elicitation/create``, ``sampling/createMessage``,
  ``roots/list``) is written to the event log and as a pending row; the client's answer (a POST
  that may reach any worker) fills the row and wakes the waiting tool - at once in the same
  process, after a short poll in another;
* SSE events get ids from the event log, so a stream closed by the server or lost with the
  client can be resumed on any worker with ``Last-Event-ID``;
* notifications for the standalone stream (``notifications/elicitation/complete``,
  ``list_changed``) are queued in the log and delivered by whichever worker holds the
  session's GET stream, or on the next one it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.connection import Connection
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp.types import jsonrpc_message_adapter
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    ErrorData,
    InitializeRequestParams,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from mcp_types.version import LATEST_HANDSHAKE_VERSION, is_version_at_least
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from mcp_common import _sdk
from mcp_common.elicitation import (
    COMPLETE_METHOD,
    complete_in_store,
    fill_url_accept,
    new_record,
    note_answer,
    outcome_of,
    owner_alive,
    to_url_params,
    worker_id,
)
from mcp_common.home import holding_home, keep_tools_away
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
)
from mcp_common.outage import Outage
from mcp_common.store import GET_STREAM, MAX_CALL_ID, SessionRecord, storable, storable_text

if TYPE_CHECKING:
    from mcp_common.endpoint import MCPEndpoint

logger = logging.getLogger("mcp_common.legacy")

SESSION_HEADER = "mcp-session-id"
LAST_EVENT_ID_HEADER = "last-event-id"

# Requests that can never need the back-channel are answered as plain JSON: cheaper, and no
# stream to resume. Everything else (tools/call above all) gets an SSE stream.
JSON_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
        "logging/setLevel",
        "completion/complete",
        "resources/subscribe",
        "resources/unsubscribe",
    }
)


WORKER_LOST = (
    "The server process running this tool call stopped while it waited for the client; "
    "the call did not complete (any answer given is kept on the elicitation record)"
)


CALL_LOST = "The server process running this call stopped before it finished; the call did not complete"

OWNER_METHOD = "mcp/callOwner"
"""The ``method`` of a call stream's owner row (see :meth:`CallStream.note_owner`); never sent."""


def owner_key(stream_key: str) -> str:
    """The request id of a call stream's owner row: no request sent to a client has it (theirs
    start with ``srv-``), so no client's answer can claim the row."""
    return f"owner-{stream_key}"


CANCEL_METHOD = "mcp/callCancelled"
"""The ``method`` of a cancellation mark (see :func:`cancel_mark`); never sent."""

_CANCEL_MARK = "cancel-"


def cancel_mark(call_id: RequestId) -> str:
    """The start of the request id of a pending row that marks the session's call ``call_id``
    cancelled, written by the worker that received ``notifications/cancelled`` for a call that
    does not run there. The call's worker reads the marks as it notes its owner row
    (:meth:`LegacyProtocol._cancelled_before_noted`): a cancellation that arrived before the
    row existed, which no worker could answer, still ends the call. A digest of the id (as
    JSON, up to 255 characters) to fit the 64-character column; each mark adds a random tail,
    so a cancellation sent twice writes two rows instead of failing on the first one's key.
    An MCP client never reuses a request id within a session, so a mark never ends another
    call."""
    return _CANCEL_MARK + hashlib.blake2b(dumps(call_id).encode(), digest_size=16).hexdigest()


CALL_CANCELLED = "mcpCallCancelled"
"""Set in the answer recorded for a question whose call the client cancelled (never sent)."""


class SessionGone(Exception):
    """The session ended (DELETE, expiry) while something waited on it."""


_KEY_RANDOM = 24
_KEY_TIME = 11
_KEY_ID_ROOM = 64 - len(owner_key("")) - _KEY_RANDOM - _KEY_TIME - 1
_STRING_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{_KEY_ID_ROOM}}}")


def new_stream_key(call_id: RequestId | None, note_after: float) -> tuple[str, bool]:
    """A call stream's key, and whether it carries the call's JSON-RPC id.

    Random, then the time by which the call notes its worker (its start plus ``note_after``,
    this worker's ``wait_detach_seconds``; milliseconds, hex), then the call's id when it is
    short enough (``i<integer>`` or ``s<string>``; the owner row's request id must still fit
    its 64-character column). A resuming worker reads both back when no row says which
    worker ran the call (:meth:`LegacyProtocol._end_if_orphaned`): the time is the running
    worker's, since the resuming one may be configured otherwise. The client sees the key in
    its event ids and may forge one, but only for its own session, where nothing is written
    for it.
    """
    noted_by = int(min((time.time() + note_after) * 1000, 16**_KEY_TIME - 1))  # a huge detach time: never
    key = f"{uuid.uuid4().hex[:_KEY_RANDOM]}{noted_by:0{_KEY_TIME}x}"
    if isinstance(call_id, int) and not isinstance(call_id, bool) and len(str(call_id)) <= _KEY_ID_ROOM:
        return f"{key}i{call_id}", True
    if isinstance(call_id, str) and _STRING_ID.fullmatch(call_id):
        return f"{key}s{call_id}", True
    return key, False


def stream_origin(stream_key: str) -> tuple[float, RequestId] | None:
    """By when the call of a key from :func:`new_stream_key` was to note its worker (epoch
    seconds), and its id; ``None`` for any other key."""
    head = _KEY_RANDOM + _KEY_TIME
    stamp, marker, rest = stream_key[_KEY_RANDOM:head], stream_key[head : head + 1], stream_key[head + 1 :]
    if len(stamp) != _KEY_TIME or not rest or any(c not in "0123456789abcdef" for c in stream_key[:head]):
        return None
    if marker == "i" and re.fullmatch(r"-?[0-9]+", rest) and len(rest) <= _KEY_ID_ROOM:
        return int(stamp, 16) / 1000, int(rest)
    if marker == "s" and _STRING_ID.fullmatch(rest):
        return int(stamp, 16) / 1000, rest
    return None


def _event_id(stream_key: str, number: int) -> str:
    return f"{stream_key}.{number}"


def parse_event_id(value: str) -> tuple[str, int] | None:
    stream_key, _, number = value.rpartition(".")
    # ASCII digits only (``isdigit`` alone takes "²", which ``int`` refuses), and few enough
    # for the event log's 64-bit id column.
    if not stream_key or not number.isascii() or not number.isdigit() or len(number) > 18:
        return None
    return stream_key, int(number)


class CallStream:
    """The SSE response of one request in a legacy session.

    Events go straight to the client while it is attached. Everything except a quick call's
    final response is also written to the session's event log, so that the stream can be
    resumed on any worker after the server closes it (``close_sse_stream``) or the client
    loses it.
    """

    def __init__(
        self,
        endpoint: MCPEndpoint,
        session: SessionRecord,
        priming: bool,
        blocking: bool = False,
        call_id: RequestId | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.session = session
        self.stream_key, self.key_carries_call = new_stream_key(call_id, endpoint.config.wait_detach_seconds)
        """The key, and whether it carries the call's id; without it the call notes its worker
        as soon as it starts (see :meth:`note_owner`)."""
        self.call_id = call_id
        self.priming = priming
        self.detach_on_wait = blocking and priming
        """End the HTTP response when the call starts waiting for the client (see
        ``MCPConfig.wait_retry_ms``)."""
        self._last_event: int | None = None
        self.attached = True
        self.persisted = False
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._owner_noted: asyncio.Task[None] | None = None
        self.on_owner_noted: Callable[[], None] | None = None
        """Called once the owner row is in the store (see :meth:`note_owner`)."""
        self._ended = False
        """The final response was sent (or the stream aborted): no owner row is due any more."""

    async def note_owner(self) -> None:
        """Record, once, which worker runs this call and its JSON-RPC id.

        A client that lost the stream resumes it on any worker; if the worker running the call
        died meanwhile, nothing would ever end the stream. The row lets the resuming worker see
        that (:meth:`LegacyProtocol._end_if_orphaned`) and end the call with an error, and its
        answer column is the claim that lets one worker do so. Written before the stream's first
        logged event other than the final response, or once the call has run for
        ``wait_detach_seconds``: a quick call that sends nothing but its answer writes nothing
        more than before. Once it is written, the call reads whether it was cancelled, or its
        session deleted, through another worker before the row existed
        (:meth:`LegacyProtocol._cancelled_before_noted`).
        """
        if self._owner_noted is None:
            params = dumps({"owner": worker_id(), "callId": self.call_id})
            store = self.endpoint.store
            write = self.endpoint.db(
                store.create_pending, self.session.session_id, owner_key(self.stream_key), OWNER_METHOD, params
            )
            self._owner_noted = asyncio.ensure_future(write)
        noting = self._owner_noted
        try:
            # Shielded: a send cancelled while the row is written must not cancel the write
            # that the stream's other sends wait for.
            await asyncio.shield(noting)
        except Exception:
            if self._owner_noted is noting:
                self._owner_noted = None  # the next send tries again
            raise
        if self.on_owner_noted is not None:
            self.on_owner_noted()
            self.on_owner_noted = None

    def note_owner_later(self) -> None:
        """The call outlived ``wait_detach_seconds`` (or its key cannot carry its id): note its
        owner in a task of its own."""
        if self._owner_noted is None:
            self.endpoint.track(asyncio.ensure_future(self._note_owner_until_noted()))

    async def _note_owner_until_noted(self) -> None:
        # Tried again after a failure, until the call ends: without the row, a resuming worker
        # takes the live call for one whose worker died once its key's time has passed.
        # One outage for all of the endpoint's calls: logged when it starts and when it ends.
        outage = self.endpoint.legacy.owner_outage
        while not self._ended:
            try:
                await self.note_owner()
            except Exception:
                outage.failed()
            else:
                outage.succeeded()
                return
            await asyncio.sleep(min(1.0, self.endpoint.config.heartbeat_interval))

    async def forget_owner(self) -> None:
        """The call answered (its final response is logged): its owner row has served."""
        if self._owner_noted is not None:
            with contextlib.suppress(Exception):
                await self._owner_noted
                await self.endpoint.db(
                    self.endpoint.store.delete_pending, self.session.session_id, owner_key(self.stream_key)
                )

    async def send(self, message: Mapping[str, Any], *, final: bool = False) -> None:
        data = dumps(message)
        self._ended = self._ended or final
        if final and self.attached and not self.persisted and not self.priming:
            # Nothing was logged for this stream and no event id was sent (a priming event
            # carries one), so a client that resumes it cannot exist.
            self._queue.put_nowait(sse_frame(data))
            self._queue.put_nowait(None)
            return
        if not final and (self._owner_noted is None or not self._owner_noted.done()):
            await self.note_owner()
        event_id = await self.endpoint.db(
            self.endpoint.store.append_event, self.session.session_id, self.stream_key, data, final
        )
        self.persisted = True
        self._last_event = event_id
        self.endpoint.wake_streams(self.session.session_id)
        if self.attached:
            self._queue.put_nowait(sse_frame(data, _event_id(self.stream_key, event_id)))
            if final:
                self._queue.put_nowait(None)

    def abort(self, message: Mapping[str, Any]) -> None:
        """End an attached response with ``message``, which is not logged (the log failed)."""
        self._ended = True
        if self.attached:
            self.attached = False
            self._queue.put_nowait(sse_frame(dumps(message)))
            self._queue.put_nowait(None)

    def detach_now(self, retry_ms: int) -> None:
        """End the HTTP response with a ``retry:`` hint: the call goes on; the client resumes it
        from the event log after ``retry_ms``."""
        self.persisted = True
        if self.attached:
            self.attached = False
            if self._last_event is not None:
                self._queue.put_nowait(sse_frame("", _event_id(self.stream_key, self._last_event), retry_ms))
            self._queue.put_nowait(None)

    async def close(self) -> None:
        """End the HTTP response now; the client resumes with ``Last-Event-ID``."""
        self.persisted = True
        if self.attached:
            self.attached = False
            self._queue.put_nowait(None)

    async def body(self) -> AsyncIterator[bytes]:
        try:
            if self.priming:
                yield sse_frame("", _event_id(self.stream_key, 0), self.endpoint.config.sse_retry_ms)
            while (frame := await self._queue.get()) is not None:
                yield frame
        finally:
            if self.attached:
                # The client went away mid-call: from now on every event goes to the log only.
                self.attached = False
                self.persisted = True


@dataclass
class SessionContext:
    """The SDK's ``DispatchContext`` for one request of a legacy session."""

    endpoint: MCPEndpoint
    session: SessionRecord
    request_id: RequestId | None
    transport: TransportContext
    message_metadata: ServerMessageMetadata
    stream: CallStream | None = None
    progress_token: Any = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    tool: str | None = None

    @property
    def can_send_request(self) -> bool:
        return self.stream is not None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if self.stream is None:
            raise NoBackChannelError(method)
        timeout = (opts or {}).get("timeout")
        return await self.endpoint.legacy.request_client(
            self.session, self.stream, method, params, timeout, tool=self.tool, call_id=self.request_id
        )

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        self.endpoint.before_sending(method)
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        if method == COMPLETE_METHOD:
            await self.endpoint.legacy.complete(self.session, message)
        elif self.stream is not None:
            await self.stream.send(message)
        else:
            await self.endpoint.legacy.post_to_get_stream(self.session.session_id, message)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


@dataclass
class SessionChannel:
    """The connection's standalone channel: the session's GET stream, through the event log."""

    endpoint: MCPEndpoint
    session: SessionRecord

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        timeout = (opts or {}).get("timeout")
        return await self.endpoint.legacy.request_client(self.session, None, method, params, timeout)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        self.endpoint.before_sending(method)
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        if method == COMPLETE_METHOD:
            await self.endpoint.legacy.complete(self.session, message)
        else:
            await self.endpoint.legacy.post_to_get_stream(self.session.session_id, message)


class _NullChannel:
    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        return None


class Waiters:
    """In-process fast path: futures of tools waiting for a client's answer, and stream wakers."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], asyncio.Future[str]] = {}
        self._stream_events: dict[str, asyncio.Event] = {}
        self._calls: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._ended: dict[str, None] = {}
        """Sessions recently ended here (insertion-ordered, bounded)."""

    def expect(self, session_id: str, request_id: str) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._answers[(session_id, request_id)] = future
        return future

    def forget(self, session_id: str, request_id: str) -> None:
        future = self._answers.pop((session_id, request_id), None)
        if future is not None and future.done() and not future.cancelled():
            # Read, so that asyncio does not log "Future exception was never retrieved" when
            # the session ended (SessionGone) as its call was cancelled before it awaited.
            future.exception()

    def answer(self, session_id: str, request_id: str, response: str) -> None:
        future = self._answers.get((session_id, request_id))
        if future is not None and not future.done():
            future.set_result(response)

    def fail(self, session_id: str, request_id: str, exc: BaseException) -> None:
        future = self._answers.get((session_id, request_id))
        if future is not None and not future.done():
            future.set_exception(exc)

    def has_ended(self, session_id: str) -> bool:
        return session_id in self._ended

    def note_ended(self, session_id: str) -> None:
        """Remember that the session ended (nothing more is logged for its calls)."""
        self._ended[session_id] = None
        while len(self._ended) > 1024:
            del self._ended[next(iter(self._ended))]

    def end_session(self, session_id: str) -> None:
        self.note_ended(session_id)
        for (sid, _), future in list(self._answers.items()):
            if sid == session_id and not future.done():
                future.set_exception(SessionGone(session_id))
        for (sid, _), task in list(self._calls.items()):
            if sid == session_id:
                task.cancel()
        self.wake(session_id)

    def stream_event(self, session_id: str) -> asyncio.Event:
        return self._stream_events.setdefault(session_id, asyncio.Event())

    def wake(self, session_id: str) -> None:
        event = self._stream_events.pop(session_id, None)
        if event is not None:
            event.set()

    def add_call(self, session_id: str, request_id: RequestId, task: asyncio.Task[Any]) -> None:
        key = (session_id, str(request_id))
        self._calls[key] = task
        task.add_done_callback(lambda _t: self._calls.pop(key, None))

    def cancel_call(self, session_id: str, request_id: RequestId) -> bool:
        """Cancel the call if it runs here; whether it does."""
        task = self._calls.get((session_id, str(request_id)))
        if task is not None:
            task.cancel()
        return task is not None


ANSWER_CLOCK_SKEW = 30.0
"""Each poll for answers looks this far back before the previous one started: an answer is
stamped by the clock of the worker that received it, which may run behind this one's."""

MAX_POLL_INTERVAL = 1.0


class AnswerPoller:
    """One poll loop per process for the tools waiting on an answer that another worker may
    receive.

    An answer that reaches this process wakes its tool at once. One that reaches another
    worker is found here by one ``answered_since`` query per round, however many tools wait,
    and a batched existence check notices sessions ended elsewhere (their pending rows go with
    them). Being one query for all, a round can be short: a fifth of ``poll_interval`` after a
    question is asked (a client program answers within milliseconds), growing with the age of
    the newest question to a second (a human takes seconds).
    """

    def __init__(self, protocol: LegacyProtocol) -> None:
        self.protocol = protocol
        self._keys: dict[tuple[str, str], None] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kick = asyncio.Event()
        self._last_added = 0.0
        self._sleeping = 0.0
        # Kept across the poll loops a process starts and ends as questions come and go.
        self._outage = Outage(logger, "Polling for answers from other workers")

    def add(self, session_id: str, request_id: str, *, prompt: bool = True) -> None:
        """Poll for this answer; ``prompt=False``: at the pace older questions set (at most
        :data:`MAX_POLL_INTERVAL`), as for a running call's owner row, whose answer (a
        cancellation from another worker) is rare and need not come within milliseconds."""
        self._keys[(session_id, request_id)] = None
        if prompt:
            self._last_added = time.monotonic()
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop, self._kick = loop, asyncio.Event()
            # In a context of its own: it polls for every call of the process, none of them
            # the one whose request happened to start it (whose home thread it must not use).
            self._task = loop.create_task(self._run(), name="mcp-answer-poller", context=contextvars.Context())
        elif prompt and self._sleeping > self.protocol.endpoint.config.poll_interval / 2:
            # Backed off while older questions waited: a fresh one is polled for promptly.
            self._kick.set()

    def discard(self, session_id: str, request_id: str) -> None:
        self._keys.pop((session_id, request_id), None)

    async def _run(self) -> None:
        endpoint = self.protocol.endpoint
        waiters = self.protocol.waiters
        base = endpoint.config.poll_interval / 5
        since = time.time() - ANSWER_CLOCK_SKEW
        next_check = time.monotonic() + base
        while self._keys:
            self._sleeping = min(max((time.monotonic() - self._last_added) * 0.5, base), MAX_POLL_INTERVAL)
            self._kick.clear()
            try:
                await asyncio.wait_for(self._kick.wait(), self._sleeping)
                continue  # woken for a fresh question: sleep the short interval instead
            except TimeoutError:
                pass
            finally:
                self._sleeping = 0.0
            if not self._keys:
                break
            started = time.time()
            try:
                for session_id, request_id, response in await endpoint.db(endpoint.store.answered_since, since):
                    waiters.answer(session_id, request_id, response)
                since = started - ANSWER_CLOCK_SKEW
                if time.monotonic() >= next_check:
                    keys = list(self._keys)
                    existing = await endpoint.db(endpoint.store.pending_keys, [key[0] for key in keys])
                    for key in keys:
                        if key not in existing and key in self._keys:
                            # Ended through another worker: its calls end here as they do in
                            # the worker that received the DELETE.
                            waiters.end_session(key[0])
                    # 10,000 waiting questions: one existence sweep every 11 s.
                    next_check = time.monotonic() + min(MAX_POLL_INTERVAL + len(keys) / 1000, 30.0)
                self._outage.succeeded()
            except RuntimeError as exc:
                if "after shutdown" in str(exc):
                    return  # the process is exiting: its database threads are gone
                self._outage.failed()
            except Exception:
                self._outage.failed()


def _client_params_json(params: InitializeRequestParams) -> str | None:
    """What a session keeps of its client's ``initialize``, as JSON that reads back; ``None``
    when it would not: nested deeper than pydantic writes (255 levels) or reads back (200)
    JSON, which the SDK's own transport refuses as it parses the message. Kept, each later
    request of the session would fail reading it."""
    try:
        text = params.model_dump_json(by_alias=True, exclude_none=True)
    except PydanticSerializationError:
        # A lone surrogate in the client's text (its name, a capability), which JSON may carry
        # and UTF-8 cannot: kept as U+FFFD, which every database holds and pydantic reads.
        try:
            value = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        except ValueError:  # nested too deeply to write
            return None
        text = storable_text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    try:
        InitializeRequestParams.model_validate_json(text, by_name=False)  # as _connection reads it
    except ValidationError:
        return None
    return text


class LegacyProtocol:
    """Serves the legacy era for one :class:`~mcp_common.endpoint.MCPEndpoint`."""

    def __init__(self, endpoint: MCPEndpoint) -> None:
        self.endpoint = endpoint
        self.waiters = Waiters()
        self.poller = AnswerPoller(self)
        self.owner_outage = Outage(logger, "Recording which worker runs a call")
        """The failures of the running calls' writes of their owner rows (one outage for all)."""
        self.stream_outage = Outage(logger, "Reading a session's events for its SSE stream")
        """The failures of the streams' reads of the event log (one outage for all); each
        stream that fails ends, and its client resumes it."""

    # -- entry -------------------------------------------------------------------------------

    async def handle(self, request: HTTPRequest) -> HTTPResponse:
        if request.method == "POST":
            return await self._post(request)
        if request.method == "GET":
            return await self._get(request)
        if request.method == "DELETE":
            return await self._delete(request)
        return method_not_allowed(request.method, "GET, POST, DELETE")

    async def _session(self, request: HTTPRequest) -> SessionRecord | HTTPResponse:
        session_id = request.header(SESSION_HEADER)
        if not session_id:
            return error_response(400, INVALID_REQUEST, "Bad Request: Missing session ID")
        if len(session_id) > 128 or not session_id.isascii():
            return error_response(404, INVALID_REQUEST, "Session not found")
        session = await self.endpoint.db(self.endpoint.store.get_session, session_id)
        if session is None or session.server_name != self.endpoint.name or session.principal != request.owner:
            # A session used with another credential is answered exactly as an unknown one.
            return error_response(404, INVALID_REQUEST, "Session not found")
        if session.last_seen < time.time() - self.endpoint.config.session_ttl:
            await self.endpoint.db(self.endpoint.store.delete_session, session_id)
            return error_response(404, INVALID_REQUEST, "Session not found")
        return session

    # -- POST --------------------------------------------------------------------------------

    async def _post(self, request: HTTPRequest) -> HTTPResponse:
        config = self.endpoint.config
        has_json, has_sse = accepts(request.headers)
        if not has_json or (not config.json_response and not has_sse):
            return error_response(
                406, INVALID_REQUEST, "Not Acceptable: Client must accept both application/json and text/event-stream"
            )
        if not is_json_content(request.headers):
            return error_response(400, INVALID_REQUEST, "Invalid Content-Type header: expected application/json")
        try:
            raw = json.loads(request.body)
        except (ValueError, RecursionError):
            return error_response(400, PARSE_ERROR, "Parse error")
        if isinstance(raw, list):
            return error_response(400, INVALID_REQUEST, "Batch requests are not supported")
        try:
            message = jsonrpc_message_adapter.validate_python(raw, by_name=False)
        except ValidationError:
            return error_response(400, INVALID_REQUEST, "Invalid JSON-RPC message")

        if isinstance(message, JSONRPCRequest) and message.method == "initialize":
            return await self._initialize(request, message)
        if isinstance(message, JSONRPCRequest) and len(dumps(message.id)) > MAX_CALL_ID:
            # A question's row keeps its call's id to end the call if the worker dies: refused
            # now, not once the tool has run up to its question and the write fails.
            too_long = f"Invalid request: an id longer than {MAX_CALL_ID} characters (as JSON)"
            return error_response(400, INVALID_REQUEST, too_long, message.id)

        session = await self._session(request)
        if isinstance(session, HTTPResponse):
            return session
        now = time.time()
        if session.last_seen < now - 60:
            # Idle tracking at minute resolution: not a database write per request.
            await self.endpoint.db(self.endpoint.store.touch_session, session.session_id, now)

        if isinstance(message, JSONRPCNotification):
            await self._on_notification(session, message)
            return HTTPResponse(202)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            await self._on_client_answer(session, message, raw)
            return HTTPResponse(202)
        return await self._serve(request, session, message)

    async def _initialize(self, request: HTTPRequest, message: JSONRPCRequest) -> HTTPResponse:
        connection = Connection(_NullChannel(), protocol_version=LATEST_HANDSHAKE_VERSION)
        dctx = SessionContext(
            endpoint=self.endpoint,
            session=SessionRecord("", LATEST_HANDSHAKE_VERSION, "{}", request.owner, self.endpoint.name, 0, 0),
            request_id=message.id,
            transport=TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers),
            message_metadata=ServerMessageMetadata(request_context=request.native),
        )
        try:
            result = await _sdk.serve_one(
                self.endpoint.lowlevel,
                dctx,
                "initialize",
                message.params,
                connection=connection,
                lifespan_state=self.endpoint.lifespan_state,
            )
        except Exception as exc:
            return json_response(_error_reply(message.id, exc), 400 if isinstance(exc, ValidationError) else 200)
        client_params = connection.client_params
        if client_params is None:  # pragma: no cover - serve_one commits it on success
            return error_response(400, INVALID_PARAMS, "Invalid initialize parameters", message.id)
        kept = _client_params_json(client_params)
        if kept is None:
            return error_response(400, INVALID_PARAMS, "Invalid initialize parameters: nested too deeply", message.id)
        now = time.time()
        session = SessionRecord(
            session_id=uuid.uuid4().hex,
            protocol_version=connection.protocol_version,
            client_params=kept,
            principal=request.owner,
            server_name=self.endpoint.name,
            created=now,
            last_seen=now,
        )
        await self.endpoint.db(self.endpoint.store.create_session, session)
        return json_response(
            {"jsonrpc": "2.0", "id": message.id, "result": result}, headers={"Mcp-Session-Id": session.session_id}
        )

    def _connection(self, session: SessionRecord) -> Connection:
        connection = Connection(
            SessionChannel(self.endpoint, session),
            protocol_version=session.protocol_version,
            session_id=session.session_id,
            client_params=InitializeRequestParams.model_validate_json(session.client_params, by_name=False),
        )
        connection.initialized.set()
        return connection

    async def _serve(self, request: HTTPRequest, session: SessionRecord, message: JSONRPCRequest) -> HTTPResponse:
        streaming = not self.endpoint.config.json_response and message.method not in JSON_METHODS
        stream = (
            CallStream(
                self.endpoint,
                session,
                priming=is_version_at_least(session.protocol_version, "2025-11-25"),
                blocking=request.blocking,
                call_id=message.id,
            )
            if streaming
            else None
        )
        dctx = SessionContext(
            endpoint=self.endpoint,
            session=session,
            request_id=message.id,
            transport=TransportContext(kind="streamable-http", can_send_request=streaming, headers=request.headers),
            message_metadata=ServerMessageMetadata(
                related_request_id=message.id,
                request_context=request.native,
                close_sse_stream=stream.close if stream is not None else None,
                close_standalone_sse_stream=self._closer(session.session_id),
            ),
            stream=stream,
            progress_token=progress_token_from_params(message.params),
            tool=_tool_name(message),
        )
        connection = self._connection(session)
        run = _sdk.serve_one(
            self.endpoint.lowlevel,
            dctx,
            message.method,
            message.params,
            connection=connection,
            lifespan_state=self.endpoint.lifespan_state,
        )
        headers = {"Mcp-Session-Id": session.session_id}
        if stream is None:
            # A task of its own, which close() ends with the other calls in flight.
            call = asyncio.ensure_future(run)
            self.endpoint.track(call)
            try:
                reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.id, "result": await call}
            except asyncio.CancelledError:
                this = asyncio.current_task()
                if this is not None and this.cancelling():
                    raise  # this request is cancelled (its ASGI client went away), the call with it
                reply = _error_reply(message.id, request_cancelled())
            except Exception as exc:
                reply = _error_reply(message.id, exc)
            return json_response(reply, headers=headers)

        async def run_call() -> None:
            # In this task's context, before the handler runs: the response's headers leave at once.
            self.endpoint.stream_started(request, _tool_name(message) or message.method)
            # A call still running after this long is worth a row saying which worker runs it;
            # one whose stream key cannot tell a resuming worker its id needs the row at once.
            note_owner = asyncio.get_running_loop().call_later(
                self.endpoint.config.wait_detach_seconds if stream.key_carries_call else 0, stream.note_owner_later
            )
            if request.blocking and (dctx.progress_token is not None or _can_be_asked(connection)):
                keep_tools_away()
            this = asyncio.current_task()
            watches: list[asyncio.Future[str]] = []

            def watch_owner_row() -> None:
                if this is not None and not this.done():
                    watches.append(self._watch_owner_row(session.session_id, stream, this))

            stream.on_owner_noted = watch_owner_row

            def unwatch() -> None:
                stream.on_owner_noted = None
                # Now, not when a callback next runs: the row goes once the call has answered,
                # and a poll that saw it gone while still watched would end the whole session.
                self.poller.discard(session.session_id, owner_key(stream.stream_key))
                for watch in watches:
                    watch.cancel()

            try:
                reply = {"jsonrpc": "2.0", "id": message.id, "result": await run}
            except asyncio.CancelledError:
                unwatch()
                note_owner.cancel()
                reply = _error_reply(message.id, request_cancelled())
                if self.waiters.has_ended(session.session_id):
                    # The session is gone with its event log: an attached client hears the end,
                    # nothing is written for a session no client can resume.
                    stream.abort(reply)
                else:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(stream.send(reply, final=True))
                raise
            except Exception as exc:
                reply = _error_reply(message.id, exc)
            unwatch()
            note_owner.cancel()
            try:
                await stream.send(reply, final=True)
                await stream.forget_owner()
            except Exception:
                # The answer could not be logged (the database failed): the attached client
                # still gets a JSON-RPC error and its stream ends, instead of waiting forever.
                logger.exception(
                    "MCP session %s: the answer to request %r could not be sent", session.session_id, message.id
                )
                stream.abort(error_body(INTERNAL_ERROR, "Internal server error", message.id))

        task = asyncio.create_task(run_call())
        self.endpoint.track(task)
        self.waiters.add_call(session.session_id, message.id, task)
        return HTTPResponse(200, {**SSE_HEADERS, **headers}, stream=stream.body())

    def _watch_owner_row(self, session_id: str, stream: CallStream, call: asyncio.Task[Any]) -> asyncio.Future[str]:
        """Cancel the call when ``notifications/cancelled`` for it reached another worker,
        which answers the call's owner row with the cancellation (:meth:`_cancel_elsewhere`).
        Found by the process's answer poll, as a question's answer is. A callback on the
        answer's future, not a task of its own: thousands of calls may wait at once.
        Cancelling the returned future stops the watch."""
        key = owner_key(stream.stream_key)
        future = self.waiters.expect(session_id, key)
        self.poller.add(session_id, key, prompt=False)

        def answered(done: asyncio.Future[str]) -> None:
            self.poller.discard(session_id, key)
            self.waiters.forget(session_id, key)
            if done.cancelled() or done.exception() is not None:
                return  # unwatched, or the session ended (its calls are ended with it)
            # Any other answer is a worker's that took this one for dead, and logged the end itself.
            if done.result() == _cancelled_reply(stream.call_id):
                call.cancel()

        future.add_done_callback(answered)
        self.endpoint.track(asyncio.ensure_future(self._cancelled_before_noted(session_id, stream, call)))
        return future

    async def _cancelled_before_noted(self, session_id: str, stream: CallStream, call: asyncio.Task[Any]) -> None:
        """Once the call's owner row is written: end the call if it was cancelled, or its
        session deleted, through another worker before the row existed, when nothing there
        could reach it. One read of the session's pending rows, made only by a call that
        outlived ``wait_detach_seconds`` or sent something before its answer: a cancellation
        mark (:func:`cancel_mark`) for the call cancels it; its own row missing means the
        session is gone (rows of a deleted session do not count)."""
        try:
            keys = {key for _, key in await self.endpoint.db(self.endpoint.store.pending_keys, [session_id])}
        except Exception:
            # The answer poll still finds a later cancellation, and the session's end.
            logger.warning("Could not check whether a call was cancelled before it noted its worker", exc_info=True)
            return
        if call.done() or stream._ended:
            return  # answered meanwhile (its owner row went with the answer)
        if owner_key(stream.stream_key) not in keys:
            self.waiters.end_session(session_id)
        elif stream.call_id is not None and any(key.startswith(cancel_mark(stream.call_id)) for key in keys):
            call.cancel()

    async def _cancel_elsewhere(self, session_id: str, call_id: RequestId) -> None:
        """A call of this session running in any process, which noted its owner row: its row
        answered with the cancellation error, which its worker's poll finds (and a client
        resuming its stream meanwhile is answered with)."""
        store = self.endpoint.store
        keys = await self.endpoint.db(store.pending_keys, [session_id])
        for _, request_id in keys:
            if not request_id.startswith(owner_key("")):
                continue
            row = await self.endpoint.db(store.get_pending, session_id, request_id)
            if row is None or row.response is not None or json.loads(row.params).get("callId") != call_id:
                continue
            await self.endpoint.db(store.answer_pending, session_id, request_id, _cancelled_reply(call_id))

    def _closer(self, session_id: str) -> Any:
        async def close_standalone() -> None:
            # Standalone streams end by themselves after ``stream_hold_seconds``; waking makes
            # every local one re-check the store now.
            self.waiters.wake(session_id)

        return close_standalone

    async def _on_notification(self, session: SessionRecord, message: JSONRPCNotification) -> None:
        if message.method != "notifications/cancelled":
            return
        request_id = (message.params or {}).get("requestId")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        if self.waiters.cancel_call(session.session_id, request_id):
            return
        # The call may run in another process: a question it waits on is answered there with a
        # mark that cancels the call, as it is cancelled here (the tool goes no further).
        endpoint = self.endpoint
        store = endpoint.store
        # Its owner row may not exist yet (a call notes it once it has run for
        # wait_detach_seconds): the mark is written first, then the owner rows are read, and
        # the call's worker writes its row, then reads the marks. Of the two reads, at least
        # one sees the other's write, so the cancellation is never missed.
        mark = f"{cancel_mark(request_id)}-{uuid.uuid4().hex[:12]}"
        await endpoint.db(store.create_pending, session.session_id, mark, CANCEL_METHOD, dumps({"callId": request_id}))
        await self._cancel_elsewhere(session.session_id, request_id)
        rows = await endpoint.db(store.call_elicitations, session.session_id, dumps(request_id))
        for row in rows:
            if row.status != "pending":
                continue
            reply = dumps(
                {"jsonrpc": "2.0", "id": row.request_key, "result": {"action": "cancel"}, CALL_CANCELLED: True}
            )
            if await endpoint.db(store.answer_pending, session.session_id, row.request_key, reply, "cancelled", None):
                self.waiters.answer(session.session_id, row.request_key, reply)
                await endpoint.db(
                    functools.partial(
                        store.update_elicitation,
                        row.id,
                        "cancelled",
                        time.time(),
                        detail="The client cancelled the call",
                        from_statuses=("cancelled",),
                    )
                )

    async def _on_client_answer(
        self, session: SessionRecord, message: JSONRPCResponse | JSONRPCError, raw: Any
    ) -> None:
        request_id = str(message.id)
        if not storable(request_id) or request_id.startswith((owner_key(""), _CANCEL_MARK)):
            # No request of ours has one (a NUL, a lone surrogate), nor is one of our owner rows
            # (an answer would end the call's claim) or cancellation marks: unknown, like any other.
            logger.info("Dropped an answer to unknown or already answered request %r", request_id[:64])
            return
        payload = dumps(raw)
        # When the request was an elicitation, its row records the user's answer too.
        if isinstance(message, JSONRPCError):
            status, answer = "cancelled", None
        else:
            status, answer = outcome_of(message.result)
        answered = await self.endpoint.db(
            self.endpoint.store.answer_pending, session.session_id, request_id, payload, status, answer
        )
        if answered:
            self.waiters.answer(session.session_id, request_id, payload)
        else:
            logger.info("Dropped an answer to unknown or already answered request %r", request_id[:64])

    # -- server-to-client requests -----------------------------------------------------------

    async def request_client(
        self,
        session: SessionRecord,
        stream: CallStream | None,
        method: str,
        params: Mapping[str, Any] | None,
        timeout: float | None,
        *,
        tool: str | None = None,
        call_id: RequestId | None = None,
    ) -> dict[str, Any]:
        """Send a request to the client and wait, in any process, for its answer."""
        if stream is not None and holding_home():
            # Asked by sync code on the WSGI request's own thread (a client that declared no
            # way to be asked keeps its tools there): that thread writes this stream, and
            # could never send the question.
            raise NoBackChannelError(method)
        endpoint = self.endpoint
        endpoint.before_sending(method)
        store = endpoint.store
        session_id = session.session_id
        request_id = f"srv-{uuid.uuid4().hex}"
        url_params = to_url_params(params) if method == "elicitation/create" else None
        if url_params is not None:
            params = url_params
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        wait = timeout if timeout is not None else endpoint.config.request_timeout
        record = None
        if method == "elicitation/create":
            record = new_record(
                server_name=endpoint.name,
                tool=tool,
                params=params or {},
                request_key=request_id,
                principal=session.principal,
                expires=time.time() + wait,
                session_id=session_id,
                owner=worker_id(),
                stream_key=stream.stream_key if stream is not None else GET_STREAM,
                call_id=dumps(call_id) if call_id is not None else None,
            )
        # Shielded: a call ended while its question is written (a DELETE, a cancellation, its
        # owner row's check finding the session gone) still finds the row written, and marks it.
        written = asyncio.ensure_future(
            endpoint.db(store.create_pending, session_id, request_id, method, dumps(params or {}), record)
        )
        detach_later: asyncio.TimerHandle | None = None
        settled = record is None  # whether the question's row says how it ended
        try:
            await asyncio.shield(written)
            # A DELETE that reached another worker while the call ran here ended no call of this
            # worker's, and its pending rows went before this one was written: asked now, the
            # question would wait out the request timeout. Read after the write, so a DELETE that
            # comes later deletes this row, which the poller's sweep notices.
            gone = await endpoint.db(store.get_session, session_id) is None
            if gone:
                self.waiters.note_ended(session_id)
            future = self.waiters.expect(session_id, request_id)
            if gone:
                pass  # nothing is written to the deleted session's event log
            elif stream is not None:
                await stream.send(message)
                if stream.detach_on_wait:
                    detach_later = asyncio.get_running_loop().call_later(
                        endpoint.config.wait_detach_seconds, stream.detach_now, endpoint.config.wait_retry_ms
                    )
            else:
                await self.post_to_get_stream(session_id, message)
            endpoint.waiting_for_client()
            try:
                if gone:
                    raise SessionGone(session_id)
                answer = await self._await_answer(session_id, request_id, future, wait)
            except (TimeoutError, SessionGone) as exc:
                expired = isinstance(exc, TimeoutError)
                if record is not None:
                    await endpoint.db(
                        functools.partial(
                            store.update_elicitation,
                            record.id,
                            "expired" if expired else "cancelled",
                            time.time(),
                            detail=f"No answer within {wait:g} seconds" if expired else "The session ended",
                        )
                    )
                    settled = True
                if not expired:
                    # The session ended: the call ends with it, cancelled as the SDK cancels a
                    # deleted session's calls (the tool goes no further, and asks nothing more
                    # of a client that is gone). Raised here, not left to the task's own
                    # cancellation: Python 3.11's ``wait_for`` swallows a cancellation that
                    # arrives with its future's result (here, this very exception).
                    raise asyncio.CancelledError from None
                if record is not None:
                    # The design's rule: an unanswered question ends as the user's "cancel".
                    return {"action": "cancel"}
                raise MCPError(code=REQUEST_TIMEOUT, message=f"No answer from the client to {method}") from None
        except asyncio.CancelledError:
            # The call itself ended (DELETE of the session, notifications/cancelled, shutdown),
            # at any point once the question's row was begun: the question ends with it, and
            # its row says so.
            if not settled and record is not None:
                ended = self.waiters.has_ended(session_id)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._question_ended(written, record.id, ended))
            raise
        finally:
            if detach_later is not None:
                detach_later.cancel()
            self.waiters.forget(session_id, request_id)
            if written.done() and not written.cancelled() and written.exception() is None:
                with contextlib.suppress(Exception):
                    await endpoint.db(store.delete_pending, session_id, request_id)
        reply = json.loads(answer)
        if reply.get(CALL_CANCELLED):
            # notifications/cancelled reached another worker first: the call ends as if it had
            # reached this one (run_call answers the cancellation).
            raise asyncio.CancelledError
        if "error" in reply:
            error = ErrorData.model_validate(reply["error"])
            raise MCPError(code=error.code, message=error.message, data=error.data)
        result = reply.get("result")
        if url_params is not None:
            result = fill_url_accept(result)
        elif record is not None and isinstance(result, dict) and result.get("action") == "accept":
            # A form answer the SDK may yet refuse (see refusal_verdict).
            note_answer(endpoint, record.id)
        return result if isinstance(result, dict) else {}

    async def complete(self, session: SessionRecord, message: dict[str, Any]) -> None:
        """``notifications/elicitation/complete`` from a tool: mark the rows the session's
        principal asked of this server, notify their sessions and the calling one."""
        elicitation_id = str((message.get("params") or {}).get("elicitationId", ""))
        endpoint = self.endpoint
        moved, exists = await endpoint.db(
            complete_in_store, endpoint.store, elicitation_id, endpoint.name, session.principal
        )
        if not exists or (moved and session.session_id not in {row.session_id for row in moved}):
            # Not asked through this package, or asked in another of the caller's sessions: the
            # calling session hears it too, as from the SDK. A repeat moves nothing, says nothing.
            await self.post_to_get_stream(session.session_id, message)
        for row in moved:
            if row.session_id:
                self.waiters.wake(row.session_id)

    async def _question_ended(self, written: asyncio.Future[None], record_id: str, session_ended: bool) -> None:
        """Once its row is written, mark a question whose call ended before its answer."""
        await written
        await self.endpoint.db(
            functools.partial(
                self.endpoint.store.update_elicitation,
                record_id,
                "cancelled",
                time.time(),
                detail="The session ended" if session_ended else "The call was cancelled",
            )
        )

    async def _await_answer(self, session_id: str, request_id: str, future: asyncio.Future[str], wait: float) -> str:
        # Answered here: the future, at once. Answered by another worker: the process's poller.
        self.poller.add(session_id, request_id)
        try:
            return await asyncio.wait_for(future, wait)
        finally:
            self.poller.discard(session_id, request_id)

    async def post_to_get_stream(self, session_id: str, message: Mapping[str, Any]) -> None:
        await self.endpoint.db(self.endpoint.store.append_event, session_id, GET_STREAM, dumps(message), False)
        self.waiters.wake(session_id)

    # -- GET ---------------------------------------------------------------------------------

    async def _get(self, request: HTTPRequest) -> HTTPResponse:
        _, has_sse = accepts(request.headers)
        if not has_sse:
            return error_response(406, INVALID_REQUEST, "Not Acceptable: Client must accept text/event-stream")
        session = await self._session(request)
        if isinstance(session, HTTPResponse):
            return session
        headers = {**SSE_HEADERS, "Mcp-Session-Id": session.session_id}
        last_event_id = request.header(LAST_EVENT_ID_HEADER)
        if last_event_id:
            parsed = parse_event_id(last_event_id)
            if parsed is None:
                return error_response(400, INVALID_REQUEST, "Malformed Last-Event-ID")
            stream_key, after = parsed
            return HTTPResponse(200, headers, stream=self._tail(session, stream_key, after, request.blocking))
        return HTTPResponse(200, headers, stream=self._tail(session, GET_STREAM, None, request.blocking))

    async def _tail(
        self, session: SessionRecord, stream_key: str, after: int | None, blocking: bool = False
    ) -> AsyncIterator[bytes]:
        """Stream a stream's logged events, waiting for new ones for ``stream_hold_seconds``
        (``blocking_hold_seconds`` under WSGI).

        A call stream ends with its final response; the GET stream, and any stream still
        silent when the hold time is up, end with a ``retry:`` hint so the client comes back
        (to this worker or another) with ``Last-Event-ID`` and misses nothing. So does a
        stream whose database read failed (every connection taken, a restart): raised, the
        error would cut the response in the WSGI or ASGI server and be logged there, out of
        this package's loggers.
        """
        retry_ms = self.endpoint.config.wait_retry_ms if blocking else self.endpoint.config.sse_retry_ms
        read = _Read(after)
        try:
            # Closed with this one: a client that went away leaves no generator to the collector.
            async with contextlib.aclosing(self._tail_events(session, stream_key, read, blocking, retry_ms)) as frames:
                async for frame in frames:
                    yield frame
        except Exception:
            self.stream_outage.failed()
            # Where to resume, as a held stream's priming event says it: only to clients of
            # 2025-11-25 on, which expect an event with no data.
            if read.after is not None and is_version_at_least(session.protocol_version, "2025-11-25"):
                yield sse_frame("", _event_id(stream_key, read.after), retry_ms)

    async def _tail_events(
        self, session: SessionRecord, stream_key: str, read: _Read, blocking: bool, retry_ms: int
    ) -> AsyncIterator[bytes]:
        endpoint = self.endpoint
        store = endpoint.store
        session_id = session.session_id
        config = endpoint.config
        after = read.after
        if after is None:
            # A fresh GET stream starts at what no GET stream has delivered yet.
            after = read.after = await endpoint.db(store.get_cursor, session_id)
        # Under WSGI a stream is a short poll, not a parked thread: the GET stream too, which
        # every connected legacy client keeps open, so N idle clients would hold N threads.
        hold = config.blocking_hold_seconds if blocking else config.stream_hold_seconds
        if is_version_at_least(session.protocol_version, "2025-11-25"):
            yield sse_frame("", _event_id(stream_key, after), retry_ms)
        deadline = time.monotonic() + hold
        interval = config.poll_interval
        next_owner_check = 0.0
        while time.monotonic() < deadline:
            waker = self.waiters.stream_event(session_id)
            events = await endpoint.db(store.events_after, session_id, stream_key, after)
            self.stream_outage.succeeded()
            if events:
                for event in events:
                    yield sse_frame(event.message, _event_id(stream_key, event.event_id))
                    after = read.after = event.event_id
                    if event.final:
                        return
                if stream_key == GET_STREAM:
                    await endpoint.db(store.set_cursor, session_id, after)
                deadline = time.monotonic() + hold
                interval = config.poll_interval
                continue
            if await endpoint.db(store.get_session, session_id) is None:
                return
            if stream_key != GET_STREAM and time.monotonic() >= next_owner_check:
                next_owner_check = time.monotonic() + 1.0
                ended = await self._end_if_orphaned(session_id, stream_key)
                if isinstance(ended, str):
                    yield sse_frame(ended)
                    return
                if ended:
                    continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waker.wait(), min(interval, max(deadline - time.monotonic(), 0)))
            interval = min(interval * 2, 1.0)

    async def _end_if_orphaned(self, session_id: str, stream_key: str) -> bool | str:
        """End a resumed call stream whose worker died while the call ran.

        The call cannot go on without the process that ran it, so it ends with a clear error.
        A question it waited on keeps its answer (if it arrived), and its row says the call did
        not complete. The worker and the call's id come from the stream's owner row (see
        :meth:`CallStream.note_owner`), or, for a stream without one, from the question's row.
        Returns whether the error was appended to the log, or the final message to end this
        response with, unlogged: the error a worker claimed but did not live to log, or the
        error of a call that never noted its worker, three heartbeats past the time by which a
        live one would have (its key says that time and its id: :func:`new_stream_key`).
        """
        endpoint = self.endpoint
        store = endpoint.store
        rows = await endpoint.db(store.stream_elicitations, session_id, stream_key)
        waiting = [r for r in rows if r.owner and r.call_id is not None and r.detail is None]
        row = waiting[-1] if waiting else None
        noted = await endpoint.db(store.get_pending, session_id, owner_key(stream_key))
        stale_after = 3 * endpoint.config.heartbeat_interval
        if noted is not None:
            if noted.response is not None:
                # Ended by another worker, which logs its error right after its claim. Logged:
                # this stream reads it next (or has, if the client resumed after its end).
                # Not logged: this stream read the log just before, or that worker died.
                logged = await endpoint.db(store.events_after, session_id, stream_key, 0)
                return False if any(event.final for event in logged) else noted.response
            owner_row = json.loads(noted.params)
            owner, call_id = owner_row.get("owner"), owner_row.get("callId")
        elif row is not None:
            owner, call_id = row.owner, json.loads(row.call_id or "null")
        else:
            origin = stream_origin(stream_key)
            if origin is None or time.time() - origin[0] < stale_after:
                return False
            # A call logs nothing before its row but its final response, after which the row
            # goes: a logged event means the call answered (the client resumed past it).
            if await endpoint.db(store.has_stream, session_id, stream_key):
                return False
            return dumps(error_body(INTERNAL_ERROR, CALL_LOST, origin[1]))
        if not isinstance(owner, str) or await endpoint.db(owner_alive, store, owner, stale_after):
            return False
        detail = WORKER_LOST if row is not None else CALL_LOST
        reply = error_body(INTERNAL_ERROR, detail, call_id, {"elicitation": row.id} if row is not None else None)
        # Of two workers resuming the stream at once, one wins the claim and appends the final
        # error: the owner row's answer (first come, first served, as any client's answer), or,
        # for a stream without one, the question row's detail.
        claimed = noted is not None and await endpoint.db(
            store.answer_pending, session_id, noted.request_id, dumps(reply)
        )
        if row is not None and (claimed or noted is None):
            # The status stays what the user did (an answer arriving later is still recorded);
            # the detail says the call itself ended with an error.
            marked = await endpoint.db(
                functools.partial(
                    store.update_elicitation,
                    row.id,
                    row.status,
                    time.time(),
                    detail=detail,
                    from_statuses=(row.status,),
                    without_detail=True,
                )
            )
            claimed = claimed or marked
        if not claimed:
            return False
        await endpoint.db(store.append_event, session_id, stream_key, dumps(reply), True)
        return True

    # -- DELETE ------------------------------------------------------------------------------

    async def _delete(self, request: HTTPRequest) -> HTTPResponse:
        session = await self._session(request)
        if isinstance(session, HTTPResponse):
            return session
        await self.endpoint.db(self.endpoint.store.delete_session, session.session_id)
        self.waiters.end_session(session.session_id)
        return HTTPResponse(200)


@dataclass
class _Read:
    """How far a stream has delivered its events: where its client resumes if it fails."""

    after: int | None


def _can_be_asked(connection: Connection) -> bool:
    """Whether the session's client declared it answers a server's requests (elicitation,
    sampling, roots)."""
    capabilities = connection.client_capabilities
    return capabilities is not None and any(
        getattr(capabilities, name, None) is not None for name in ("elicitation", "sampling", "roots")
    )


def _tool_name(message: JSONRPCRequest) -> str | None:
    if message.method != "tools/call" or not message.params:
        return None
    name = message.params.get("name")
    return name if isinstance(name, str) else None


def _cancelled_reply(call_id: RequestId | None) -> str:
    """The owner row's answer that cancels its call from another worker (and ends a stream
    resumed meanwhile, as the cancelled call itself ends it)."""
    return dumps(_error_reply(call_id, request_cancelled()))


def _error_reply(request_id: Any, exc: BaseException) -> dict[str, Any]:
    """The JSON-RPC error for an exception raised while serving; internals never reach the wire."""
    error = handler_exception_to_error_data(exc) if isinstance(exc, Exception) else None
    if error is None:
        logger.exception("MCP request handler raised", exc_info=exc)
        error = ErrorData(code=INTERNAL_ERROR, message="Internal server error")
    return error_body(error.code, error.message, request_id, error.data)
