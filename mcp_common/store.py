"""What a conversation keeps between two HTTP requests, behind small protocols.

Everything here is synchronous: the ORM-backed implementations (Django, SQLAlchemy) are
synchronous, and the pipeline calls them from worker threads, never from its event loop.
:class:`MemoryStore` exists for unit tests of the core only: it is not shared between
processes, so it cannot serve a multi-worker deployment.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol

GET_STREAM = "get"
"""The stream key of a session's standalone (GET) stream."""


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    protocol_version: str
    client_params: str
    """The client's ``initialize`` params, as JSON."""
    principal: str | None
    server_name: str
    created: float
    last_seen: float


@dataclass(frozen=True)
class EventRecord:
    event_id: int
    """Monotonic within the store; also the SSE event id's numeric part."""
    session_id: str
    stream_key: str
    message: str
    """The JSON-RPC message, as JSON."""
    final: bool
    """The message is the response that ends its stream."""


@dataclass(frozen=True)
class PendingRequestRecord:
    session_id: str
    request_id: str
    method: str
    params: str
    response: str | None
    """The client's JSON-RPC response (result or error), as JSON, once it has arrived."""
    created: float


class SessionStore(Protocol):
    """Legacy-era sessions, their SSE event log and their pending server-to-client requests."""

    def create_session(self, record: SessionRecord) -> None: ...

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    def touch_session(self, session_id: str, now: float) -> None: ...

    def delete_session(self, session_id: str) -> bool:
        """Forget the session, its events and its pending requests; whether it existed."""
        ...

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        """Append to the session's event log and return the event id."""
        ...

    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        """The stream's events with ids greater than ``after``, oldest first."""
        ...

    def has_stream(self, session_id: str, stream_key: str) -> bool: ...

    def get_cursor(self, session_id: str) -> int:
        """The last event id a GET stream delivered for the session (0 for none)."""
        ...

    def set_cursor(self, session_id: str, event_id: int) -> None: ...

    def create_pending(self, session_id: str, request_id: str, method: str, params: str) -> None: ...

    def answer_pending(self, session_id: str, request_id: str, response: str) -> bool:
        """Record the client's answer; ``False`` when no such request is waiting (unknown, or
        already answered: the first answer wins)."""
        ...

    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None: ...

    def delete_pending(self, session_id: str, request_id: str) -> None: ...

    def purge_expired(self, older_than: float) -> int:
        """Delete sessions idle since before ``older_than``; how many."""
        ...


class MemoryStore:
    """In-process :class:`SessionStore` for unit tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionRecord] = {}
        self._events: list[EventRecord] = []
        self._pending: dict[tuple[str, str], PendingRequestRecord] = {}
        self._ids = itertools.count(1)
        self._cursors: dict[str, int] = {}

    def create_session(self, record: SessionRecord) -> None:
        with self._lock:
            self._sessions[record.session_id] = record

    def get_session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    def touch_session(self, session_id: str, now: float) -> None:
        with self._lock:
            if (record := self._sessions.get(session_id)) is not None:
                self._sessions[session_id] = replace(record, last_seen=now)

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            existed = self._sessions.pop(session_id, None) is not None
            self._events = [e for e in self._events if e.session_id != session_id]
            for key in [k for k in self._pending if k[0] == session_id]:
                del self._pending[key]
            return existed

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        with self._lock:
            event = EventRecord(next(self._ids), session_id, stream_key, message, final)
            self._events.append(event)
            return event.event_id

    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        return [
            e for e in self._events if e.session_id == session_id and e.stream_key == stream_key and e.event_id > after
        ]

    def has_stream(self, session_id: str, stream_key: str) -> bool:
        return any(e.session_id == session_id and e.stream_key == stream_key for e in self._events)

    def get_cursor(self, session_id: str) -> int:
        return self._cursors.get(session_id, 0)

    def set_cursor(self, session_id: str, event_id: int) -> None:
        with self._lock:
            self._cursors[session_id] = max(event_id, self._cursors.get(session_id, 0))

    def create_pending(self, session_id: str, request_id: str, method: str, params: str) -> None:
        with self._lock:
            self._pending[(session_id, request_id)] = PendingRequestRecord(
                session_id, request_id, method, params, None, time.time()
            )

    def answer_pending(self, session_id: str, request_id: str, response: str) -> bool:
        with self._lock:
            record = self._pending.get((session_id, request_id))
            if record is None or record.response is not None:
                return False
            self._pending[(session_id, request_id)] = replace(record, response=response)
            return True

    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None:
        return self._pending.get((session_id, request_id))

    def delete_pending(self, session_id: str, request_id: str) -> None:
        with self._lock:
            self._pending.pop((session_id, request_id), None)

    def purge_expired(self, older_than: float) -> int:
        stale = [s.session_id for s in self._sessions.values() if s.last_seen < older_than]
        for session_id in stale:
            self.delete_session(session_id)
        return len(stale)
