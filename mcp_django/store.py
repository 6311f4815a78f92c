"""The core's ``SessionStore`` on the Django ORM.

Called from the endpoint's database threads. Each thread keeps its own connection; a
connection that went bad (database restart) is closed and the call retried once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from typing import Any, TypeVar, cast, overload

from django.conf import settings
from django.core.signals import setting_changed
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connections,
    router,
    transaction,
)
from django.db.models import Exists, Model, OuterRef, Q, QuerySet
from django.dispatch import receiver
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from mcp_common.store import (
    ANY_PRINCIPAL,
    GET_STREAM,
    ONE_STATEMENT_ANSWERS,
    ONE_STATEMENT_QUESTIONS,
    UNANSWERED_DETAIL,
    ElicitationRecord,
    EventRecord,
    PendingRequestRecord,
    RequestStateRecord,
    Rerun,
    SessionRecord,
    SQLiteWriteLock,
    answer_recorded,
    asked_by,
    column_values,
    complete_rows,
    exactly,
    leave_stream_turn,
    missing_table,
    notified_sessions,
    pending_written,
    purge_store,
    record_of,
    rerun_claim,
    rerun_insert,
    serial_writes,
    session_written,
    state_redeemed,
    state_saved,
    stream_lock_key,
    take_stream_turn,
)
from mcp_django.models import (
    MCPElicitation,
    MCPEvent,
    MCPPendingRequest,
    MCPRequestState,
    MCPSession,
    MCPWorker,
)
from mcp_django.tenants import connection_tenant, tenant_prefix

T = TypeVar("T")
M = TypeVar("M", bound=Model)

logger = logging.getLogger("mcp_django")


def _ts(value: float) -> dt.datetime:
    """Epoch seconds as the project keeps datetimes: aware UTC under ``USE_TZ``, else naive
    local wall time (Django set the process's zone to ``TIME_ZONE``), as Django itself does."""
    if settings.USE_TZ:
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    return dt.datetime.fromtimestamp(value)


def overdue_rows(now: float) -> Q:
    """The rows ``expire_elicitations(now)`` expires, which completion expires too
    (:func:`mcp_common.store.overdue`)."""
    return Q(status="pending", expires__lt=_ts(now))


_SQLITE_LOCKS: dict[str, SQLiteWriteLock] = {}
_CHUNK = 500
"""Session ids per ``IN (...)`` query: well under every backend's parameter limit."""


def _sqlite_lock(_store: Any) -> SQLiteWriteLock | None:
    connection = connections[_alias()]
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    lock = _SQLITE_LOCKS.get(name)
    if lock is None:
        # In memory by SQLite's rules: Django's is_in_memory_db() misses file::memory:?cache=shared.
        from mcp_django.conf import mcp_settings

        interval = mcp_settings.config.sqlite_checkpoint_interval
        lock = _SQLITE_LOCKS.setdefault(name, SQLiteWriteLock(name, checkpoint_interval=interval))
    return lock


# Writers to one SQLite file take turns; on one in memory, every call does (see
# mcp_common.store.serial_writes).
_serial_on_sqlite = serial_writes(_sqlite_lock)
_serial_in_memory = serial_writes(_sqlite_lock, in_memory_only=True)


@overload
def _retry(fn: Callable[..., T]) -> Callable[..., T]: ...


@overload
def _retry(*, rerun: Rerun) -> Callable[[Callable[..., T]], Callable[..., T]]: ...


def _retry(fn: Callable[..., T] | None = None, *, rerun: Rerun | None = None) -> Any:
    """Run the call once more when its connection went bad (closed first). ``rerun``: how a
    write whose first attempt may have committed runs again (see mcp_common.store.Rerun).
    Not inside a transaction the caller has open (under WSGI the store runs on the request's
    thread, in ``ATOMIC_REQUESTS`` or a ``TestCase``: :mod:`mcp_common.home`): closing its
    connection would throw that transaction away, so the error is the caller's."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        def attempts(*args: Any, **kwargs: Any) -> T:
            try:
                return fn(*args, **kwargs)
            except (InterfaceError, OperationalError) as exc:
                connection = connections[_alias()]
                # An exhausted pool gave no connection: a second try would only wait as long
                # again (the pool's timeout) for the same error.
                if connection.in_atomic_block or _pool_exhausted(exc):
                    raise
                connection.close()
            if rerun is None:
                return fn(*args, **kwargs)
            return cast(T, rerun(fn, *args, **kwargs))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            try:
                return attempts(*args, **kwargs)
            except DatabaseError as exc:
                # "no such table: mcp_django_mcpsession" alone does not say what to do, and
                # gunicorn, unlike runserver, does not mention unapplied migrations.
                alias = _alias()
                hint = _migrate_hint(alias)
                if missing_table(exc.__cause__, connections[alias].vendor) and hint not in getattr(
                    exc, "__notes__", ()
                ):
                    exc.add_note(hint)
                raise

        return wrapper

    return decorate if fn is None else decorate(fn)


def _pool_exhausted(error: BaseException) -> bool:
    """Whether ``error`` is Django's pool (``OPTIONS["pool"]``) having no connection free within
    its timeout: psycopg_pool's ``PoolTimeout``, raised as Django's ``OperationalError``."""
    if not isinstance(error, OperationalError):
        return False
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # no pool installed, none used
        return False
    return isinstance(error.__cause__, PoolTimeout)


def _migrate_hint(alias: str) -> str:
    """What to run for missing MCP tables: on the database the routers keep them in, which a
    plain ``migrate`` (the default database) leaves as it is."""
    database = "" if alias == DEFAULT_DB_ALIAS else f" --database {alias}"
    return f"The MCP tables are missing or out of date: run `manage.py migrate{database}`"


class DjangoStore:
    """Sessions, events and pending requests in the application's database."""

    @_retry(rerun=rerun_insert(IntegrityError, session_written))
    @_serial_on_sqlite
    def create_session(self, record: SessionRecord) -> None:
        _rows(MCPSession).create(
            session_id=record.session_id,
            server_name=record.server_name,
            protocol_version=record.protocol_version,
            client_params=record.client_params,
            principal=record.principal,
            created=_ts(record.created),
            last_seen=_ts(record.last_seen),
        )

    @_retry
    @_serial_in_memory
    def get_session(self, session_id: str) -> SessionRecord | None:
        # The hottest query of a legacy session (every request): plain SQL, ~15x cheaper than
        # the ORM's filter().first() here.
        connection = connections[_alias()]
        table = connection.ops.quote_name(MCPSession._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT session_id, protocol_version, client_params, principal, server_name, created, last_seen "
                f"FROM {table} WHERE session_id = %s",
                [session_id],
            )
            row = cursor.fetchone()
        if row is None:
            return None
        return SessionRecord(
            session_id=row[0],
            protocol_version=row[1],
            client_params=row[2],
            principal=row[3],
            server_name=row[4],
            created=_epoch(row[5], connection),
            last_seen=_epoch(row[6], connection),
        )

    @_retry
    @_serial_on_sqlite
    def touch_session(self, session_id: str, now: float) -> None:
        _rows(MCPSession).filter(session_id=session_id).update(last_seen=_ts(now))

    @_retry
    @_serial_on_sqlite
    def delete_session(self, session_id: str) -> bool:
        # Elicitation rows stay: they are the record of what was asked and answered.
        deleted, _ = _rows(MCPSession).filter(session_id=session_id).delete()
        _rows(MCPEvent).filter(session_id=session_id).delete()
        _rows(MCPPendingRequest).filter(session_id=session_id).delete()
        return deleted > 0

    # Not idempotent: a re-run after a lost acknowledgement appends the event again (its id is
    # the database's, so the re-run cannot tell its first attempt's row from another). The
    # client then receives the message twice: readers stop at a stream's first final event, and
    # a second answer to a request sent twice is dropped (the first answer wins).
    @_retry
    @_serial_on_sqlite
    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        connection = connections[_alias()]
        if connection.vendor == "mysql" and connection.get_autocommit() and not connection.in_atomic_block:
            # Appends to one stream take turns, so its ids commit in order (see take_stream_turn):
            # the INSERT commits (autocommit) before the turn is left. Inside an application's
            # transaction the commit comes later, when a turn left now would guard nothing.
            with connection.cursor() as cursor:
                turn = take_stream_turn(cursor, session_id, stream_key)
                try:
                    row = _rows(MCPEvent).create(
                        session_id=session_id, stream_key=stream_key, message=message, final=final
                    )
                finally:
                    leave_stream_turn(cursor, turn)
            return row.id
        if connection.vendor != "postgresql":
            row = _rows(MCPEvent).create(session_id=session_id, stream_key=stream_key, message=message, final=final)
            return row.id
        # Appends to one stream take turns, so its ids commit in order (see stream_lock_key).
        with _writing(connection, one_statement=True) as cursor:
            cursor.execute(
                _append_event_sql(connection.ops),
                [session_id, stream_key, message, final, timezone.now(), stream_lock_key(session_id, stream_key)],
            )
            return int(cursor.fetchone()[0])

    @_retry
    @_serial_in_memory
    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        rows = _rows(MCPEvent).filter(session_id=session_id, stream_key=stream_key, id__gt=after).order_by("id")
        return [
            EventRecord(r.id, r.session_id, r.stream_key, r.message, r.final)
            for r in rows.only("id", "session_id", "stream_key", "message", "final")
        ]

    @_retry
    @_serial_in_memory
    def has_stream(self, session_id: str, stream_key: str) -> bool:
        return _rows(MCPEvent).filter(session_id=session_id, stream_key=stream_key).exists()

    @_retry
    @_serial_in_memory
    def get_cursor(self, session_id: str) -> int:
        value = _rows(MCPSession).filter(session_id=session_id).values_list("get_cursor", flat=True).first()
        return int(value or 0)

    @_retry
    @_serial_on_sqlite
    def set_cursor(self, session_id: str, event_id: int) -> None:
        _rows(MCPSession).filter(session_id=session_id, get_cursor__lt=event_id).update(get_cursor=event_id)

    @_retry(rerun=rerun_insert(IntegrityError, pending_written))
    @_serial_on_sqlite
    def create_pending(
        self,
        session_id: str,
        request_id: str,
        method: str,
        params: str,
        elicitation: ElicitationRecord | None = None,
    ) -> None:
        with transaction.atomic(using=_alias()):
            _rows(MCPPendingRequest).create(session_id=session_id, request_id=request_id, method=method, params=params)
            if elicitation is not None:
                _elicitation_row(elicitation).save(force_insert=True, using=_alias())

    @_retry(rerun=rerun_claim(answer_recorded))
    @_serial_on_sqlite
    def answer_pending(
        self,
        session_id: str,
        request_id: str,
        response: str,
        status: str | None = None,
        answer: str | None = None,
    ) -> bool:
        now = timezone.now()
        with transaction.atomic(using=_alias()):
            # One UPDATE with the NULL guard: the first answer wins, whichever worker it reaches.
            updated = (
                _rows(MCPPendingRequest)
                .filter(session_id=session_id, request_id=request_id, response__isnull=True)
                .update(response=response, answered=now)
            )
            if updated == 1 and status is not None:
                _rows(MCPElicitation).filter(session_id=session_id, request_key=request_id, status="pending").update(
                    status=status, answer=answer, updated=now
                )
        return updated == 1

    @_retry
    @_serial_in_memory
    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None:
        connection = connections[_alias()]
        table = connection.ops.quote_name(MCPPendingRequest._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT method, params, response, created FROM {table} WHERE session_id = %s AND request_id = %s",
                [session_id, request_id],
            )
            row = cursor.fetchone()
        if row is None:
            return None
        return PendingRequestRecord(session_id, request_id, row[0], row[1], row[2], _epoch(row[3], connection))

    @_retry
    @_serial_in_memory
    def answered_since(self, since: float) -> list[tuple[str, str, str]]:
        # One query per poll for all of this process's waiting tools (index on ``answered``).
        rows = (
            _rows(MCPPendingRequest)
            .filter(answered__gte=_ts(since))
            .values_list("session_id", "request_id", "response")
        )
        return [(sid, rid, response) for sid, rid, response in rows if response is not None]

    @_retry
    @_serial_in_memory
    def pending_keys(self, session_ids: Sequence[str]) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        unique = list(dict.fromkeys(session_ids))
        for start in range(0, len(unique), _CHUNK):
            # Rows whose session is gone do not count: one written while a DELETE's transaction
            # was open escaped the DELETE (see SessionStore.pending_keys).
            rows = (
                _rows(MCPPendingRequest)
                .filter(session_id__in=unique[start : start + _CHUNK])
                .filter(Exists(_rows(MCPSession).filter(session_id=OuterRef("session_id"))))
                .values_list("session_id", "request_id")
            )
            found.update(rows)
        return found

    @_retry
    @_serial_on_sqlite
    def delete_pending(self, session_id: str, request_id: str) -> None:
        _rows(MCPPendingRequest).filter(session_id=session_id, request_id=request_id).delete()

    @_retry
    @_serial_in_memory
    def purge_expired(self, older_than: float) -> int:
        _rows(MCPRequestState).filter(expires__lt=_ts(older_than)).delete()
        stale = list(_rows(MCPSession).filter(last_seen__lt=_ts(older_than)).values_list("session_id", flat=True))
        for session_id in stale:
            try:
                self.delete_session(session_id)
            except DatabaseError:  # pragma: no cover - next purge retries
                continue
        # Events appended for a session after it ended (a completion's notification): no
        # session's deletion takes them.
        _rows(MCPEvent).filter(created__lt=_ts(older_than)).exclude(
            session_id__in=_rows(MCPSession).values("session_id")
        ).delete()
        # So are a question's pending rows written while its session's DELETE committed.
        _rows(MCPPendingRequest).filter(created__lt=_ts(older_than)).exclude(
            session_id__in=_rows(MCPSession).values("session_id")
        ).delete()
        return len(stale)

    # -- elicitations ------------------------------------------------------------------------

    @_retry
    @_serial_in_memory
    def get_elicitation(self, record_id: str) -> ElicitationRecord | None:
        row = _rows(MCPElicitation).filter(id=record_id).first()
        return _elicitation_record(row) if row is not None else None

    @_retry
    @_serial_in_memory
    def find_elicitations(self, elicitation_id: str, server_name: str | None = None) -> list[ElicitationRecord]:
        rows = _rows(MCPElicitation).filter(elicitation_id=elicitation_id)
        if server_name is not None:
            rows = rows.filter(server_name=server_name)
        tenant = connection_tenant(connections[_alias()])
        if tenant is not None:
            # django-tenants: the questions of the tenant the connection is set to (its webhook's
            # request, a task in its schema_context), not another tenant's under the same id.
            rows = rows.filter(principal__startswith=tenant_prefix(tenant))
        return exactly([_elicitation_record(r) for r in rows.order_by("created", "id")], elicitation_id, server_name)

    @_retry
    @_serial_on_sqlite
    def update_elicitation(
        self,
        record_id: str,
        status: str,
        now: float,
        *,
        detail: str | None = None,
        from_statuses: tuple[str, ...] = ("pending",),
        without_detail: bool = False,
    ) -> bool:
        changes: dict[str, Any] = {"status": status, "updated": _ts(now)}
        if detail is not None:
            changes["detail"] = detail
        rows = _rows(MCPElicitation).filter(id=record_id, status__in=from_statuses)
        if without_detail:
            rows = rows.filter(detail__isnull=True)
        return rows.update(**changes) == 1

    @_retry
    @_serial_on_sqlite
    def complete_elicitations(
        self,
        elicitation_id: str,
        now: float,
        server_name: str | None = None,
        *,
        principal: Any = ANY_PRINCIPAL,
        notification: str | None = None,
    ) -> list[ElicitationRecord]:
        rows = asked_by(self.find_elicitations(elicitation_id, server_name), principal)
        if not rows:
            return []
        connection = connections[_alias()]
        # The rows and their notifications commit together (see SessionStore.complete_elicitations).
        # MySQL, MariaDB: the GET streams' turns (see append_event) are held until the commit.
        sessions = notified_sessions(rows) if notification is not None else []
        with _stream_turns(connection, sessions), transaction.atomic(using=connection.alias):
            moved = complete_rows(self, rows, now)
            if notification is not None:
                for session_id in notified_sessions(moved):
                    self.append_event(session_id, GET_STREAM, notification)
        return moved

    @_retry
    @_serial_on_sqlite
    def expire_elicitations(self, now: float) -> int:
        # Every worker runs this on each heartbeat and there is usually nothing to expire: an
        # indexed read first, so the heartbeat takes no write lock for nothing.
        overdue = _rows(MCPElicitation).filter(overdue_rows(now))
        if not overdue.exists():
            return 0
        return overdue.update(status="expired", updated=_ts(now))

    # -- 2026-07-28 request state ------------------------------------------------------------

    @_retry
    @_serial_in_memory
    def get_request_state(self, state_id: str) -> RequestStateRecord | None:
        row = _rows(MCPRequestState).filter(state_id=state_id).first()
        return None if row is None else record_of(RequestStateRecord, row)

    @_retry(rerun=rerun_insert(IntegrityError, state_saved))
    @_serial_on_sqlite
    def save_request_state(self, state: RequestStateRecord, elicitations: list[ElicitationRecord]) -> None:
        connection = connections[_alias()]
        state_values = column_values(state, _ts)
        rows = [column_values(record, _ts) for record in elicitations]
        if connection.vendor == "postgresql" and len(rows) <= ONE_STATEMENT_QUESTIONS:
            # One statement (a data-modifying WITH): one round trip to the server instead of
            # BEGIN, one INSERT per table and COMMIT.
            ops = connection.ops
            sql = _insert_sql(connection.vendor, ops, MCPRequestState._meta.db_table, tuple(state_values))
            params = _adapted(ops, state_values)
            if rows:
                inserts = _insert_sql(connection.vendor, ops, MCPElicitation._meta.db_table, tuple(rows[0]), len(rows))
                sql = f"WITH saved_state AS ({sql}) {inserts}"
                params += [value for row in rows for value in _adapted(ops, row)]
            with _writing(connection, one_statement=True) as cursor:
                cursor.execute(sql, params)
            return
        with _writing(connection) as cursor:
            _insert(cursor, connection, MCPRequestState, state_values)
            for row in rows:
                _insert(cursor, connection, MCPElicitation, row)

    @_retry(rerun=rerun_claim(state_redeemed))
    @_serial_on_sqlite
    def consume_request_state(
        self,
        state_id: str,
        server_name: str,
        method: str,
        target: str,
        args_digest: str,
        principal: str | None,
        now: float,
        answers: dict[str, tuple[str, str | None]],
    ) -> RequestStateRecord | None:
        connection = connections[_alias()]
        ops = connection.ops
        states = ops.quote_name(MCPRequestState._meta.db_table)
        rows = ops.quote_name(MCPElicitation._meta.db_table)
        moment = ops.adapt_datetimefield_value(_ts(now))
        # MySQL and MariaDB compare text by its collation, case-insensitive and blind to trailing
        # spaces by default: the binding is compared as bytes there. (The state id is found
        # through its index as usual; the handle's HMAC already pins it exactly.)
        exact = "CAST(%s AS BINARY)" if connection.vendor == "mysql" else "%s"
        principal_clause = "principal IS NULL" if principal is None else f"principal = {exact}"
        claim = (
            f"UPDATE {states} SET consumed = %s WHERE state_id = %s AND consumed IS NULL AND expires > %s "
            f"AND server_name = {exact} AND method = {exact} AND target = {exact} AND args_digest = {exact} "
            f"AND {principal_clause}"
        )
        claim_params = [moment, state_id, moment, server_name, method, target, args_digest]
        if principal is not None:
            claim_params.append(principal)
        # The single-use guarantee is the one guarded UPDATE of the state: of two workers
        # redeeming the same handle, exactly one sees a row change.
        if connection.vendor == "postgresql" and len(answers) <= ONE_STATEMENT_ANSWERS:
            # One statement: the claim, and the answers recorded only if the claim won.
            sql = f"WITH claimed AS ({claim} RETURNING state_id, sealed, created, expires)"
            params = claim_params
            for number, (key, (status, answer)) in enumerate(answers.items()):
                sql += (
                    f", answered_{number} AS (UPDATE {rows} SET status = %s, answer = %s, updated = %s "
                    f"FROM claimed WHERE {rows}.state_id = claimed.state_id AND {rows}.request_key = %s "
                    f"AND {rows}.status = 'pending')"
                )
                params += [status, answer, moment, key]
            # The questions the retry left unanswered (disjoint from the answered ones: every
            # part of one statement sees the rows as they were before it).
            sql += (
                f", unanswered AS (UPDATE {rows} SET status = 'expired', detail = %s, updated = %s "
                f"FROM claimed WHERE {rows}.state_id = claimed.state_id AND {rows}.status = 'pending'"
            )
            params += [UNANSWERED_DETAIL, moment]
            if answers:
                sql += f" AND {rows}.request_key NOT IN ({', '.join(['%s'] * len(answers))})"
                params += list(answers)
            sql += ")"
            with _writing(connection, one_statement=True) as cursor:
                cursor.execute(sql + " SELECT sealed, created, expires FROM claimed", params)
                claimed = cursor.fetchone()
            if claimed is None:
                return None
            sealed, created, expires = claimed
        else:
            with _writing(connection) as cursor:
                returning = _update_returning(connection)
                cursor.execute(claim + (" RETURNING sealed, created, expires" if returning else ""), claim_params)
                if returning:
                    claimed = cursor.fetchone()
                    if claimed is None:
                        return None
                else:
                    if cursor.rowcount != 1:
                        return None
                    cursor.execute(f"SELECT sealed, created, expires FROM {states} WHERE state_id = %s", [state_id])
                    claimed = cursor.fetchone()
                sealed, created, expires = claimed
                for key, (status, answer) in answers.items():
                    cursor.execute(
                        # The key as bytes on MySQL too: the SDK takes an answer by its exact key.
                        f"UPDATE {rows} SET status = %s, answer = %s, updated = %s "
                        f"WHERE state_id = %s AND request_key = {exact} AND status = 'pending'",
                        [status, answer, moment, state_id, key],
                    )
                cursor.execute(
                    f"UPDATE {rows} SET status = 'expired', detail = %s, updated = %s "
                    # COALESCE (the status is never NULL) keeps SQLite's planner, which has no
                    # statistics, off the status index: it would walk every pending row.
                    "WHERE state_id = %s AND COALESCE(status, '') = 'pending'",
                    [UNANSWERED_DETAIL, moment, state_id],
                )
        return RequestStateRecord(
            state_id=state_id,
            server_name=server_name,
            method=method,
            target=target,
            args_digest=args_digest,
            principal=principal,
            sealed=sealed,
            created=_epoch(created, connection),
            expires=_epoch(expires, connection),
            consumed=now,
        )

    @_retry
    @_serial_in_memory
    def elicitations_for_state(self, state_id: str) -> list[ElicitationRecord]:
        return [_elicitation_record(r) for r in _rows(MCPElicitation).filter(state_id=state_id).order_by("created")]

    @_retry
    @_serial_in_memory
    def stream_elicitations(self, session_id: str, stream_key: str) -> list[ElicitationRecord]:
        rows = _rows(MCPElicitation).filter(session_id=session_id, stream_key=stream_key).order_by("created")
        return [_elicitation_record(r) for r in rows]

    @_retry
    @_serial_in_memory
    def call_elicitations(self, session_id: str, call_id: str) -> list[ElicitationRecord]:
        rows = _rows(MCPElicitation).filter(session_id=session_id, call_id=call_id).order_by("created")
        return [_elicitation_record(r) for r in rows]

    @_retry
    @_serial_in_memory
    def purge_elicitations(self, older_than: float) -> int:
        deleted, _ = _rows(MCPElicitation).exclude(status="pending").filter(updated__lt=_ts(older_than)).delete()
        return deleted

    # -- workers -----------------------------------------------------------------------------

    def close_thread_connections(self) -> None:
        # Django keeps a connection per thread and alias, which only a request's own thread
        # has closed for it (request_finished).
        connections.close_all()

    def release_thread_connections(self) -> None:
        # Django's connection pool (OPTIONS["pool"]) holds few connections, and a database
        # thread's would stay checked out while the thread idles (until the endpoint has been
        # idle for a second): 8 threads take them all and the requests' threads wait for one.
        # Given back, the pool keeps it open for the next call. Persistent connections stay.
        alias = _alias()
        if not connections.settings[alias]["OPTIONS"].get("pool"):
            return  # without looking the thread's connection up (microseconds, per store call)
        connection = connections[alias]
        if connection.connection is not None and not connection.in_atomic_block:
            with contextlib.suppress(DatabaseError):  # a broken one is dropped all the same
                connection.close()

    def pool_exhausted(self, error: BaseException) -> bool:
        return _pool_exhausted(error)

    def process_private(self) -> bool:
        # Django's test database on SQLite is in memory.
        connection = connections[_alias()]
        return connection.vendor == "sqlite" and bool(connection.is_in_memory_db())

    @_retry
    @_serial_on_sqlite
    def beat_worker(self, worker_id: str, now: float) -> None:
        if _rows(MCPWorker).filter(worker_id=worker_id).update(last_beat=_ts(now)) == 0:
            try:
                with transaction.atomic(using=_alias()):
                    _rows(MCPWorker).create(worker_id=worker_id, last_beat=_ts(now))
            except IntegrityError:
                _rows(MCPWorker).filter(worker_id=worker_id).update(last_beat=_ts(now))

    @_retry
    @_serial_in_memory
    def worker_seen(self, worker_id: str) -> float | None:
        beat = _rows(MCPWorker).filter(worker_id=worker_id).values_list("last_beat", flat=True).first()
        return beat.timestamp() if beat is not None else None


def purge(elicitation_days: float = 30.0, now: float | None = None) -> dict[str, int]:
    """Delete what MCP no longer needs, as ``manage.py mcp_purge`` and the Celery task
    ``mcp_django.purge`` do: legacy sessions idle past ``SESSION_TTL`` (with their event logs),
    expired request states, and answered, expired or completed questions older than
    ``elicitation_days``; questions past their deadline are marked expired first. Pending
    questions are never deleted. ``ValueError`` for a number of days that is negative or not
    finite, before anything is deleted. How many rows of each kind went."""
    from mcp_django.conf import mcp_settings

    now = time.time() if now is None else now
    return purge_store(DjangoStore(), float(mcp_settings.SESSION_TTL), elicitation_days, now)


@contextlib.contextmanager
def _stream_turns(connection: Any, session_ids: Sequence[str]) -> Iterator[None]:
    """MySQL and MariaDB in autocommit mode: hold the turns of these sessions' GET streams
    (:func:`mcp_common.store.take_stream_turn`, in the order given) around a transaction that
    appends to them, so that their event ids commit in order. Elsewhere nothing: PostgreSQL's
    append takes its turn in the transaction; inside an application's transaction the commit
    comes later, when a turn left now would guard nothing."""
    if connection.vendor != "mysql" or not session_ids or connection.in_atomic_block or not connection.get_autocommit():
        yield
        return
    with connection.cursor() as cursor:
        turns: list[str] = []
        try:
            for session_id in session_ids:
                turns.append(take_stream_turn(cursor, session_id, GET_STREAM))
            yield
        finally:
            for turn in reversed(turns):
                leave_stream_turn(cursor, turn)


@contextlib.contextmanager
def _writing(connection: Any, one_statement: bool = False) -> Iterator[Any]:
    """A cursor inside one write transaction, for the hot paths of every question.

    In autocommit mode on SQLite or PostgreSQL the transaction is opened and committed on the
    driver's connection directly (Django's ``atomic`` and cursor wrappers cost more than the
    statements here; these queries then skip Django's query log and execute wrappers).
    ``one_statement``: the caller runs a single statement, which PostgreSQL in autocommit mode
    makes a transaction of its own, without ``BEGIN`` and ``COMMIT`` round trips. Inside an
    application's ``atomic`` block (``ATOMIC_REQUESTS``, a test case), or on other databases,
    it is ``transaction.atomic`` as usual. Driver errors surface as Django's.
    """
    vendor = connection.vendor
    if vendor not in ("sqlite", "postgresql") or connection.in_atomic_block or not connection.get_autocommit():
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            yield cursor
        return
    with connection.wrap_database_errors:
        connection.ensure_connection()
        raw = _driver_cursor(connection)
        cursor = _DriverCursor(raw, vendor == "sqlite")
        bracket = vendor == "sqlite" or not one_statement
        if bracket:
            raw.execute("BEGIN IMMEDIATE" if vendor == "sqlite" else "BEGIN")
        try:
            yield cursor
        except BaseException:
            if bracket:
                with contextlib.suppress(Exception):
                    raw.execute("ROLLBACK")
            raise
        else:
            if bracket:
                raw.execute("COMMIT")
        finally:
            raw.close()


def _driver_cursor(connection: Any) -> Any:
    """The driver's own cursor. With psycopg 3 it binds parameters on the server (Django's
    default cursor quotes them into the SQL text: twice the client's and the server's work
    for the store's wide INSERTs). It prepares statements only as the connection's
    ``prepare_threshold`` says, which Django sets to ``None`` unless ``OPTIONS`` names one: a
    pooler in transaction mode (PgBouncer before 1.21) keeps working
    (tests/protocol/test_pgbouncer.py)."""
    raw = connection.connection
    if connection.vendor == "postgresql":
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if is_psycopg3:
            import psycopg
            from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
            from django.db.backends.postgresql.psycopg_any import register_tzloader
            from psycopg.pq import Format

            cursor = psycopg.Cursor(raw)
            # As Django's own cursors: times read in the zone Django expects now (a connection
            # opened under other settings, as a test's override of USE_TZ leaves it, reads
            # them otherwise).
            if connection.timezone != raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT).timezone:
                register_tzloader(connection.timezone, cursor)
            return cursor
    return raw.cursor()


class _DriverCursor:
    """The driver's cursor, taking Django's ``%s`` placeholders (SQLite's driver wants ``?``)."""

    __slots__ = ("_cursor", "_qmark")

    def __init__(self, cursor: Any, qmark: bool) -> None:
        self._cursor = cursor
        self._qmark = qmark

    def execute(self, sql: str, params: Any = ()) -> None:
        self._cursor.execute(_qmark(sql) if self._qmark else sql, params)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)


@functools.lru_cache(maxsize=256)
def _qmark(sql: str) -> str:
    return sql.replace("%s", "?")


def _update_returning(connection: Any) -> bool:
    """Whether ``UPDATE ... RETURNING`` saves the read-back (PostgreSQL; SQLite >= 3.35)."""
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        return bool(connection.Database.sqlite_version_info >= (3, 35))
    return False


def _alias() -> str:
    """The database of the MCP tables: where the project's routers write them. Every query of
    the store goes there, reads included (:func:`_rows`)."""
    alias = router.db_for_write(MCPSession)
    if alias not in _ALIASES:
        _first_use(alias)
    return alias


_ALIASES: set[str] = set()
"""The databases the store's queries went to in this process: one, unless routers misroute."""
_aliases_lock = threading.Lock()


def _first_use(alias: str) -> None:
    """The first query on ``alias``: a second database in one process means the routers choose
    it by something the endpoint's own threads do not have (a request's thread-local)."""
    with _aliases_lock:
        if alias in _ALIASES:
            return
        _ALIASES.add(alias)
        if len(_ALIASES) != 2:
            return
        seen = ", ".join(repr(name) for name in sorted(_ALIASES))
    logger.error(
        "The MCP tables' queries went to more than one database in this process (%s): your "
        "DATABASE_ROUTERS choose mcp_django's database by something that is not the same on every "
        "thread (a tenant a middleware keeps in a thread-local?). The MCP endpoint's own threads (its "
        "heartbeat, the poll for legacy answers, a call's work while it waits for its client), other "
        "workers and Celery tasks do not see a request's thread-locals: answers would be looked for "
        "in another database than the one they were written to. Have your router route mcp_django's "
        "models to one database whatever the thread (if model._meta.app_label == 'mcp_django': "
        "return 'default').",
        seen,
    )


@receiver(setting_changed)
def _routers_changed(setting: str, **kwargs: Any) -> None:
    if setting in ("DATABASE_ROUTERS", "DATABASES"):
        with _aliases_lock:
            _ALIASES.clear()


def _rows(model: type[M]) -> QuerySet[M]:
    """``model``'s rows on the store's database. Not where routers send reads: a
    primary/replica router reads from a replica that lags behind, and the store reads what it
    has just written (a session after its ``initialize``, a question a webhook completes)."""
    return model._default_manager.using(_alias())


def _epoch(value: Any, connection: Any) -> float:
    """A datetime column read with plain SQL, as epoch seconds (SQLite may give text, and a
    naive time: under ``USE_TZ`` in the database's zone, UTC unless ``DATABASES[...]["TIME_ZONE"]``
    names another, as the backend wrote it; else local wall time, as :func:`_ts` wrote it)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None and settings.USE_TZ:
            value = timezone.make_aware(value, connection.timezone)
        return value.timestamp()
    raise TypeError(f"unexpected datetime value from {connection.vendor}: {value!r}")


def _insert(cursor: Any, connection: Any, model: Any, values: dict[str, Any]) -> None:
    """One plain INSERT of ``values`` (datetimes adapted the way the backend stores them)."""
    ops = connection.ops
    cursor.execute(_insert_sql(connection.vendor, ops, model._meta.db_table, tuple(values)), _adapted(ops, values))


def _adapted(ops: Any, values: dict[str, Any]) -> list[Any]:
    return [ops.adapt_datetimefield_value(v) if isinstance(v, dt.datetime) else v for v in values.values()]


_INSERT_SQL: dict[tuple[str, str, tuple[str, ...], int], str] = {}


def _insert_sql(vendor: str, ops: Any, table: str, columns: tuple[str, ...], rows: int = 1) -> str:
    """The INSERT statement of ``rows`` rows of these columns, written once per database vendor."""
    key = (vendor, table, columns, rows)
    sql = _INSERT_SQL.get(key)
    if sql is None:
        names = ", ".join(ops.quote_name(name) for name in columns)
        marks = ", ".join([f"({', '.join(['%s'] * len(columns))})"] * rows)
        sql = _INSERT_SQL[key] = f"INSERT INTO {ops.quote_name(table)} ({names}) VALUES {marks}"
    return sql


_APPEND_EVENT_SQL: dict[str, str] = {}


def _append_event_sql(ops: Any) -> str:
    """PostgreSQL: the INSERT of an event that takes the stream's lock before its row (and its
    id) is made: the lock's subquery runs below the row's ``nextval``. Written once."""
    table = MCPEvent._meta.db_table
    sql = _APPEND_EVENT_SQL.get(table)
    if sql is None:
        names = ", ".join(map(ops.quote_name, ("session_id", "stream_key", "message", "final", "created")))
        sql = _APPEND_EVENT_SQL[table] = (
            f"INSERT INTO {ops.quote_name(table)} ({names}) SELECT %s, %s, %s, %s, %s "
            f"FROM (SELECT pg_advisory_xact_lock(%s::bigint)) AS turn RETURNING {ops.quote_name('id')}"
        )
    return sql


_ELICITATION_FIELDS = [f.name for f in fields(ElicitationRecord)]
_TIME_FIELDS = ("created", "updated", "expires")


def _elicitation_row(record: ElicitationRecord) -> MCPElicitation:
    return MCPElicitation(**column_values(record, _ts))


def _elicitation_record(row: MCPElicitation) -> ElicitationRecord:
    values = {name: getattr(row, name) for name in _ELICITATION_FIELDS}
    for name in _TIME_FIELDS:
        values[name] = values[name].timestamp()
    return ElicitationRecord(**values)
