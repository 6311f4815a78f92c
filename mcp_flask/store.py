"""The core's ``SessionStore`` on SQLAlchemy, and the engine it runs on.

Called from the endpoint's database threads, never from a request or application context:
each call opens its own ``Session`` on the extension's own engine (not Flask-SQLAlchemy's
``db.session``, which is scoped to an application context that those threads do not have).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, delete, event, select, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from mcp_common.store import EventRecord, PendingRequestRecord, SessionRecord
from mcp_flask.models import MCPEvent, MCPPendingRequest, MCPSession, utcnow

P = ParamSpec("P")
T = TypeVar("T")

SQLITE_TIMEOUT = 20
"""Seconds a SQLite connection waits for another process's write lock before failing."""


def _ts(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC)


def _retry(fn: Callable[P, T]) -> Callable[P, T]:
    """Retry once when the connection itself went bad (a database restart, a dropped socket).

    ``pool_pre_ping`` catches most stale connections at checkout; this catches the ones that
    die between the ping and the statement. Other errors (constraints, a locked SQLite file)
    are not retried.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            return fn(*args, **kwargs)

    return wrapper


class SQLAlchemyStore:
    """Sessions, events and pending requests in a SQL database, through SQLAlchemy 2.x.

    ``engine`` must reach a database migrated with :func:`mcp_flask.migrate`.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    @_retry
    def create_session(self, record: SessionRecord) -> None:
        with self._session() as s, s.begin():
            s.add(
                MCPSession(
                    session_id=record.session_id,
                    server_name=record.server_name,
                    protocol_version=record.protocol_version,
                    client_params=record.client_params,
                    principal=record.principal,
                    get_cursor=0,
                    created=_ts(record.created),
                    last_seen=_ts(record.last_seen),
                )
            )

    @_retry
    def get_session(self, session_id: str) -> SessionRecord | None:
        with self._session() as s, s.begin():
            row = s.get(MCPSession, session_id)
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
        with self._session() as s, s.begin():
            s.execute(
                update(MCPSession).where(MCPSession.session_id == session_id).values(last_seen=_ts(now)),
                execution_options={"synchronize_session": False},
            )

    @_retry
    def delete_session(self, session_id: str) -> bool:
        options = {"synchronize_session": False}
        with self._session() as s, s.begin():
            deleted = s.execute(
                delete(MCPSession).where(MCPSession.session_id == session_id), execution_options=options
            )
            s.execute(delete(MCPEvent).where(MCPEvent.session_id == session_id), execution_options=options)
            s.execute(
                delete(MCPPendingRequest).where(MCPPendingRequest.session_id == session_id), execution_options=options
            )
            return bool(deleted.rowcount)  # type: ignore[attr-defined]

    @_retry
    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        with self._session() as s, s.begin():
            row = MCPEvent(session_id=session_id, stream_key=stream_key, message=message, final=final)
            s.add(row)
            # The autoincrement key is the event id: monotonic across every worker.
            s.flush()
            return int(row.id)

    @_retry
    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        query = (
            select(MCPEvent.id, MCPEvent.session_id, MCPEvent.stream_key, MCPEvent.message, MCPEvent.final)
            .where(MCPEvent.session_id == session_id, MCPEvent.stream_key == stream_key, MCPEvent.id > after)
            .order_by(MCPEvent.id)
        )
        with self._session() as s, s.begin():
            return [
                EventRecord(int(r.id), r.session_id, r.stream_key, r.message, bool(r.final)) for r in s.execute(query)
            ]

    @_retry
    def has_stream(self, session_id: str, stream_key: str) -> bool:
        query = select(MCPEvent.id).where(MCPEvent.session_id == session_id, MCPEvent.stream_key == stream_key)
        with self._session() as s, s.begin():
            return s.scalar(query.limit(1)) is not None

    @_retry
    def get_cursor(self, session_id: str) -> int:
        with self._session() as s, s.begin():
            value = s.scalar(select(MCPSession.get_cursor).where(MCPSession.session_id == session_id))
            return int(value or 0)

    @_retry
    def set_cursor(self, session_id: str, event_id: int) -> None:
        # The guard keeps the cursor monotonic when two GET streams deliver concurrently.
        with self._session() as s, s.begin():
            s.execute(
                update(MCPSession)
                .where(MCPSession.session_id == session_id, MCPSession.get_cursor < event_id)
                .values(get_cursor=event_id),
                execution_options={"synchronize_session": False},
            )

    @_retry
    def create_pending(self, session_id: str, request_id: str, method: str, params: str) -> None:
        with self._session() as s, s.begin():
            s.add(MCPPendingRequest(session_id=session_id, request_id=request_id, method=method, params=params))

    @_retry
    def answer_pending(self, session_id: str, request_id: str, response: str) -> bool:
        # One UPDATE with the NULL guard: the first answer wins, whichever worker it reaches.
        query = (
            update(MCPPendingRequest)
            .where(
                MCPPendingRequest.session_id == session_id,
                MCPPendingRequest.request_id == request_id,
                MCPPendingRequest.response.is_(None),
            )
            .values(response=response, answered=utcnow())
        )
        with self._session() as s, s.begin():
            result = s.execute(query, execution_options={"synchronize_session": False})
            return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    @_retry
    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None:
        query = select(MCPPendingRequest).where(
            MCPPendingRequest.session_id == session_id, MCPPendingRequest.request_id == request_id
        )
        with self._session() as s, s.begin():
            row = s.scalar(query)
            if row is None:
                return None
            return PendingRequestRecord(
                row.session_id, row.request_id, row.method, row.params, row.response, row.created.timestamp()
            )

    @_retry
    def delete_pending(self, session_id: str, request_id: str) -> None:
        with self._session() as s, s.begin():
            s.execute(
                delete(MCPPendingRequest).where(
                    MCPPendingRequest.session_id == session_id, MCPPendingRequest.request_id == request_id
                ),
                execution_options={"synchronize_session": False},
            )

    @_retry
    def purge_expired(self, older_than: float) -> int:
        with self._session() as s, s.begin():
            stale = list(s.scalars(select(MCPSession.session_id).where(MCPSession.last_seen < _ts(older_than))))
        for session_id in stale:
            try:
                self.delete_session(session_id)
            except SQLAlchemyError:  # pragma: no cover - the next purge retries
                continue
        return len(stale)


# -- engines -----------------------------------------------------------------------------------


def database_url(uri: str | URL) -> URL:
    """``uri`` with PostgreSQL pointed at psycopg 3 (``postgresql://`` and ``postgres://``
    otherwise select psycopg2, which this project does not depend on)."""
    url = make_url(uri)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _is_memory_sqlite(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def make_engine(uri: str | URL, options: Mapping[str, Any] | None = None) -> Engine:
    """The engine the store runs on, tuned for several threads and processes.

    * SQLite: a 20 s lock timeout and WAL journal mode, so that several worker processes share
      one file (readers never block the writer); an in-memory database is one shared
      connection (``StaticPool``), usable by one process only.
    * PostgreSQL (``postgresql://`` is rewritten to ``postgresql+psycopg://``) and others:
      ``pool_pre_ping`` so a restarted database costs one retry, not an error.
    * Any engine: connections inherited through ``fork()`` (gunicorn ``--preload``) are
      dropped in the child, never shared with the parent.

    ``options`` are passed to :func:`sqlalchemy.create_engine` and win over these defaults.
    """
    url = database_url(uri)
    kwargs: dict[str, Any] = dict(options or {})
    if url.get_backend_name() == "sqlite":
        connect_args = {"timeout": SQLITE_TIMEOUT, **kwargs.pop("connect_args", {})}
        memory = _is_memory_sqlite(url)
        if memory:
            connect_args.setdefault("check_same_thread", False)
            kwargs.setdefault("poolclass", StaticPool)
        engine = create_engine(url, connect_args=connect_args, **kwargs)
        if not memory:
            event.listen(engine, "connect", _sqlite_wal)
    else:
        kwargs.setdefault("pool_pre_ping", True)
        engine = create_engine(url, **kwargs)
    _dispose_after_fork(engine)
    return engine


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


def _dispose_after_fork(engine: Engine) -> None:
    ref = weakref.ref(engine)

    def in_child() -> None:
        engine = ref()
        if engine is not None:
            # close=False: the parent still owns those sockets; the child just forgets them.
            engine.dispose(close=False)

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=in_child)
