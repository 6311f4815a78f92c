"""The core's ``SessionStore`` on SQLAlchemy, and the engine it runs on.

Called from the endpoint's database threads, never from a request or application context:
each call opens its own ``Session`` on the extension's own engine (not Flask-SQLAlchemy's
``db.session``, which is scoped to an application context that those threads do not have).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, ParamSpec, TypeVar, cast, overload

from sqlalchemy import BigInteger, Engine, String, bindparam, create_engine, delete, event, func, insert, select, update
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.mysql import BINARY as MYSQL_BINARY
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from mcp_common.checkpoint import AUTOCHECKPOINT_PAGES
from mcp_common.store import (
    ANSWERED_OPEN_STATUSES,
    ANY_PRINCIPAL,
    GET_STREAM,
    ONE_STATEMENT_ANSWERS,
    ONE_STATEMENT_QUESTIONS,
    OPEN_STATUSES,
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
    exactly,
    leave_stream_turn,
    missing_table,
    notified_sessions,
    overdue,
    pending_written,
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
from mcp_flask.models import (
    MCPElicitation,
    MCPEvent,
    MCPPendingRequest,
    MCPRequestState,
    MCPSession,
    MCPWorker,
    utcnow,
)

P = ParamSpec("P")
T = TypeVar("T")

SQLITE_TIMEOUT = 20
"""Seconds a SQLite connection waits for another process's write lock before failing."""

IDLE_PING_SECONDS = 1.0
"""A pooled connection that rested this long is pinged before use (PostgreSQL and others)."""


def _ts(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC)


_ELICITATION_FIELDS = tuple(f.name for f in fields(ElicitationRecord))
_ELICITATION_TIMES = ("created", "updated", "expires")
_NO_SYNC: dict[str, Any] = {"synchronize_session": False}
"""Bulk UPDATE/DELETE options: the store never keeps ORM objects across statements."""
_CHUNK = 500
"""Session ids per ``IN (...)`` query: well under every backend's parameter limit."""


def _elicitation_row(record: ElicitationRecord) -> MCPElicitation:
    return MCPElicitation(**column_values(record, _ts))


def _elicitation_record(row: MCPElicitation) -> ElicitationRecord:
    values = {name: getattr(row, name) for name in _ELICITATION_FIELDS}
    for name in _ELICITATION_TIMES:
        values[name] = values[name].timestamp()
    return ElicitationRecord(**values)


@overload
def _retry(fn: Callable[P, T]) -> Callable[P, T]: ...


@overload
def _retry(*, rerun: Rerun) -> Callable[[Callable[P, T]], Callable[P, T]]: ...


def _retry(fn: Callable[P, T] | None = None, *, rerun: Rerun | None = None) -> Any:
    """Retry once when the connection itself went bad (a database restart, a dropped socket).

    The idle ping (:func:`make_engine`) catches stale connections that rested in the pool;
    this catches the ones that died while in steady use, or between the ping and the
    statement. Other errors (constraints, a locked SQLite file) are not retried. ``rerun``:
    how a write whose first attempt may have committed runs again (see
    :data:`mcp_common.store.Rerun`).
    """

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return fn(*args, **kwargs)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
            if rerun is None:
                return fn(*args, **kwargs)
            return cast(T, rerun(fn, *args, **kwargs))

        return wrapper

    return decorate if fn is None else decorate(fn)


# One process's writers take turns on SQLite; on one in memory, every call does (see
# mcp_common.store.serial_writes).
_serial_on_sqlite = serial_writes(lambda store: store._write_lock)
_serial_in_memory = serial_writes(lambda store: store._write_lock, in_memory_only=True)

# The hottest statements, built once: building a statement costs more than running it here.
_READ_SESSION = select(
    MCPSession.session_id,
    MCPSession.protocol_version,
    MCPSession.client_params,
    MCPSession.principal,
    MCPSession.server_name,
    MCPSession.created,
    MCPSession.last_seen,
).where(MCPSession.session_id == bindparam("b_session"))
_INSERT_STATE = insert(MCPRequestState)
_INSERT_ELICITATION = insert(MCPElicitation)
_INSERT_EVENT = insert(MCPEvent)


def _claim_state(exact: bool = False) -> Any:
    """``exact``: the binding compared as bytes (MySQL and MariaDB, whose default collations
    ignore case and trailing spaces); the state id is found through its index as usual (the
    handle's HMAC already pins it exactly)."""

    # A function, not one shared construct: compiling a statement memoizes its exported
    # columns, which a later ``.returning(...).cte()`` of it would then inherit (empty).
    def value(name: str) -> Any:
        bound = bindparam(name, type_=String)
        return sql_cast(bound, MYSQL_BINARY()) if exact else bound

    return (
        update(MCPRequestState)
        .where(
            MCPRequestState.state_id == bindparam("b_state"),
            MCPRequestState.consumed.is_(None),
            MCPRequestState.expires > bindparam("b_moment"),
            MCPRequestState.server_name == value("b_server"),
            MCPRequestState.method == value("b_method"),
            MCPRequestState.target == value("b_target"),
            MCPRequestState.args_digest == value("b_digest"),
            MCPRequestState.principal.is_not_distinct_from(value("b_principal")),
        )
        .values(consumed=bindparam("b_moment"))
    )


_CLAIM_STATE = _claim_state()
_STATE_READ_BACK = (MCPRequestState.sealed, MCPRequestState.created, MCPRequestState.expires)
_CLAIM_STATE_RETURNING = _CLAIM_STATE.returning(*_STATE_READ_BACK)
_READ_STATE = select(*_STATE_READ_BACK).where(MCPRequestState.state_id == bindparam("b_state"))


def _answer_state_row(exact: bool = False) -> Any:
    """``exact``: the question's key compared as bytes (MySQL and MariaDB, as in
    :func:`_claim_state`): the SDK takes an answer by its exact key, so ``Edition`` or
    ``edition `` must not answer the row of ``edition``, which the SDK asks again."""
    key = bindparam("b_key", type_=String)
    return (
        update(MCPElicitation)
        .where(
            MCPElicitation.state_id == bindparam("b_state"),
            MCPElicitation.request_key == (sql_cast(key, MYSQL_BINARY()) if exact else key),
            MCPElicitation.status == "pending",
        )
        .values(status=bindparam("b_status"), answer=bindparam("b_answer"), updated=bindparam("b_moment"))
    )


_EXPIRE_UNANSWERED = (
    update(MCPElicitation)
    # ``COALESCE`` (the status is never NULL) keeps SQLite's planner, which has no statistics,
    # off the status index: it would walk every pending row of every state.
    .where(MCPElicitation.state_id == bindparam("b_state"), func.coalesce(MCPElicitation.status, "") == "pending")
    .values(status="expired", detail=bindparam("b_detail"), updated=bindparam("b_moment"))
)


class _DriverStatement:
    """A Core statement compiled once for the engine's dialect, run on the DBAPI cursor.

    For the statements of every 2026-07-28 question (save, redeem): SQLAlchemy's
    per-execution machinery (execution context, parameter construction, result wrapping,
    pool events) costs more there than the database's own work. Bound values still go
    through the column types' bind processors, read-back values through their result
    processors, exactly as ``Connection.execute`` applies them.
    """

    __slots__ = ("_compiled", "_order", "_processors", "_results", "sql")

    def __init__(self, statement: Any, dialect: Any, column_keys: Sequence[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(column_keys) if column_keys else None)
        self._compiled = compiled
        self.sql: str = compiled.string
        self._order: tuple[str, ...] | None = tuple(compiled.positiontup) if compiled.positional else None
        self._processors = {
            key: processor
            for key, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        read_back = compiled.returning or getattr(statement, "selected_columns", None) or ()
        self._results = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in read_back]

    def params(self, values: Mapping[str, Any]) -> Any:
        bound = self._compiled.construct_params(values)
        for key, processor in self._processors.items():
            bound[key] = processor(bound[key])
        return [bound[key] for key in self._order] if self._order is not None else bound

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            value if process is None else process(value) for process, value in zip(self._results, raw, strict=True)
        )


class _DriverStatements:
    """The hot statements of one engine's dialect (inserts per column set, built on first use)."""

    def __init__(self, dialect: Any, update_returning: bool) -> None:
        self.dialect = dialect
        mysql = dialect.name in ("mysql", "mariadb")
        self.returning = update_returning and not mysql
        """The claim reads the state back itself; else ``read_state`` reads it after."""
        if mysql:
            self.claim = _DriverStatement(_claim_state(exact=True), dialect)
        else:
            self.claim = _DriverStatement(_CLAIM_STATE_RETURNING if update_returning else _CLAIM_STATE, dialect)
        self.read_state = _DriverStatement(_READ_STATE, dialect)
        self.answer = _DriverStatement(_answer_state_row(exact=mysql), dialect)
        self.unanswered = _DriverStatement(_EXPIRE_UNANSWERED, dialect)
        self.read_session = _DriverStatement(_READ_SESSION, dialect)
        self.one_statement = dialect.name == "postgresql"
        """Writes of several rows go out as one statement (a data-modifying ``WITH``)."""
        self.append_event = _DriverStatement(_APPEND_EVENT_IN_TURN, dialect) if self.one_statement else None
        """PostgreSQL: an event's INSERT that takes its stream's turn first."""
        self.stream_turns = dialect.name in ("mysql", "mariadb")
        """MySQL and MariaDB: an event's INSERT waits for its stream's named lock (take_stream_turn)."""
        self._inserts: dict[tuple[Any, tuple[str, ...]], _DriverStatement] = {}
        self._saves: dict[int, _DriverStatement] = {}
        self._redemptions: dict[int, _DriverStatement] = {}

    def insert(self, statement: Any, columns: tuple[str, ...]) -> _DriverStatement:
        key = (statement, columns)
        found = self._inserts.get(key)
        if found is None:
            found = self._inserts[key] = _DriverStatement(statement, self.dialect, columns)
        return found

    def save_state(self, questions: int) -> _DriverStatement:
        """PostgreSQL: a request state and its ``questions`` rows, in one INSERT statement.
        Parameters: ``s_<column>`` for the state, ``q<n>_<column>`` for question ``n``."""
        found = self._saves.get(questions)
        if found is None:
            state = insert(MCPRequestState).values({c: _typed_bind(MCPRequestState, c, "s_") for c in _STATE_COLUMNS})
            if questions:
                rows = [
                    {c: _typed_bind(MCPElicitation, c, f"q{n}_") for c in _ELICITATION_FIELDS} for n in range(questions)
                ]
                statement: Any = insert(MCPElicitation).values(rows).add_cte(state.cte("saved_state"))
            else:
                statement = state
            found = self._saves[questions] = _DriverStatement(statement, self.dialect)
        return found

    def redeem(self, answers: int) -> _DriverStatement:
        """PostgreSQL: the claim, and ``answers`` answers recorded only if the claim won, in one
        statement that reads the claimed state back. Parameters: the claim's, and ``a<n>_key``,
        ``a<n>_status``, ``a<n>_answer`` for answer ``n``."""
        found = self._redemptions.get(answers)
        if found is None:
            claimed = _claim_state().returning(MCPRequestState.state_id, *_STATE_READ_BACK).cte("claimed")
            recorded = [
                update(MCPElicitation)
                .where(
                    MCPElicitation.state_id == claimed.c.state_id,
                    MCPElicitation.request_key == bindparam(f"a{n}_key", type_=String),
                    MCPElicitation.status == "pending",
                )
                .values(
                    status=bindparam(f"a{n}_status", type_=String),
                    answer=bindparam(f"a{n}_answer", type_=String),
                    updated=bindparam("b_moment"),
                )
                .cte(f"answered_{n}")
                for n in range(answers)
            ]
            # The questions the retry left unanswered (disjoint from the answered ones: every
            # part of one statement sees the rows as they were before it).
            keys = [bindparam(f"a{n}_key", type_=String) for n in range(answers)]
            unanswered = (
                update(MCPElicitation)
                .where(
                    MCPElicitation.state_id == claimed.c.state_id,
                    MCPElicitation.status == "pending",
                    *([MCPElicitation.request_key.not_in(keys)] if keys else []),
                )
                .values(status="expired", detail=bindparam("b_detail", type_=String), updated=bindparam("b_moment"))
                .cte("unanswered")
            )
            statement = select(claimed.c.sealed, claimed.c.created, claimed.c.expires).add_cte(*recorded, unanswered)
            found = self._redemptions[answers] = _DriverStatement(statement, self.dialect)
        return found


_STATE_COLUMNS = tuple(f.name for f in fields(RequestStateRecord))


def _typed_bind(model: Any, column: str, prefix: str) -> Any:
    # Typed: the rows after a multi-row VALUES' first would otherwise bind untyped, without the
    # column type's bind processing.
    return bindparam(prefix + column, type_=model.__table__.c[column].type)


_EVENT_COLUMNS = ("session_id", "stream_key", "message", "final", "created")
# PostgreSQL: the stream's lock first, then the row (and its id); see stream_lock_key.
_APPEND_EVENT_IN_TURN = (
    insert(MCPEvent)
    .from_select(
        _EVENT_COLUMNS,
        select(*(_typed_bind(MCPEvent, column, "e_") for column in _EVENT_COLUMNS)).select_from(
            select(func.pg_advisory_xact_lock(bindparam("b_lock", type_=BigInteger))).subquery("turn")
        ),
    )
    .returning(MCPEvent.id)
)


class SQLAlchemyStore:
    """Sessions, events, pending requests, elicitations, request states and worker heartbeats
    in a SQL database, through SQLAlchemy 2.x.

    ``engine`` must reach a database migrated with :func:`mcp_flask.migrate`. Every guarantee
    that holds across worker processes (first answer wins, a request state is redeemed once)
    rests on one guarded ``UPDATE`` whose row count says who won, never on a read followed by
    a write.
    """

    def __init__(self, engine: Engine, *, checkpoint_interval: float = 0) -> None:
        self.engine = engine
        # Writers to one SQLite file take turns (see mcp_common.store.serial_writes); in WAL
        # mode a thread checkpoints after them (``MCP_SQLITE_CHECKPOINT_INTERVAL``).
        sqlite = engine.url.get_backend_name() == "sqlite"
        self._write_lock = (
            SQLiteWriteLock(
                engine.url.database, in_memory=_is_memory_sqlite(engine.url), checkpoint_interval=checkpoint_interval
            )
            if sqlite
            else None
        )
        self._sqlite = sqlite
        if self._write_lock is not None and self._write_lock.checkpointer is not None:
            # The engine is the store's own: its commits leave checkpoints to the thread. At
            # checkout, once per connection: the pool may hold some from before (a migration).
            event.listen(engine, "checkout", _defer_autocheckpoint)
        # PostgreSQL, SQLite >= 3.35: a claimed request state is read back by its UPDATE.
        self._driver = _DriverStatements(engine.dialect, bool(getattr(engine.dialect, "update_returning", False)))
        # psycopg switches a connection to autocommit and back without a round trip.
        self._autocommit_capable = engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"

    def close(self) -> None:
        """End the store's checkpoint thread, if one runs (the next write starts another)."""
        lock = self._write_lock
        if lock is not None and lock.checkpointer is not None:
            lock.checkpointer.stop()

    @contextlib.contextmanager
    def _driver_transaction(
        self, write: bool = True, one_statement: bool = False, stream: tuple[str, str] | None = None
    ) -> Iterator[Any]:
        """A DBAPI cursor inside one transaction on a pooled connection, for the statements of
        :class:`_DriverStatements` (``write=False``: reads only, so no write lock is taken on
        SQLite). ``one_statement``: the caller runs a single statement, which PostgreSQL (with
        psycopg) then runs in autocommit mode, a transaction of its own, without the ``BEGIN``
        and ``COMMIT`` round trips. ``stream``: ``(session_id, stream_key)`` whose turn
        (:func:`mcp_common.store.take_stream_turn`) the transaction takes first and leaves after
        its commit or rollback. Driver errors surface as SQLAlchemy's (``IntegrityError``,
        and a lost connection as an invalidated ``DBAPIError``, which ``_retry`` retries)."""
        dialect = self.engine.dialect
        raw = self.engine.raw_connection()
        dbapi_connection = raw.dbapi_connection
        cursor = None
        autocommit = False
        turn = None
        try:
            if one_statement and self._autocommit_capable:
                dbapi_connection.autocommit = True  # type: ignore[union-attr]
                autocommit = True
            cursor = raw.cursor()
            if self._sqlite and write:
                cursor.execute("BEGIN IMMEDIATE")
            if stream is not None:
                turn = take_stream_turn(cursor, *stream)
            yield cursor
            if not autocommit:
                raw.commit()
            if turn is not None:
                leave_stream_turn(cursor, turn)
                turn = None
        except dialect.loaded_dbapi.Error as exc:
            lost = dialect.is_disconnect(exc, dbapi_connection, cursor)
            if lost:
                raw.invalidate(exc)
                # As SQLAlchemy does for its own statements: a lost connection usually means
                # a restarted database, so the pool's other connections are dropped too, and
                # the retry gets a new one instead of the next dead one.
                self.engine.dispose()
            else:
                with contextlib.suppress(Exception):
                    raw.rollback()
            error = DBAPIError.instance(
                None, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
            )
            _hint_migrate_to(error, dialect.name)
            raise error from exc
        except BaseException:
            with contextlib.suppress(Exception):
                raw.rollback()
            raise
        finally:
            if turn is not None and raw.is_valid:
                # After the rollback. A connection that fails to let the turn go is dropped, which
                # lets it go: never hand the pool a connection holding a stream's turn.
                try:
                    leave_stream_turn(cursor, turn)
                except Exception:
                    raw.invalidate()
            if cursor is not None:
                with contextlib.suppress(Exception):
                    cursor.close()
            if autocommit:
                try:
                    dbapi_connection.autocommit = False  # type: ignore[union-attr]
                except Exception:
                    # Never hand the pool a connection left in autocommit mode.
                    if raw.is_valid:
                        raw.invalidate()
            raw.close()

    def _session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    @_retry(rerun=rerun_insert(IntegrityError, session_written))
    @_serial_on_sqlite
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
    @_serial_in_memory
    def get_session(self, session_id: str) -> SessionRecord | None:
        # Read on every legacy request: on the driver's cursor, as the question hot paths are
        # (a Core SELECT through a Connection costs several times the query here).
        statement = self._driver.read_session
        with self._driver_transaction(write=False, one_statement=True) as cursor:
            cursor.execute(statement.sql, statement.params({"b_session": session_id}))
            found = cursor.fetchone()
        if found is None:
            return None
        row = statement.row(found)
        return SessionRecord(
            session_id=row[0],
            protocol_version=row[1],
            client_params=row[2],
            principal=row[3],
            server_name=row[4],
            created=row[5].timestamp(),
            last_seen=row[6].timestamp(),
        )

    @_retry
    @_serial_on_sqlite
    def touch_session(self, session_id: str, now: float) -> None:
        with self._session() as s, s.begin():
            s.execute(
                update(MCPSession).where(MCPSession.session_id == session_id).values(last_seen=_ts(now)),
                execution_options={"synchronize_session": False},
            )

    @_retry
    @_serial_on_sqlite
    def delete_session(self, session_id: str) -> bool:
        # Elicitation rows stay: they are the record of what was asked and answered.
        options = _NO_SYNC
        with self._session() as s, s.begin():
            deleted = s.execute(
                delete(MCPSession).where(MCPSession.session_id == session_id), execution_options=options
            )
            s.execute(delete(MCPEvent).where(MCPEvent.session_id == session_id), execution_options=options)
            s.execute(
                delete(MCPPendingRequest).where(MCPPendingRequest.session_id == session_id), execution_options=options
            )
            return bool(deleted.rowcount)  # type: ignore[attr-defined]

    # Not idempotent: a re-run after a lost acknowledgement appends the event again (its id is
    # the database's, so the re-run cannot tell its first attempt's row from another). The
    # client then receives the message twice: readers stop at a stream's first final event, and
    # a second answer to a request sent twice is dropped (the first answer wins).
    @_retry
    @_serial_on_sqlite
    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        statement = self._driver.append_event
        if statement is not None:
            # PostgreSQL: appends to one stream take turns, so its ids commit in order.
            params = {
                "e_session_id": session_id,
                "e_stream_key": stream_key,
                "e_message": message,
                "e_final": final,
                "e_created": utcnow(),
                "b_lock": stream_lock_key(session_id, stream_key),
            }
            with self._driver_transaction(one_statement=True) as cursor:
                cursor.execute(statement.sql, statement.params(params))
                return int(cursor.fetchone()[0])
        if self._driver.stream_turns:
            # MySQL, MariaDB: the same turns, with a named lock around the transaction.
            values = {"session_id": session_id, "stream_key": stream_key, "message": message, "final": final}
            values["created"] = utcnow()
            insert_event = self._driver.insert(_INSERT_EVENT, tuple(values))
            with self._driver_transaction(stream=(session_id, stream_key)) as cursor:
                cursor.execute(insert_event.sql, insert_event.params(values))
                return int(cursor.lastrowid)
        with self._session() as s, s.begin():
            row = MCPEvent(session_id=session_id, stream_key=stream_key, message=message, final=final)
            s.add(row)
            # The autoincrement key is the event id: monotonic across every worker.
            s.flush()
            return int(row.id)

    @_retry
    @_serial_in_memory
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
    @_serial_in_memory
    def has_stream(self, session_id: str, stream_key: str) -> bool:
        query = select(MCPEvent.id).where(MCPEvent.session_id == session_id, MCPEvent.stream_key == stream_key)
        with self._session() as s, s.begin():
            return s.scalar(query.limit(1)) is not None

    @_retry
    @_serial_in_memory
    def get_cursor(self, session_id: str) -> int:
        with self._session() as s, s.begin():
            value = s.scalar(select(MCPSession.get_cursor).where(MCPSession.session_id == session_id))
            return int(value or 0)

    @_retry
    @_serial_on_sqlite
    def set_cursor(self, session_id: str, event_id: int) -> None:
        # The guard keeps the cursor monotonic when two GET streams deliver concurrently.
        with self._session() as s, s.begin():
            s.execute(
                update(MCPSession)
                .where(MCPSession.session_id == session_id, MCPSession.get_cursor < event_id)
                .values(get_cursor=event_id),
                execution_options={"synchronize_session": False},
            )

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
        with self._session() as s, s.begin():
            s.add(MCPPendingRequest(session_id=session_id, request_id=request_id, method=method, params=params))
            if elicitation is not None:
                s.add(_elicitation_row(elicitation))

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
        now = utcnow()
        # One UPDATE with the NULL guard: the first answer wins, whichever worker it reaches.
        query = (
            update(MCPPendingRequest)
            .where(
                MCPPendingRequest.session_id == session_id,
                MCPPendingRequest.request_id == request_id,
                MCPPendingRequest.response.is_(None),
            )
            .values(response=response, answered=now)
        )
        with self._session() as s, s.begin():
            result = s.execute(query, execution_options=_NO_SYNC)
            won = bool(result.rowcount == 1)  # type: ignore[attr-defined]
            if won and status is not None:
                s.execute(
                    update(MCPElicitation)
                    .where(
                        MCPElicitation.session_id == session_id,
                        MCPElicitation.request_key == request_id,
                        MCPElicitation.status == "pending",
                    )
                    .values(status=status, answer=answer, updated=now),
                    execution_options=_NO_SYNC,
                )
            return won

    @_retry
    @_serial_in_memory
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
    @_serial_in_memory
    def answered_since(self, since: float) -> list[tuple[str, str, str]]:
        # One query per poll for all of this process's waiting tools (index on ``answered``).
        query = select(MCPPendingRequest.session_id, MCPPendingRequest.request_id, MCPPendingRequest.response).where(
            MCPPendingRequest.answered >= _ts(since)
        )
        with self._session() as s, s.begin():
            return [(sid, rid, response) for sid, rid, response in s.execute(query) if response is not None]

    @_retry
    @_serial_in_memory
    def pending_keys(self, session_ids: Sequence[str]) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        unique = list(dict.fromkeys(session_ids))
        with self._session() as s, s.begin():
            for start in range(0, len(unique), _CHUNK):
                # Rows whose session is gone do not count: one written while a DELETE's
                # transaction was open escaped the DELETE (see SessionStore.pending_keys).
                query = (
                    select(MCPPendingRequest.session_id, MCPPendingRequest.request_id)
                    .join(MCPSession, MCPSession.session_id == MCPPendingRequest.session_id)
                    .where(MCPPendingRequest.session_id.in_(unique[start : start + _CHUNK]))
                )
                found.update((sid, rid) for sid, rid in s.execute(query))
        return found

    @_retry
    @_serial_on_sqlite
    def delete_pending(self, session_id: str, request_id: str) -> None:
        with self._session() as s, s.begin():
            s.execute(
                delete(MCPPendingRequest).where(
                    MCPPendingRequest.session_id == session_id, MCPPendingRequest.request_id == request_id
                ),
                execution_options={"synchronize_session": False},
            )

    @_retry
    @_serial_in_memory
    def purge_expired(self, older_than: float) -> int:
        """Delete sessions idle since before ``older_than`` (how many), and request states that
        expired before it, consumed or not, and events written before it for a session that is
        gone, and pending rows written before it for such a session. Elicitation rows stay."""
        with self._session() as s, s.begin():
            s.execute(
                delete(MCPRequestState).where(MCPRequestState.expires < _ts(older_than)), execution_options=_NO_SYNC
            )
        with self._session() as s, s.begin():
            stale = list(s.scalars(select(MCPSession.session_id).where(MCPSession.last_seen < _ts(older_than))))
        for session_id in stale:
            try:
                self.delete_session(session_id)
            except SQLAlchemyError:  # pragma: no cover - the next purge retries
                continue
        # Events appended for a session after it ended (a completion's notification): no
        # session's deletion takes them.
        with self._session() as s, s.begin():
            s.execute(
                delete(MCPEvent).where(
                    MCPEvent.created < _ts(older_than), MCPEvent.session_id.not_in(select(MCPSession.session_id))
                ),
                execution_options=_NO_SYNC,
            )
        # So are a question's pending rows written while its session's DELETE committed.
        with self._session() as s, s.begin():
            s.execute(
                delete(MCPPendingRequest).where(
                    MCPPendingRequest.created < _ts(older_than),
                    MCPPendingRequest.session_id.not_in(select(MCPSession.session_id)),
                ),
                execution_options=_NO_SYNC,
            )
        return len(stale)

    # -- elicitations ------------------------------------------------------------------------

    @_retry
    @_serial_in_memory
    def get_elicitation(self, record_id: str) -> ElicitationRecord | None:
        with self._session() as s, s.begin():
            row = s.get(MCPElicitation, record_id)
            return _elicitation_record(row) if row is not None else None

    @_retry
    @_serial_in_memory
    def find_elicitations(self, elicitation_id: str, server_name: str | None = None) -> list[ElicitationRecord]:
        query = select(MCPElicitation).where(MCPElicitation.elicitation_id == elicitation_id)
        if server_name is not None:
            query = query.where(MCPElicitation.server_name == server_name)
        with self._session() as s, s.begin():
            rows = s.scalars(query.order_by(MCPElicitation.created, MCPElicitation.id))
            return exactly([_elicitation_record(row) for row in rows], elicitation_id, server_name)

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
        query = (
            update(MCPElicitation)
            .where(MCPElicitation.id == record_id, MCPElicitation.status.in_(from_statuses))
            .values(**changes)
        )
        if without_detail:
            query = query.where(MCPElicitation.detail.is_(None))
        with self._session() as s, s.begin():
            return bool(s.execute(query, execution_options=_NO_SYNC).rowcount == 1)  # type: ignore[attr-defined]

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
        candidates = select(
            MCPElicitation.id,
            MCPElicitation.status,
            MCPElicitation.expires,
            MCPElicitation.elicitation_id,
            MCPElicitation.server_name,
            MCPElicitation.principal,
            MCPElicitation.session_id,
        ).where(MCPElicitation.elicitation_id == elicitation_id, MCPElicitation.status.in_(OPEN_STATUSES))
        if server_name is not None:
            candidates = candidates.where(MCPElicitation.server_name == server_name)
        candidates = candidates.order_by(MCPElicitation.created, MCPElicitation.id)
        with self._session() as s, s.begin():
            found = asked_by(exactly(s.execute(candidates), elicitation_id, server_name), principal)
        if not found:
            return []
        moved: list[ElicitationRecord] = []
        # The rows and their notifications commit together (see SessionStore.complete_elicitations),
        # on one connection: MySQL's and MariaDB's stream turns are the connection's, left after
        # the commit.
        with self.engine.connect() as connection:
            turns: list[str] = []
            cursor = None
            try:
                if notification is not None and self._driver.stream_turns:
                    cursor = connection.connection.cursor()
                    for session_id in notified_sessions(found):  # type: ignore[arg-type]
                        turns.append(take_stream_turn(cursor, session_id, GET_STREAM))
                with Session(connection, expire_on_commit=False) as s, s.begin():
                    for row in found:
                        if self._completed(s, row.id, row.status, row.expires, now):
                            # Read after the write, in its transaction: the row as this update left it.
                            record = s.get(MCPElicitation, row.id)
                            if record is not None:
                                moved.append(_elicitation_record(record))
                    if notification is not None:
                        for session_id in notified_sessions(moved):
                            self._append_in(s, session_id, notification)
            finally:
                if cursor is not None:
                    for turn in reversed(turns):
                        leave_stream_turn(cursor, turn)
                    cursor.close()
        return moved

    @staticmethod
    def _completed(s: Session, record_id: str, status: str, expires: dt.datetime, now: float) -> bool:
        """One row of a completion: whether it moved to ``completed``. Guarded: of two workers
        completing the same elicitation, each row moves for exactly one of them, and each
        reports only the rows it moved."""
        from_statuses = OPEN_STATUSES
        if overdue(status, expires.timestamp(), now):
            # Expired, as the heartbeat would have left it; completed only if it was answered
            # meanwhile (its expiry never changes).
            expired = s.execute(
                update(MCPElicitation)
                .where(MCPElicitation.id == record_id, MCPElicitation.status == "pending")
                .values(status="expired", updated=_ts(now)),
                execution_options=_NO_SYNC,
            )
            if expired.rowcount == 1:  # type: ignore[attr-defined]
                return False
            from_statuses = ANSWERED_OPEN_STATUSES
        result = s.execute(
            update(MCPElicitation)
            .where(MCPElicitation.id == record_id, MCPElicitation.status.in_(from_statuses))
            .values(status="completed", updated=_ts(now)),
            execution_options=_NO_SYNC,
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def _append_in(self, s: Session, session_id: str, message: str) -> None:
        """Append a GET-stream event in the session's transaction (PostgreSQL: taking the
        stream's turn first, as ``append_event`` does)."""
        values = {"session_id": session_id, "stream_key": GET_STREAM, "message": message, "final": False}
        values["created"] = utcnow()
        connection = s.connection()  # Core statements: the ORM would take these keys for attributes
        if self._driver.append_event is not None:
            params = {f"e_{name}": value for name, value in values.items()}
            connection.execute(_APPEND_EVENT_IN_TURN, {**params, "b_lock": stream_lock_key(session_id, GET_STREAM)})
        else:
            connection.execute(_INSERT_EVENT, values)

    @_retry
    @_serial_on_sqlite
    def expire_elicitations(self, now: float) -> int:
        overdue = (MCPElicitation.status == "pending", MCPElicitation.expires < _ts(now))
        # Every worker runs this on each heartbeat and there is usually nothing to expire: an
        # indexed read first, so the heartbeat takes no write lock for nothing.
        with self._session() as s:
            if s.execute(select(MCPElicitation.id).where(*overdue).limit(1)).first() is None:
                return 0
        query = update(MCPElicitation).where(*overdue).values(status="expired", updated=_ts(now))
        with self._session() as s, s.begin():
            return int(s.execute(query, execution_options=_NO_SYNC).rowcount)  # type: ignore[attr-defined]

    # -- 2026-07-28 request state ------------------------------------------------------------

    @_retry
    @_serial_in_memory
    def get_request_state(self, state_id: str) -> RequestStateRecord | None:
        with self._session() as s, s.begin():
            row = s.get(MCPRequestState, state_id)
            return None if row is None else record_of(RequestStateRecord, row)

    @_retry(rerun=rerun_insert(IntegrityError, state_saved))
    @_serial_on_sqlite
    def save_request_state(self, state: RequestStateRecord, elicitations: list[ElicitationRecord]) -> None:
        # Every 2026-07-28 question: its INSERTs in one transaction, on the driver's cursor.
        values = column_values(state, _ts)
        rows = [column_values(record, _ts) for record in elicitations]
        driver = self._driver
        if driver.one_statement and len(rows) <= ONE_STATEMENT_QUESTIONS:
            # PostgreSQL: one statement, so one round trip (no BEGIN and COMMIT either).
            statement = driver.save_state(len(rows))
            bound = {f"s_{column}": value for column, value in values.items()}
            for number, row in enumerate(rows):
                bound.update({f"q{number}_{column}": value for column, value in row.items()})
            with self._driver_transaction(one_statement=True) as cursor:
                cursor.execute(statement.sql, statement.params(bound))
            return
        with self._driver_transaction() as cursor:
            statement = driver.insert(_INSERT_STATE, tuple(values))
            cursor.execute(statement.sql, statement.params(values))
            if rows:
                statement = driver.insert(_INSERT_ELICITATION, tuple(rows[0]))
                cursor.executemany(statement.sql, [statement.params(row) for row in rows])

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
        moment = _ts(now)
        # The single-use guarantee is this one guarded UPDATE: of two workers redeeming the same
        # handle, exactly one sees a row change. A handle presented with the wrong binding is
        # left as it was, redeemable by the right request.
        binding = {
            "b_state": state_id,
            "b_moment": moment,
            "b_server": server_name,
            "b_method": method,
            "b_target": target,
            "b_digest": args_digest,
            "b_principal": principal,
            "b_detail": UNANSWERED_DETAIL,
        }
        driver = self._driver
        if driver.one_statement and len(answers) <= ONE_STATEMENT_ANSWERS:
            # PostgreSQL: the claim and the answers in one statement; an answer is recorded
            # only if the claim won.
            statement = driver.redeem(len(answers))
            for number, (key, (status, answer)) in enumerate(answers.items()):
                binding.update({f"a{number}_key": key, f"a{number}_status": status, f"a{number}_answer": answer})
            with self._driver_transaction(one_statement=True) as cursor:
                cursor.execute(statement.sql, statement.params(binding))
                found = cursor.fetchone()
            if found is None:
                return None
            sealed, created, expires = statement.row(found)
        else:
            claimed = self._claim_in_steps(binding, answers)
            if claimed is None:
                return None
            sealed, created, expires = claimed
        return RequestStateRecord(
            state_id=state_id,
            server_name=server_name,
            method=method,
            target=target,
            args_digest=args_digest,
            principal=principal,
            sealed=sealed,
            created=created.timestamp(),
            expires=expires.timestamp(),
            consumed=now,
        )

    def _claim_in_steps(
        self, binding: dict[str, Any], answers: dict[str, tuple[str, str | None]]
    ) -> tuple[Any, ...] | None:
        """The claim, its read-back and the answers as separate statements of one transaction
        (databases without data-modifying ``WITH``, and PostgreSQL past ``ONE_STATEMENT_ANSWERS``
        answers): the claimed ``(sealed, created, expires)``."""
        driver = self._driver
        state_id = binding["b_state"]
        moment = binding["b_moment"]
        with self._driver_transaction() as cursor:
            cursor.execute(driver.claim.sql, driver.claim.params(binding))
            if driver.returning:
                found = cursor.fetchone()
                if found is None:
                    return None
                claimed = driver.claim.row(found)
            else:
                if cursor.rowcount != 1:
                    return None
                cursor.execute(driver.read_state.sql, driver.read_state.params({"b_state": state_id}))
                claimed = driver.read_state.row(cursor.fetchone())
            for key, (status, answer) in answers.items():
                values = {"b_state": state_id, "b_key": key, "b_status": status, "b_answer": answer, "b_moment": moment}
                cursor.execute(driver.answer.sql, driver.answer.params(values))
            expire = {"b_state": state_id, "b_detail": binding["b_detail"], "b_moment": moment}
            cursor.execute(driver.unanswered.sql, driver.unanswered.params(expire))
        return claimed

    @_retry
    @_serial_in_memory
    def elicitations_for_state(self, state_id: str) -> list[ElicitationRecord]:
        query = (
            select(MCPElicitation)
            .where(MCPElicitation.state_id == state_id)
            .order_by(MCPElicitation.created, MCPElicitation.id)
        )
        with self._session() as s, s.begin():
            return [_elicitation_record(row) for row in s.scalars(query)]

    @_retry
    @_serial_in_memory
    def call_elicitations(self, session_id: str, call_id: str) -> list[ElicitationRecord]:
        query = (
            select(MCPElicitation)
            .where(MCPElicitation.session_id == session_id, MCPElicitation.call_id == call_id)
            .order_by(MCPElicitation.created, MCPElicitation.id)
        )
        with self._session() as s, s.begin():
            return [_elicitation_record(row) for row in s.scalars(query)]

    @_retry
    @_serial_in_memory
    def purge_elicitations(self, older_than: float) -> int:
        with self._session() as s, s.begin():
            result = s.execute(
                delete(MCPElicitation).where(
                    MCPElicitation.status != "pending", MCPElicitation.updated < _ts(older_than)
                ),
                execution_options=_NO_SYNC,
            )
            return int(result.rowcount or 0)

    @_retry
    @_serial_in_memory
    def stream_elicitations(self, session_id: str, stream_key: str) -> list[ElicitationRecord]:
        query = (
            select(MCPElicitation)
            .where(MCPElicitation.session_id == session_id, MCPElicitation.stream_key == stream_key)
            .order_by(MCPElicitation.created, MCPElicitation.id)
        )
        with self._session() as s, s.begin():
            return [_elicitation_record(row) for row in s.scalars(query)]

    # -- workers -----------------------------------------------------------------------------

    @_retry
    @_serial_on_sqlite
    def beat_worker(self, worker_id: str, now: float) -> None:
        beat = update(MCPWorker).where(MCPWorker.worker_id == worker_id).values(last_beat=_ts(now))
        with self._session() as s, s.begin():
            if s.execute(beat, execution_options=_NO_SYNC).rowcount == 1:  # type: ignore[attr-defined]
                return
        try:
            with self._session() as s, s.begin():
                s.add(MCPWorker(worker_id=worker_id, last_beat=_ts(now)))
        except IntegrityError:
            # Another thread or process inserted the row between our UPDATE and INSERT.
            with self._session() as s, s.begin():
                s.execute(beat, execution_options=_NO_SYNC)

    @_retry
    @_serial_in_memory
    def worker_seen(self, worker_id: str) -> float | None:
        with self._session() as s, s.begin():
            beat = s.scalar(select(MCPWorker.last_beat).where(MCPWorker.worker_id == worker_id))
            return beat.timestamp() if beat is not None else None

    def close_thread_connections(self) -> None:
        pass  # every call returns its connection to the engine's pool, which keeps it

    def release_thread_connections(self) -> None:
        pass  # so does every call

    def pool_exhausted(self, error: BaseException) -> bool:
        # QueuePool: "QueuePool limit of size 5 overflow 10 reached, connection timed out".
        return isinstance(error, PoolTimeout)

    def process_private(self) -> bool:
        return self._sqlite and _is_memory_sqlite(self.engine.url)


# -- engines -----------------------------------------------------------------------------------


def database_url(uri: str | URL) -> URL:
    """``uri`` with PostgreSQL pointed at psycopg 3 (``postgresql://`` and ``postgres://``
    otherwise select psycopg2, which this project does not depend on)."""
    url = make_url(uri)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _is_memory_sqlite(url: URL) -> bool:
    # SQLite's URI names of one: file::memory:?cache=shared, file:name?mode=memory.
    database = url.database or ""
    return database in ("", ":memory:") or database.startswith("file::memory:") or url.query.get("mode") == "memory"


def make_engine(uri: str | URL, options: Mapping[str, Any] | None = None) -> Engine:
    """The engine the store runs on, tuned for several threads and processes.

    * SQLite: a 20 s lock timeout and WAL journal mode, so that several worker processes share
      one file (readers never block the writer), with ``synchronous=NORMAL`` as SQLite
      recommends for WAL; an in-memory database is one shared connection (``StaticPool``),
      usable by one process only.
    * PostgreSQL (``postgresql://`` is rewritten to ``postgresql+psycopg://``) and others: a
      connection that rested in the pool for :data:`IDLE_PING_SECONDS` is pinged before use,
      one in steady use is not (``pool_pre_ping`` would ping at every checkout: a round trip to
      the database per store call). A connection that died anyway fails its statement, the
      pool is emptied and the store call runs again on a new connection (``_retry``), so a
      restarted database costs one retry, not an error. ``pool_pre_ping`` in ``options``
      (true or false) replaces this with SQLAlchemy's own.
    * PostgreSQL with psycopg 3: no prepared statements (``prepare_threshold=None``, Django's
      default too), so that the store works behind PgBouncer in transaction pooling mode;
      ``connect_args={"prepare_threshold": 5}`` in ``options`` (psycopg's own default) turns
      them back on.
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
        if url.get_driver_name() == "psycopg":
            # As Django does: psycopg 3 prepares a statement after its fifth run on a connection,
            # and a pooler in transaction mode (PgBouncer before 1.21) then runs the next
            # transaction on a server connection where that statement does not exist or another
            # client's of the same name does. ``prepare_threshold`` in ``connect_args`` opts in.
            kwargs["connect_args"] = {"prepare_threshold": None, **kwargs.get("connect_args", {})}
        ping_when_idle = "pool_pre_ping" not in kwargs
        engine = create_engine(url, **kwargs)
        if ping_when_idle:
            _ping_when_idle(engine)
    _dispose_after_fork(engine)
    event.listen(engine, "handle_error", _hint_migrate)
    return engine


_MIGRATE_HINT = "The MCP tables are missing or out of date: run `flask mcp migrate` or MCP.migrate(app)"


def _hint_migrate(context: ExceptionContext) -> None:
    if isinstance(context.sqlalchemy_exception, DBAPIError):
        _hint_migrate_to(context.sqlalchemy_exception, context.dialect.name)


def _hint_migrate_to(error: DBAPIError, dialect: str) -> None:
    """Put the fix in the traceback of a statement that failed on a table or column that does
    not exist, which here means a database ``flask mcp migrate`` never ran on (or not since an
    upgrade): "no such table: mcp_session" alone does not say that ``db.create_all()`` is not
    the way to create it."""
    if missing_table(error.orig, dialect) and _MIGRATE_HINT not in error.detail:
        error.add_detail(_MIGRATE_HINT)


def _ping(dialect: Any, dbapi_connection: Any) -> bool:
    """The dialect's ping, except mysqlclient's: SQLAlchemy 2.0.20 (the oldest release
    the ``flask`` extra admits) calls it as ``ping(False)``, which mysqlclient 2.2 deprecates
    (a warning per ping, an error under ``-W error``); ``ping()`` is the same check, and what
    later SQLAlchemy releases call."""
    if dialect.driver == "mysqldb":
        dbapi_connection.ping()
        return True
    return bool(dialect.do_ping(dbapi_connection))


def _ping_when_idle(engine: Engine) -> None:
    """Ping a connection at checkout when it rested in the pool for ``IDLE_PING_SECONDS``; a
    dead one is replaced by the pool (``DisconnectionError``: SQLAlchemy's documented way for
    a checkout handler to refuse a connection)."""
    dialect = engine.dialect

    def rested(_dbapi_connection: Any, record: Any) -> None:
        record.info["mcp_rested_at"] = time.monotonic()

    def ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        rested_at = record.info.get("mcp_rested_at")
        if rested_at is None or time.monotonic() - rested_at < IDLE_PING_SECONDS:
            return  # new, or back in use within the second
        try:
            alive = _ping(dialect, dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise DisconnectionError(str(exc)) from exc
            raise
        if not alive:
            raise DisconnectionError("the connection did not answer a ping")

    event.listen(engine, "checkin", rested)
    event.listen(engine, "checkout", ping)


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # SQLite's recommendation for WAL: a commit survives the application crashing and is
        # never corrupted; only an OS crash or power loss can roll back the last commits. It
        # saves a sync of the log file per commit (~0.2 ms).
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _defer_autocheckpoint(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    if record.info.get("mcp_autocheckpoint"):
        return
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    finally:
        cursor.close()
    record.info["mcp_autocheckpoint"] = True


def _dispose_after_fork(engine: Engine) -> None:
    ref = weakref.ref(engine)

    def in_child() -> None:
        engine = ref()
        if engine is not None:
            # close=False: the parent still owns those sockets; the child just forgets them.
            engine.dispose(close=False)

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=in_child)
