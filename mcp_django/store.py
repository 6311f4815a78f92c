"""The core's ``SessionStore`` on the Django ORM.

Called from the endpoint's database threads. Each thread keeps its own connection; a
connection that went bad (database restart) is closed and the call retried once.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections, router
from django.utils import timezone

from mcp_common.store import EventRecord, PendingRequestRecord, SessionRecord
from mcp_django.models import MCPEvent, MCPPendingRequest, MCPSession

T = TypeVar("T")


def _ts(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC)


def _retry(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except (InterfaceError, OperationalError):
            alias = router.db_for_write(MCPSession)
            connections[alias].close()
            return fn(*args, **kwargs)

    return wrapper


class DjangoStore:
    """Sessions, events and pending requests in the application's database."""

    @_retry
    def create_session(self, record: SessionRecord) -> None:
        MCPSession.objects.create(
            session_id=record.session_id,
            server_name=record.server_name,
            protocol_version=record.protocol_version,
            client_params=record.client_params,
            principal=record.principal,
            created=_ts(record.created),
            last_seen=_ts(record.last_seen),
        )

    @_retry
    def get_session(self, session_id: str) -> SessionRecord | None:
        row = MCPSession.objects.filter(session_id=session_id).first()
        if row is None:
            return None
        return SessionRecord(
            session_id=row.session_id,
            protocol_version=row.protocol_version,
            client_params=row.client_params,
            principal=row.principal,
            server_name=row.server_name,
            created=row.created.timestamp(),
            last_seen=row.last_seen.timestamp(),
        )

    @_retry
    def touch_session(self, session_id: str, now: float) -> None:
        MCPSession.objects.filter(session_id=session_id).update(last_seen=_ts(now))

    @_retry
    def delete_session(self, session_id: str) -> bool:
        deleted, _ = MCPSession.objects.filter(session_id=session_id).delete()
        MCPEvent.objects.filter(session_id=session_id).delete()
        MCPPendingRequest.objects.filter(session_id=session_id).delete()
        return deleted > 0

    @_retry
    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        return MCPEvent.objects.create(session_id=session_id, stream_key=stream_key, message=message, final=final).id

    @_retry
    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        rows = MCPEvent.objects.filter(session_id=session_id, stream_key=stream_key, id__gt=after).order_by("id")
        return [
            EventRecord(r.id, r.session_id, r.stream_key, r.message, r.final)
            for r in rows.only("id", "session_id", "stream_key", "message", "final")
        ]

    @_retry
    def has_stream(self, session_id: str, stream_key: str) -> bool:
        return MCPEvent.objects.filter(session_id=session_id, stream_key=stream_key).exists()

    @_retry
    def get_cursor(self, session_id: str) -> int:
        value = MCPSession.objects.filter(session_id=session_id).values_list("get_cursor", flat=True).first()
        return int(value or 0)

    @_retry
    def set_cursor(self, session_id: str, event_id: int) -> None:
        MCPSession.objects.filter(session_id=session_id, get_cursor__lt=event_id).update(get_cursor=event_id)

    @_retry
    def create_pending(self, session_id: str, request_id: str, method: str, params: str) -> None:
        MCPPendingRequest.objects.create(session_id=session_id, request_id=request_id, method=method, params=params)

    @_retry
    def answer_pending(self, session_id: str, request_id: str, response: str) -> bool:
        # One UPDATE with the NULL guard: the first answer wins, whichever worker it reaches.
        updated = MCPPendingRequest.objects.filter(
            session_id=session_id, request_id=request_id, response__isnull=True
        ).update(response=response, answered=timezone.now())
        return updated == 1

    @_retry
    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None:
        row = MCPPendingRequest.objects.filter(session_id=session_id, request_id=request_id).first()
        if row is None:
            return None
        return PendingRequestRecord(
            row.session_id, row.request_id, row.method, row.params, row.response, row.created.timestamp()
        )

    @_retry
    def delete_pending(self, session_id: str, request_id: str) -> None:
        MCPPendingRequest.objects.filter(session_id=session_id, request_id=request_id).delete()

    @_retry
    def purge_expired(self, older_than: float) -> int:
        stale = list(MCPSession.objects.filter(last_seen__lt=_ts(older_than)).values_list("session_id", flat=True))
        for session_id in stale:
            try:
                self.delete_session(session_id)
            except DatabaseError:  # pragma: no cover - next purge retries
                continue
        return len(stale)
