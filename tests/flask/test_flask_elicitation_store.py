"""Elicitations, 2026-07-28 request states and worker heartbeats in ``SQLAlchemyStore``, and
the migration that adds their tables, on SQLite and on a fresh PostgreSQL database.

The semantic tests also run against the core's ``MemoryStore``: it is the reference, and a
test that the reference fails is testing the wrong thing.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from flask import Flask
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, ResourceSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mcp_common.elicitation import ANY_PRINCIPAL, complete_in_store
from mcp_common.store import (
    GET_STREAM,
    ElicitationRecord,
    MemoryStore,
    RequestStateRecord,
    SessionRecord,
    SessionStore,
    complete_rows,
)
from mcp_flask import MCP, SQLAlchemyStore, make_engine, migrate
from mcp_flask.migrations import SCRIPT_LOCATION, current_revision
from mcp_flask.models import (
    VERSION_TABLE,
    MCPElicitation,
    MCPRequestState,
    MCPWorker,
    metadata,
)
from tests.flask.conftest import BACKENDS, POSTGRES_URL, MariaDBDatabases

PREVIOUS = "mcp_0001"
HEAD = "mcp_0006"
NEW_TABLES = ("mcp_elicitation", "mcp_request_state", "mcp_worker")
ALL_TABLES = ("mcp_session", "mcp_event", "mcp_pending_request", *NEW_TABLES)
TIME_FIELDS = ("created", "updated", "expires", "consumed")

server = MCPServer("ElicitationStoreTests")


# -- databases ---------------------------------------------------------------------------------


class PostgresDatabases:
    """Fresh databases on the test PostgreSQL server, all dropped at the end of the module."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def _admin(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
        except psycopg.OperationalError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable (scripts/test.sh starts it): {reason}")

    def new(self) -> str:
        name = f"mcp_flask_elic_{uuid.uuid4().hex[:12]}"
        with self._admin() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return f"{POSTGRES_URL.rsplit('/', 1)[0]}/{name}"

    def drop_all(self) -> None:
        if not self.created:
            return
        with self._admin() as connection:
            for name in self.created:
                connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def pg_databases() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture(scope="module")
def pg_store_url(pg_databases: PostgresDatabases) -> str:
    """The module's PostgreSQL database for the store tests, migrated to head."""
    url = pg_databases.new()
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="module")
def mariadb_store_url(mariadb_databases: MariaDBDatabases) -> str:
    """The module's MariaDB database for the store tests, migrated to head."""
    url = mariadb_databases.new("mcp_flask_elic")
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


@pytest.fixture
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of the requested kind (``request.param``: sqlite, postgres or mariadb)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / f'fresh-{uuid.uuid4().hex[:8]}.sqlite3'}"
    if request.param == "mariadb":
        mariadb: MariaDBDatabases = request.getfixturevalue("mariadb_databases")
        return mariadb.new("mcp_flask_elic")
    databases: PostgresDatabases = request.getfixturevalue("pg_databases")
    return databases.new()


@contextmanager
def _migrated_engine(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated engine on ``kind``, its tables emptied afterwards."""
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'elicitations.sqlite3'}")
        migrate(engine)
    else:
        engine = make_engine(request.getfixturevalue("pg_store_url" if kind == "postgres" else "mariadb_store_url"))
    try:
        yield engine
    finally:
        with engine.begin() as connection:
            for table in ALL_TABLES:
                connection.execute(text(f"DELETE FROM {table}"))
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLAlchemyStore]:
    """The store on each SQL backend."""
    with _migrated_engine(request.param, request, tmp_path) as engine:
        yield SQLAlchemyStore(engine)


@pytest.fixture(params=["memory", *BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """The store on each SQL backend, and the core's reference ``MemoryStore``."""
    if request.param == "memory":
        yield MemoryStore()
        return
    with _migrated_engine(request.param, request, tmp_path) as engine:
        yield SQLAlchemyStore(engine)


# -- records -----------------------------------------------------------------------------------


def _elicitation(
    record_id: str,
    *,
    created: float,
    session_id: str | None = "s1",
    state_id: str | None = None,
    request_key: str = "srv-1",
    server_name: str = "Library",
    mode: str = "form",
    elicitation_id: str | None = None,
    status: str = "pending",
    expires: float | None = None,
    detail: str | None = None,
    principal: str | None = "flask-user:1",
    stream_key: str = "call-1",
) -> ElicitationRecord:
    return ElicitationRecord(
        id=record_id,
        server_name=server_name,
        tool="borrow",
        session_id=session_id,
        state_id=state_id,
        request_key=request_key,
        principal=principal,
        mode=mode,
        message="Which edition?",
        requested_schema='{"type":"object","properties":{"edition":{"type":"string"}}}' if mode == "form" else None,
        url="https://example.test/pay" if mode == "url" else None,
        elicitation_id=elicitation_id,
        status=status,
        answer=None,
        detail=detail,
        created=created,
        updated=created,
        expires=created + 600 if expires is None else expires,
        owner="host:1:abc" if session_id else None,
        stream_key=stream_key if session_id else None,
        call_id='"call-7"' if session_id else None,
    )


def _state(
    state_id: str = "st1",
    *,
    now: float,
    principal: str | None = "alice",
    expires: float | None = None,
    target: str = "borrow",
) -> RequestStateRecord:
    return RequestStateRecord(
        state_id=state_id,
        server_name="Library",
        method="tools/call",
        target=target,
        args_digest="d" * 64,
        principal=principal,
        sealed="sealed-token",
        created=now,
        expires=now + 600 if expires is None else expires,
    )


def _session(session_id: str = "s1", *, last_seen: float) -> SessionRecord:
    return SessionRecord(session_id, "2025-11-25", "{}", "flask-user:1", "Library", last_seen - 5, last_seen)


def _same(actual: Any, expected: Any) -> None:
    """Records equal, timestamps to the microsecond (what the columns keep)."""
    assert actual is not None and type(actual) is type(expected)
    for f in fields(expected):
        got, want = getattr(actual, f.name), getattr(expected, f.name)
        if f.name in TIME_FIELDS and want is not None:
            assert got == pytest.approx(want, abs=2e-6), f.name
        else:
            assert got == want, f.name


def _consume(store: SessionStore, now: float, **overrides: Any) -> RequestStateRecord | None:
    args: dict[str, Any] = {
        "state_id": "st1",
        "server_name": "Library",
        "method": "tools/call",
        "target": "borrow",
        "args_digest": "d" * 64,
        "principal": "alice",
        "now": now,
        "answers": {},
    }
    args.update(overrides)
    return store.consume_request_state(**args)


def test_the_store_implements_the_whole_protocol() -> None:
    """Every ``SessionStore`` method, with the protocol's parameters (a method added to the
    protocol and missing here would only fail when a request reaches it)."""
    import inspect

    protocol = {
        name: inspect.signature(member)
        for name, member in vars(SessionStore).items()
        if callable(member) and not name.startswith("_")
    }
    assert {"consume_request_state", "stream_elicitations", "beat_worker"} <= set(protocol)
    for name, signature in protocol.items():
        implementation = getattr(SQLAlchemyStore, name, None)
        assert implementation is not None, f"SQLAlchemyStore.{name} is missing"
        implemented = inspect.signature(implementation)
        assert list(implemented.parameters) == list(signature.parameters), name
        for parameter in signature.parameters.values():
            assert implemented.parameters[parameter.name].default == parameter.default, (name, parameter.name)
        no_query = ("process_private", "close_thread_connections", "release_thread_connections", "pool_exhausted")
        if name not in no_query:  # no database call
            assert hasattr(implementation, "__wrapped__"), f"SQLAlchemyStore.{name} is not wrapped in _retry"


# -- legacy: pending requests and their elicitations --------------------------------------------


def test_create_pending_with_an_elicitation(store: SessionStore) -> None:
    now = time.time()
    record = _elicitation("e1", created=now)
    store.create_pending("s1", "srv-1", "elicitation/create", '{"message":"?"}', elicitation=record)
    pending = store.get_pending("s1", "srv-1")
    assert pending is not None and pending.response is None
    _same(store.get_elicitation("e1"), record)
    assert store.get_elicitation("unknown") is None
    # Without one, only the pending request.
    store.create_pending("s1", "srv-2", "roots/list", "{}")
    assert store.get_pending("s1", "srv-2") is not None


def test_answers_are_found_by_time_and_pending_rows_by_session(store: SessionStore) -> None:
    for sid in ("s1", "s2", "gone"):
        store.create_session(_session(sid, last_seen=time.time()))
    store.create_pending("s1", "srv-1", "elicitation/create", "{}")
    store.create_pending("s1", "srv-2", "roots/list", "{}")
    store.create_pending("s2", "srv-3", "elicitation/create", "{}")
    before = time.time() - 0.001
    assert store.answered_since(before) == []
    assert store.answer_pending("s1", "srv-2", '{"result":{"roots":[]}}')
    assert store.answer_pending("s2", "srv-3", '{"result":{"action":"decline"}}')
    assert sorted(store.answered_since(before)) == [
        ("s1", "srv-2", '{"result":{"roots":[]}}'),
        ("s2", "srv-3", '{"result":{"action":"decline"}}'),
    ]
    # Only answers given at or after the time asked for.
    assert store.answered_since(time.time() + 5) == []
    assert store.pending_keys(["s1", "s2", "s9"]) == {("s1", "srv-1"), ("s1", "srv-2"), ("s2", "srv-3")}
    store.delete_pending("s1", "srv-2")
    assert store.pending_keys(["s1"]) == {("s1", "srv-1")}
    assert store.answered_since(before) == [("s2", "srv-3", '{"result":{"action":"decline"}}')]
    assert store.pending_keys([]) == set()
    # More sessions than one query takes: all are looked up.
    many = [f"m{n}" for n in range(1200)]
    for sid in many[::100]:
        store.create_session(_session(sid, last_seen=time.time()))
        store.create_pending(sid, "srv-x", "roots/list", "{}")
    assert store.pending_keys(many) == {(sid, "srv-x") for sid in many[::100]}
    # A row written after its session's DELETE took the session's rows (while the DELETE's
    # transaction was still open) does not count: the session is gone.
    store.delete_session("gone")
    store.create_pending("gone", "srv-late", "elicitation/create", "{}")
    assert store.pending_keys(["s1", "gone"]) == {("s1", "srv-1")}


def test_create_pending_is_one_transaction(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    sql_store.create_pending("s1", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now))
    # The elicitation row fails (its id is taken): the pending request is not left behind.
    with pytest.raises(IntegrityError):
        sql_store.create_pending(
            "s1", "srv-2", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now, request_key="srv-2")
        )
    assert sql_store.get_pending("s1", "srv-2") is None
    elicitation = sql_store.get_elicitation("e1")
    assert elicitation is not None and elicitation.request_key == "srv-1"


def test_one_statement_calls_leave_their_connection_transactional(sql_store: SQLAlchemyStore) -> None:
    """On PostgreSQL a redemption, a save and a session read each run as one statement in
    autocommit mode; the pooled connection must come back to transactions after, or the next
    multi-statement write on it would keep its first half when the second fails."""
    now = time.time()
    sql_store.save_request_state(_state(now=now), [_elicitation("q1", created=now, session_id=None, state_id="st1")])
    assert _consume(sql_store, now + 1, answers={"srv-1": ("accepted", "{}")}) is not None
    assert sql_store.get_session("no-such-session") is None
    # The next transaction on that connection (the pool's only one here) is one again.
    with pytest.raises(RuntimeError), Session(sql_store.engine) as s, s.begin():
        s.add(MCPWorker(worker_id="w1", last_beat=dt.datetime.now(dt.UTC)))
        s.flush()
        raise RuntimeError("the rest of the transaction failed")
    assert sql_store.worker_seen("w1") is None


def test_first_answer_wins_and_updates_the_elicitation(store: SessionStore) -> None:
    now = time.time()
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now))
    # Same request key in another session: not this request's elicitation.
    store.create_pending(
        "s2", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e2", created=now, session_id="s2")
    )
    before = time.time()
    assert store.answer_pending("s1", "srv-1", '{"result":1}', status="accepted", answer='{"edition":"first"}')
    row = store.get_elicitation("e1")
    assert row is not None and (row.status, row.answer) == ("accepted", '{"edition":"first"}')
    assert row.updated >= before - 1e-3 and row.created == pytest.approx(now, abs=2e-6)
    # The second answer changes nothing: neither the response nor the elicitation.
    assert not store.answer_pending("s1", "srv-1", '{"result":2}', status="declined", answer=None)
    pending = store.get_pending("s1", "srv-1")
    assert pending is not None and pending.response == '{"result":1}'
    again = store.get_elicitation("e1")
    assert again is not None and (again.status, again.answer) == ("accepted", '{"edition":"first"}')
    other = store.get_elicitation("e2")
    assert other is not None and other.status == "pending"
    assert not store.answer_pending("s1", "unknown", "{}", status="accepted")


def test_answer_without_status_leaves_the_elicitation(store: SessionStore) -> None:
    now = time.time()
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now))
    assert store.answer_pending("s1", "srv-1", '{"error":{}}')
    row = store.get_elicitation("e1")
    assert row is not None and row.status == "pending" and row.answer is None


def test_answer_only_moves_a_pending_elicitation(store: SessionStore) -> None:
    now = time.time()
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now))
    assert store.update_elicitation("e1", "cancelled", now + 1, detail="the call was cancelled")
    assert store.answer_pending("s1", "srv-1", '{"result":1}', status="accepted", answer="{}")
    row = store.get_elicitation("e1")
    assert row is not None and (row.status, row.answer, row.detail) == ("cancelled", None, "the call was cancelled")


def test_delete_session_keeps_the_elicitations(store: SessionStore) -> None:
    now = time.time()
    store.create_session(_session(last_seen=now))
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", elicitation=_elicitation("e1", created=now))
    assert store.delete_session("s1")
    assert store.get_pending("s1", "srv-1") is None
    assert store.get_elicitation("e1") is not None


# -- elicitations ------------------------------------------------------------------------------


def test_find_elicitations_oldest_first(store: SessionStore) -> None:
    now = time.time()
    newer = _elicitation("b-new", created=now, mode="url", elicitation_id="pay-1", request_key="k1")
    older = _elicitation("z-old", created=now - 10, mode="url", elicitation_id="pay-1", request_key="k2")
    elsewhere = _elicitation(
        "c-other", created=now - 5, mode="url", elicitation_id="pay-1", server_name="Shop", request_key="k3"
    )
    unrelated = _elicitation("d", created=now - 20, mode="url", elicitation_id="pay-2", request_key="k4")
    for record in (newer, older, elsewhere, unrelated):
        store.create_pending("s1", record.request_key, "elicitation/create", "{}", record)
    assert [r.id for r in store.find_elicitations("pay-1")] == ["z-old", "c-other", "b-new"]
    assert [r.id for r in store.find_elicitations("pay-1", server_name="Library")] == ["z-old", "b-new"]
    assert [r.id for r in store.find_elicitations("pay-1", server_name="Shop")] == ["c-other"]
    _same(store.find_elicitations("pay-1")[0], older)
    assert store.find_elicitations("unknown") == []


def test_stream_elicitations_oldest_first(store: SessionStore) -> None:
    now = time.time()
    rows = [
        _elicitation("z-second", created=now, request_key="k1"),
        _elicitation("a-first", created=now - 5, request_key="k2"),
        _elicitation("other-stream", created=now - 9, request_key="k3", stream_key="call-2"),
        _elicitation("other-session", created=now - 9, request_key="k4", session_id="s2"),
    ]
    for record in rows:
        store.create_pending(record.session_id or "", record.request_key, "elicitation/create", "{}", record)
    asked = store.stream_elicitations("s1", "call-1")
    assert [r.id for r in asked] == ["a-first", "z-second"]
    _same(asked[0], rows[1])
    assert [r.id for r in store.stream_elicitations("s1", "call-2")] == ["other-stream"]
    assert store.stream_elicitations("s1", "unknown") == []


def test_update_elicitation_is_guarded(store: SessionStore) -> None:
    now = time.time()
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", _elicitation("e1", created=now, detail="asked"))
    # Default: only from pending. Detail None keeps the old detail.
    assert store.update_elicitation("e1", "accepted", now + 1)
    row = store.get_elicitation("e1")
    assert row is not None and (row.status, row.detail) == ("accepted", "asked")
    assert row.updated == pytest.approx(now + 1, abs=2e-6)
    assert not store.update_elicitation("e1", "declined", now + 2)
    row = store.get_elicitation("e1")
    assert row is not None and row.status == "accepted" and row.updated == pytest.approx(now + 1, abs=2e-6)
    # From another status, on request; a given detail replaces the old one.
    assert store.update_elicitation("e1", "expired", now + 3, detail="worker gone", from_statuses=("accepted",))
    row = store.get_elicitation("e1")
    assert row is not None and (row.status, row.detail) == ("expired", "worker gone")
    assert not store.update_elicitation("e1", "pending", now + 4, from_statuses=("pending", "accepted"))
    assert not store.update_elicitation("unknown", "accepted", now)


def test_a_row_without_detail_is_claimed_once(store: SessionStore) -> None:
    """Workers that find a call's worker dead at once each try to set the row's detail, the
    status left as it is: one of them wins (and appends the call's final error)."""
    now = time.time()
    store.create_pending("s1", "srv-1", "elicitation/create", "{}", _elicitation("e1", created=now))
    start = threading.Barrier(8)

    def claim(n: int) -> bool:
        start.wait()
        return store.update_elicitation(
            "e1", "pending", now + 1, detail=f"worker {n} ended it", from_statuses=("pending",), without_detail=True
        )

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(claim, range(8)))
    assert results.count(True) == 1
    row = store.get_elicitation("e1")
    assert row is not None and (row.status, row.detail) == ("pending", f"worker {results.index(True)} ended it")


def test_complete_elicitations(store: SessionStore) -> None:
    now = time.time()
    rows = [
        _elicitation("a", created=now - 3, mode="url", elicitation_id="pay-1", request_key="k1"),
        _elicitation("b", created=now - 2, mode="url", elicitation_id="pay-1", request_key="k2", status="accepted"),
        _elicitation("c", created=now - 1, mode="url", elicitation_id="pay-1", request_key="k3", status="declined"),
        _elicitation("d", created=now, mode="url", elicitation_id="pay-1", request_key="k4", server_name="Shop"),
        _elicitation("e", created=now, mode="url", elicitation_id="pay-2", request_key="k5"),
    ]
    for record in rows:
        store.create_pending("s1", record.request_key, "elicitation/create", "{}", record)
    moved = store.complete_elicitations("pay-1", now + 5, server_name="Library")
    assert [r.id for r in moved] == ["a", "b"]
    for record, original in zip(moved, rows[:2], strict=True):
        _same(record, replace(original, status="completed", updated=now + 5))
    # Idempotent: nothing is open any more.
    assert store.complete_elicitations("pay-1", now + 6, server_name="Library") == []
    statuses = {r.id: r.status for r in store.find_elicitations("pay-1")}
    assert statuses == {"a": "completed", "b": "completed", "c": "declined", "d": "pending"}
    # Without a server name, every server's rows.
    assert [r.id for r in store.complete_elicitations("pay-1", now + 7)] == ["d"]
    assert store.complete_elicitations("pay-1", now + 8) == []
    assert store.complete_elicitations("unknown", now) == []
    e = store.get_elicitation("e")
    assert e is not None and e.status == "pending"


def test_a_completion_that_could_not_notify_is_completed_by_its_retry(sql_store: SQLAlchemyStore) -> None:
    """Celery's at-least-once delivery, a webhook sent again: the retry of a completion whose
    notification the database refused completes the question and tells its client, once."""
    from tests.store_checks import check_a_completion_that_could_not_notify_is_completed_by_its_retry

    def execute(sql: str) -> None:
        with sql_store.engine.begin() as connection:
            connection.exec_driver_sql(sql)

    vendor = {"mariadb": "mysql"}.get(sql_store.engine.dialect.name, sql_store.engine.dialect.name)
    check_a_completion_that_could_not_notify_is_completed_by_its_retry(
        sql_store,
        lambda elicitation_id: len(complete_in_store(sql_store, elicitation_id)[0]),
        execute,
        vendor,
        "mcp_event",
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [(None, TypeError), (17, TypeError), (b"pay-1", TypeError), (["pay-1"], TypeError), ("", ValueError)],
    ids=["None", "int", "bytes", "list", "empty"],
)
def test_complete_elicitation_refuses_an_id_that_is_not_one_naming_the_argument(
    value: Any, error: type[Exception], tmp_path: Path
) -> None:
    """A webhook whose payload lacked the field hears it where it called, not as a TypeError
    from deep inside the store."""
    from mcp_flask import complete_elicitation

    app = Flask("mcp_flask_elicitation_tests", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="flask-adapter-tests-secret-key-0123456789abcdef")
    MCP(app, server=server)
    try:
        MCP.migrate(app)
        with pytest.raises(error, match=r"^elicitation_id must "):
            complete_elicitation(value, app=app)
    finally:
        app.extensions["mcp"].close()


def test_a_completion_for_a_mistyped_server_completes_nothing_and_says_which_server_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_flask import complete_elicitation, get_state
    from tests.store_checks import check_a_completion_for_a_mistyped_server_says_so

    app = Flask("mcp_flask_elicitation_tests", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="flask-adapter-tests-secret-key-0123456789abcdef")
    MCP(app, server=server)
    try:
        MCP.migrate(app)
        check_a_completion_for_a_mistyped_server_says_so(
            get_state(app).store, lambda eid, name: complete_elicitation(eid, name, app=app), caplog
        )
    finally:
        app.extensions["mcp"].close()


def test_elicitation_ids_differing_only_in_case_are_apart(store: SessionStore) -> None:
    """A payment provider's ids are case-sensitive; completing one never completes another
    (MySQL and MariaDB compare text case-insensitively and ignore trailing spaces by default)."""
    now = time.time()
    for record_id, elicitation_id in (("lower", "cs_a1b"), ("upper", "cs_A1B"), ("spaced", "cs_a1b ")):
        record = _elicitation(record_id, created=now, mode="url", elicitation_id=elicitation_id, request_key=record_id)
        store.create_pending("s1", record.request_key, "elicitation/create", "{}", record)
    assert [r.id for r in store.find_elicitations("cs_a1b")] == ["lower"]
    assert [r.id for r in store.find_elicitations("cs_A1B", server_name="Library")] == ["upper"]
    assert [r.id for r in store.complete_elicitations("cs_a1b", now + 1)] == ["lower"]
    assert [r.id for r in store.complete_elicitations("cs_A1B", now + 1, server_name="Library")] == ["upper"]
    spaced = store.get_elicitation("spaced")
    assert spaced is not None and spaced.status == "pending"


def _overdue_and_open(store: SessionStore, now: float) -> None:
    """Three rows asked under ``pay-1``: on session ``s2`` one still pending after its expiry;
    on ``s1`` one answered (accepted) after its expiry and one pending in time."""
    url = {"mode": "url", "elicitation_id": "pay-1"}
    for record in (
        _elicitation("late", created=now - 3, expires=now - 1, request_key="k1", session_id="s2", **url),
        _elicitation("answered", created=now - 2, expires=now - 1, request_key="k2", status="accepted", **url),
        _elicitation("fresh", created=now - 1, expires=now + 100, request_key="k3", **url),
    ):
        store.create_pending(record.session_id or "", record.request_key, "elicitation/create", "{}", record)


def test_completing_expires_a_pending_row_past_its_expiry_as_the_heartbeat_would(store: SessionStore) -> None:
    """Between a row's expiry and the next heartbeat, a completion must not complete it: the
    row ends as ``expire_elicitations`` would have left it (expired); an answered one past its
    expiry is still completed (the heartbeat leaves it alone)."""
    now = time.time()
    _overdue_and_open(store, now)
    moved = store.complete_elicitations("pay-1", now)
    assert [r.id for r in moved] == ["answered", "fresh"]
    assert all(r.status == "completed" for r in moved)
    late = store.get_elicitation("late")
    assert late is not None and late.status == "expired"
    assert late.updated == pytest.approx(now, abs=2e-6)
    assert store.complete_elicitations("pay-1", now + 1) == []
    assert store.expire_elicitations(now + 1) == 0


@pytest.mark.parametrize("asker", ["anyone", "flask-user:1"])
def test_a_completion_neither_reports_nor_notifies_a_row_past_its_expiry(store: SessionStore, asker: str) -> None:
    """Through the core (a webhook completes anyone's; staff and tools only the asker's): the
    overdue row is not among the rows that moved, and its session hears nothing."""
    now = time.time()
    _overdue_and_open(store, now)
    principal = ANY_PRINCIPAL if asker == "anyone" else asker
    moved, exists = complete_in_store(store, "pay-1", "Library", principal)
    assert [r.id for r in moved] == ["answered", "fresh"] and exists
    late = store.get_elicitation("late")
    assert late is not None and late.status == "expired"
    assert store.events_after("s2", GET_STREAM, 0) == []
    assert len(store.events_after("s1", GET_STREAM, 0)) == 1
    assert complete_in_store(store, "pay-1", "Library", principal) == ([], True)


def test_a_row_past_its_expiry_answered_after_completion_read_it_is_still_completed(store: SessionStore) -> None:
    """The heartbeat leaves an answered row alone: one that completion read pending, past its
    expiry, but that the client accepted before the update, is completed, not left open."""
    now = time.time()
    record = _elicitation(
        "late", created=now - 3, expires=now - 1, mode="url", elicitation_id="pay-1", status="accepted"
    )
    store.create_pending("s1", record.request_key, "elicitation/create", "{}", record)
    as_read = replace(record, status="pending")
    assert [r.id for r in complete_rows(store, [as_read], now)] == ["late"]
    late = store.get_elicitation("late")
    assert late is not None and late.status == "completed"


def test_expire_elicitations(store: SessionStore) -> None:
    now = time.time()
    rows = [
        _elicitation("late", created=now - 100, expires=now - 1, request_key="k1"),
        _elicitation("later", created=now - 100, expires=now - 50, request_key="k2"),
        _elicitation("fresh", created=now - 100, expires=now + 100, request_key="k3"),
        _elicitation("answered", created=now - 100, expires=now - 1, request_key="k4", status="accepted"),
    ]
    for record in rows:
        store.create_pending("s1", record.request_key, "elicitation/create", "{}", record)
    assert store.expire_elicitations(now) == 2
    status = {r.id: store.get_elicitation(r.id) for r in rows}
    assert {k: v.status for k, v in status.items() if v} == {
        "late": "expired",
        "later": "expired",
        "fresh": "pending",
        "answered": "accepted",
    }
    late = status["late"]
    assert late is not None and late.updated == pytest.approx(now, abs=2e-6)
    assert store.expire_elicitations(now) == 0


# -- 2026-07-28 request state ------------------------------------------------------------------


def test_save_request_state_and_its_elicitations(store: SessionStore) -> None:
    now = time.time()
    asked = [
        _elicitation("q2", created=now + 1, session_id=None, state_id="st1", request_key="edition"),
        _elicitation("q1", created=now, session_id=None, state_id="st1", request_key="copies"),
    ]
    store.save_request_state(_state(now=now), asked)
    store.save_request_state(_state("st2", now=now), [])
    assert [r.id for r in store.elicitations_for_state("st1")] == ["q1", "q2"]
    _same(store.elicitations_for_state("st1")[0], asked[1])
    assert store.elicitations_for_state("st2") == []
    assert store.elicitations_for_state("unknown") == []


def test_save_request_state_is_one_transaction(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    sql_store.save_request_state(_state(now=now), [_elicitation("q1", created=now, session_id=None, state_id="st1")])
    with pytest.raises(IntegrityError):
        sql_store.save_request_state(
            _state("st2", now=now), [_elicitation("q1", created=now, session_id=None, state_id="st2")]
        )
    # The state was not saved without its elicitations: it cannot be redeemed.
    assert _consume(sql_store, now, state_id="st2") is None
    assert [r.state_id for r in sql_store.elicitations_for_state("st1")] == ["st1"]


def test_without_update_returning_the_claim_is_read_back(sql_store: SQLAlchemyStore) -> None:
    """Databases without ``UPDATE ... RETURNING`` (SQLite < 3.35) read the claimed row in the
    same transaction; the values come back through the same column types."""
    from mcp_flask.store import _DriverStatements

    sql_store._driver = _DriverStatements(sql_store.engine.dialect, False)
    now = time.time()
    state = _state(now=now)
    sql_store.save_request_state(state, [_elicitation("q1", created=now, session_id=None, state_id="st1")])
    consumed = _consume(sql_store, now + 1, answers={"srv-1": ("accepted", '{"ok":true}')})
    _same(consumed, replace(state, consumed=now + 1))
    assert _consume(sql_store, now + 2) is None
    row = sql_store.get_elicitation("q1")
    assert row is not None and (row.status, row.answer) == ("accepted", '{"ok":true}')


@pytest.mark.postgres
def test_a_connection_lost_under_a_redemption_is_retried_on_a_new_one(pg_store_url: str) -> None:
    """The database drops the connection after the pool handed it out: the statement fails
    with a disconnect, the connection is thrown away and the redemption runs again, once."""
    import psycopg

    engine = make_engine(pg_store_url)
    store = SQLAlchemyStore(engine)
    now = time.time()
    store.save_request_state(_state("st-lost", now=now), [])
    killed: list[int] = []

    def kill_once(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if killed:
            return
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        dbapi_connection.rollback()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        killed.append(pid)

    sa.event.listen(engine, "checkout", kill_once)
    try:
        consumed = _consume(store, now + 1, state_id="st-lost")
    finally:
        sa.event.remove(engine, "checkout", kill_once)
        engine.dispose()
    assert killed, "the connection was never handed out"
    assert consumed is not None and consumed.state_id == "st-lost"
    engine = make_engine(pg_store_url)
    try:
        assert _consume(SQLAlchemyStore(engine), now + 2, state_id="st-lost") is None
    finally:
        engine.dispose()


def _kill_backends(url: str) -> int:
    """Terminate every connection to ``url``'s database (as a database restart would)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        ).fetchall()
    return len(rows)


def _fill_pool(engine: Engine, size: int) -> None:
    """Leave ``size`` connections resting in the pool (sequential calls would reuse one)."""
    held = [engine.raw_connection() for _ in range(size)]
    for connection in held:
        connection.close()


@pytest.mark.postgres
@pytest.mark.parametrize("rested", [False, True], ids=["in-use", "rested"])
def test_a_restarted_database_costs_the_store_no_error(
    pg_store_url: str, rested: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pooled connection dies at once. Connections in steady use are not pinged: the
    first statement fails, the pool is emptied (not only that connection) and the call runs
    again on a new one; rested connections are pinged at checkout and replaced before use.
    Both for the driver-level hot path (a redemption) and for an ORM read (a session)."""
    from mcp_flask import store as store_module

    # In use: back in use long within the idle time, however slow this machine is at killing
    # the connections in between.
    monkeypatch.setattr(store_module, "IDLE_PING_SECONDS", 0.2 if rested else 60)
    engine = make_engine(pg_store_url)
    store = SQLAlchemyStore(engine)
    pings: list[bool] = []
    do_ping = engine.dialect.do_ping

    def counted_ping(dbapi_connection: Any) -> bool:
        try:
            alive = do_ping(dbapi_connection)
        except Exception:
            pings.append(False)
            raise
        pings.append(alive)
        return alive

    monkeypatch.setattr(engine.dialect, "do_ping", counted_ping)
    state_id, session_id = f"st-restart-{rested}", f"s-restart-{rested}"
    try:
        now = time.time()
        store.save_request_state(_state(state_id, now=now), [])
        store.create_session(_session(session_id, last_seen=now))
        _fill_pool(engine, 3)
        assert not pings, "connections in steady use are not pinged"
        assert _kill_backends(pg_store_url) >= 3
        if rested:
            time.sleep(0.3)
        consumed = _consume(store, now + 1, state_id=state_id)
        assert consumed is not None and consumed.state_id == state_id
        assert _kill_backends(pg_store_url) >= 1
        if rested:
            time.sleep(0.3)
        session = store.get_session(session_id)
        assert session is not None and session.session_id == session_id
        if rested:
            assert False in pings, "a rested dead connection is found by its ping"
        else:
            assert not pings
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", [b for b in BACKENDS if b != "sqlite"])  # a file has no server to lose
def test_a_rested_connection_is_pinged_without_a_warning(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that rested in the pool is pinged at checkout, and the ping itself warns
    of nothing: SQLAlchemy 2.0.20 (the oldest release the ``flask`` extra admits) pings
    MySQL with ``ping(False)``, which mysqlclient 2.2 deprecates, so under ``-W error`` the
    first store call after a quiet second failed on MariaDB (and warned in a log otherwise)."""
    from mcp_flask import store as store_module

    monkeypatch.setattr(store_module, "IDLE_PING_SECONDS", 0.0)
    pings: list[bool] = []
    ping = store_module._ping

    def counted(dialect: Any, dbapi_connection: Any) -> bool:
        alive = ping(dialect, dbapi_connection)
        pings.append(alive)
        return alive

    monkeypatch.setattr(store_module, "_ping", counted)
    with _migrated_engine(kind, request, tmp_path) as engine:
        store = SQLAlchemyStore(engine)
        store.create_session(_session("s-rested", last_seen=time.time()))
        session = store.get_session("s-rested")  # checks out the connection that just rested
        assert session is not None and session.session_id == "s-rested"
    assert pings and all(pings), pings


def test_consume_is_single_use(store: SessionStore) -> None:
    now = time.time()
    state = _state(now=now)
    store.save_request_state(state, [])
    consumed = _consume(store, now + 1)
    _same(consumed, replace(state, consumed=now + 1))
    assert _consume(store, now + 2) is None
    assert _consume(store, now + 2, state_id="unknown") is None


def test_consume_expired(store: SessionStore) -> None:
    now = time.time()
    store.save_request_state(_state(now=now - 600, expires=now - 1), [])
    store.save_request_state(_state("st-edge", now=now - 600, expires=now), [])
    assert _consume(store, now) is None
    # Expiring exactly now is expired.
    assert _consume(store, now, state_id="st-edge") is None


@pytest.mark.parametrize(
    "wrong",
    [
        {"server_name": "Shop"},
        {"method": "resources/read"},
        {"target": "return"},
        {"args_digest": "e" * 64},
        {"principal": "bob"},
        {"principal": None},
        # Told apart on every database (MySQL and MariaDB compare text case-insensitively and
        # ignore trailing spaces by default).
        {"principal": "Alice"},
        {"principal": "alice "},
        {"target": "Borrow"},
        {"server_name": "library"},
    ],
    ids=lambda wrong: next(iter(wrong)) + "=" + repr(next(iter(wrong.values()))),
)
def test_consume_with_the_wrong_binding_writes_nothing(store: SessionStore, wrong: dict[str, Any]) -> None:
    now = time.time()
    store.save_request_state(
        _state(now=now), [_elicitation("q1", created=now, session_id=None, state_id="st1", request_key="edition")]
    )
    assert _consume(store, now + 1, answers={"edition": ("accepted", '{"edition":"first"}')}, **wrong) is None
    row = store.get_elicitation("q1")
    assert row is not None and (row.status, row.answer) == ("pending", None)
    # The state stays unconsumed: the right request still redeems it.
    consumed = _consume(store, now + 2, answers={"edition": ("accepted", '{"edition":"first"}')})
    assert consumed is not None and consumed.consumed == now + 2
    row = store.get_elicitation("q1")
    assert row is not None and (row.status, row.answer) == ("accepted", '{"edition":"first"}')


@pytest.mark.parametrize("key", ["Edition", "edition "])
def test_an_answer_under_a_key_differing_in_case_or_trailing_spaces_answers_nothing(
    store: SessionStore, key: str
) -> None:
    """The SDK takes an answer by its exact key: ``Edition`` is not the question ``edition``,
    which it asks again. Its row must not say ``accepted`` (with an answer the tool never
    got) on MySQL and MariaDB, whose default collations ignore case and trailing spaces."""
    now = time.time()
    store.save_request_state(
        _state(now=now), [_elicitation("q1", created=now, session_id=None, state_id="st1", request_key="edition")]
    )
    consumed = _consume(store, now + 1, answers={key: ("accepted", '{"edition":"first"}')})
    assert consumed is not None
    row = store.get_elicitation("q1")
    assert row is not None and row.status != "accepted" and row.answer is None, row


def test_consume_an_anonymous_state(store: SessionStore) -> None:
    now = time.time()
    store.save_request_state(_state(now=now, principal=None), [])
    # None matches NULL only, and a principal never matches NULL.
    assert _consume(store, now + 1, principal="alice") is None
    assert _consume(store, now + 1, principal="") is None
    consumed = _consume(store, now + 1, principal=None)
    assert consumed is not None and consumed.principal is None


def test_consume_answers_only_that_states_pending_rows(store: SessionStore) -> None:
    now = time.time()
    store.save_request_state(
        _state(now=now),
        [
            _elicitation("q-edition", created=now, session_id=None, state_id="st1", request_key="edition"),
            _elicitation("q-copies", created=now + 1, session_id=None, state_id="st1", request_key="copies"),
            _elicitation(
                "q-done", created=now + 2, session_id=None, state_id="st1", request_key="pay", status="declined"
            ),
        ],
    )
    # Another state asking under the same key.
    store.save_request_state(
        _state("st2", now=now),
        [_elicitation("other", created=now, session_id=None, state_id="st2", request_key="edition")],
    )
    answers = {
        "edition": ("accepted", '{"edition":"first"}'),
        "pay": ("accepted", '{"paid":true}'),
        "unknown": ("declined", None),
    }
    assert _consume(store, now + 5, answers=answers) is not None
    rows = {r.id: (r.status, r.answer) for r in store.elicitations_for_state("st1")}
    assert rows == {
        "q-edition": ("accepted", '{"edition":"first"}'),
        "q-copies": ("expired", None),  # left out of the retry: no retry can answer it now
        "q-done": ("declined", None),
    }
    copies = store.get_elicitation("q-copies")
    assert copies is not None and copies.detail == "The client retried without answering it"
    assert copies.updated == pytest.approx(now + 5, abs=2e-6)
    edition = store.get_elicitation("q-edition")
    assert edition is not None and edition.updated == pytest.approx(now + 5, abs=2e-6)
    other = store.get_elicitation("other")
    assert other is not None and (other.status, other.answer) == ("pending", None)


def test_a_retry_without_answers_expires_every_question_it_left_pending(store: SessionStore) -> None:
    """The admin's pending list must not keep questions that can no longer be answered."""
    now = time.time()
    questions = [
        _elicitation(f"q{n}", created=now + n, session_id=None, state_id="st1", request_key=f"k{n}") for n in range(2)
    ]
    store.save_request_state(_state(now=now), questions)
    assert _consume(store, now + 3, answers={}) is not None
    rows = {r.id: (r.status, r.detail) for r in store.elicitations_for_state("st1")}
    assert rows == {f"q{n}": ("expired", "The client retried without answering it") for n in range(2)}


def test_a_redemption_with_more_answers_than_questions(sql_store: SQLAlchemyStore) -> None:
    """The client chooses how many answers it sends: beyond ``ONE_STATEMENT_ANSWERS`` they are
    recorded one statement each (no statement is built for each new count), with the same
    result."""
    from mcp_common.store import ONE_STATEMENT_ANSWERS

    now = time.time()
    questions = [
        _elicitation(f"q{n}", created=now, session_id=None, state_id="st1", request_key=f"k{n}") for n in range(2)
    ]
    sql_store.save_request_state(_state(now=now), questions)
    many = ONE_STATEMENT_ANSWERS + 24
    answers = {f"k{n}": ("accepted", f'{{"n":{n}}}') for n in range(many)}
    assert _consume(sql_store, now + 1, answers=answers) is not None
    rows = {r.id: (r.status, r.answer) for r in sql_store.elicitations_for_state("st1")}
    assert rows == {"q0": ("accepted", '{"n":0}'), "q1": ("accepted", '{"n":1}')}
    assert _consume(sql_store, now + 2, answers=answers) is None
    assert many not in sql_store._driver._redemptions


def test_a_redemption_reaches_its_question_by_state_not_through_every_pending_row(tmp_path: Path) -> None:
    """With thousands of questions pending, redeeming one handle must not walk them all:
    SQLite (no statistics) chose the status index for the answer's UPDATE until the
    ``(state_id, request_key)`` index existed."""
    with _migrated_engine("sqlite", None, tmp_path) as engine:  # type: ignore[arg-type]
        store = SQLAlchemyStore(engine)
        now = time.time()
        for n in range(300):
            state_id = f"st{n:03d}"
            row = _elicitation(f"q{n:03d}", created=now, session_id=None, state_id=state_id, request_key="edition")
            store.save_request_state(_state(state_id, now=now), [row])
        statements: list[str] = []

        def trace(dbapi_connection: Any, record: Any, proxy: Any) -> None:
            # Every statement the store's connection runs, values filled in (SQLite's trace).
            dbapi_connection.set_trace_callback(statements.append)

        sa.event.listen(engine, "checkout", trace)
        try:
            answers = {"edition": ("declined", None)}
            assert _consume(store, now + 1, state_id="st150", answers=answers) is not None
        finally:
            sa.event.remove(engine, "checkout", trace)
        assert store.get_elicitation("q150").status == "declined"  # type: ignore[union-attr]
        assert store.get_elicitation("q151").status == "pending"  # type: ignore[union-attr]
        # The answer, then the questions left unanswered: both by the state's index.
        updates = [sql for sql in statements if sql.startswith("UPDATE mcp_elicitation")]
        assert len(updates) == 2, updates
        with engine.connect() as connection:
            for update in updates:
                plan = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + update).all()
                assert "ix_mcp_elicitation_state" in str(plan), (update, plan)


def test_purge_expired_deletes_old_request_states(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    sql_store.create_session(_session("old", last_seen=now - 1000))
    sql_store.create_session(_session("new", last_seen=now))
    sql_store.save_request_state(
        _state("old-open", now=now - 2000, expires=now - 900),
        [_elicitation("q-old", created=now - 2000, session_id=None, state_id="old-open")],
    )
    sql_store.save_request_state(_state("old-used", now=now - 2000, expires=now - 900), [])
    assert _consume(sql_store, now - 1500, state_id="old-used") is not None
    sql_store.save_request_state(_state("recent", now=now - 700, expires=now - 100), [])
    assert sql_store.purge_expired(now - 500) == 1
    with sql_store.engine.connect() as connection:
        left = set(connection.scalars(sa.select(MCPRequestState.state_id)))
    assert left == {"recent"}
    # Elicitations are the audit trail: purging keeps them.
    assert sql_store.get_elicitation("q-old") is not None
    assert sql_store.get_session("old") is None and sql_store.get_session("new") is not None


# -- workers -----------------------------------------------------------------------------------


def test_worker_heartbeats(store: SessionStore) -> None:
    now = time.time()
    assert store.worker_seen("host:1:abc") is None
    store.beat_worker("host:1:abc", now)
    seen = store.worker_seen("host:1:abc")
    assert seen is not None and seen == pytest.approx(now, abs=2e-6)
    store.beat_worker("host:1:abc", now + 30)
    seen = store.worker_seen("host:1:abc")
    assert seen is not None and seen == pytest.approx(now + 30, abs=2e-6)
    assert store.worker_seen("host:2:def") is None


def test_concurrent_first_beats(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    start = threading.Barrier(8)

    def beat(n: int) -> None:
        start.wait()
        sql_store.beat_worker("host:9:race", now + n)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(beat, range(8)))
    seen = sql_store.worker_seen("host:9:race")
    assert seen is not None and now - 1e-3 <= seen <= now + 7 + 1e-3
    with sql_store.engine.connect() as connection:
        assert connection.scalar(sa.select(sa.func.count()).select_from(MCPWorker)) == 1


# -- races across connections -------------------------------------------------------------------


def test_concurrent_consumes_one_winner(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    sql_store.save_request_state(
        _state(now=now), [_elicitation("q1", created=now, session_id=None, state_id="st1", request_key="edition")]
    )
    start = threading.Barrier(8)

    def consume(n: int) -> RequestStateRecord | None:
        start.wait()
        return _consume(sql_store, now + 1, answers={"edition": ("accepted", f'{{"n":{n}}}')})

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(consume, range(8)))
    winners = [n for n, result in enumerate(results) if result is not None]
    assert len(winners) == 1
    row = sql_store.get_elicitation("q1")
    assert row is not None and (row.status, row.answer) == ("accepted", f'{{"n":{winners[0]}}}')


def test_concurrent_answers_one_winner(sql_store: SQLAlchemyStore) -> None:
    now = time.time()
    sql_store.create_pending(
        "s1", "srv-race", "elicitation/create", "{}", _elicitation("e1", created=now, request_key="srv-race")
    )
    start = threading.Barrier(8)

    def answer(n: int) -> bool:
        start.wait()
        return sql_store.answer_pending("s1", "srv-race", f'{{"n":{n}}}', status="accepted", answer=f'{{"a":{n}}}')

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(answer, range(8)))
    assert results.count(True) == 1
    winner = results.index(True)
    pending = sql_store.get_pending("s1", "srv-race")
    assert pending is not None and pending.response == f'{{"n":{winner}}}'
    row = sql_store.get_elicitation("e1")
    assert row is not None and (row.status, row.answer) == ("accepted", f'{{"a":{winner}}}')


def test_concurrent_completions_move_each_row_once(sql_store: SQLAlchemyStore) -> None:
    """A webhook and its retry, a task delivered twice, at the same moment: each row moves
    once, and each asking session is told once."""
    now = time.time()
    for n in range(4):
        session_id = f"s{n % 2}"
        record = _elicitation(
            f"u{n}", created=now + n, mode="url", elicitation_id="pay-1", request_key=f"k{n}", session_id=session_id
        )
        sql_store.create_pending(session_id, record.request_key, "elicitation/create", "{}", record)
    start = threading.Barrier(8)

    def complete(_: int) -> list[str]:
        start.wait()
        return [r.id for r in complete_in_store(sql_store, "pay-1")[0]]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(complete, range(8)))
    moved = [record_id for result in results for record_id in result]
    assert sorted(moved) == ["u0", "u1", "u2", "u3"]
    for session_id in ("s0", "s1"):
        (event,) = sql_store.events_after(session_id, GET_STREAM, 0)
        assert '"elicitationId":"pay-1"' in event.message


# -- the migration -----------------------------------------------------------------------------


def _alembic(engine: Engine, action: Callable[[Config], None]) -> None:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        action(config)


def _indexes(engine: Engine, table: str) -> dict[str, list[str]]:
    return {ix["name"]: list(ix["column_names"]) for ix in sa.inspect(engine).get_indexes(table) if ix["name"]}


def _check_head(engine: Engine) -> None:
    assert current_revision(engine) == HEAD
    assert set(ALL_TABLES) | {VERSION_TABLE} <= set(sa.inspect(engine).get_table_names())
    assert _indexes(engine, "mcp_elicitation") == {
        "ix_mcp_elicitation_elicitation_id": ["elicitation_id"],
        "ix_mcp_elicitation_request": ["session_id", "request_key"],
        "ix_mcp_elicitation_state": ["state_id", "request_key"],
        "ix_mcp_elicitation_status": ["status"],
        "ix_mcp_elicitation_stream": ["session_id", "stream_key"],
    }
    assert _indexes(engine, "mcp_request_state") == {"ix_mcp_request_state_expires": ["expires"]}
    assert _indexes(engine, "mcp_worker") == {}
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_migrate_a_fresh_database(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    try:
        migrate(engine)
        _check_head(engine)
        migrate(engine)  # idempotent
        assert current_revision(engine) == HEAD
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_a_database_migrated_before_mcp_0005_keeps_microseconds_after_it(fresh_url: str) -> None:
    """MySQL and MariaDB: mcp_0001-0004 made whole-second columns there; an upgraded database
    reads back the instant written, as a fresh one does."""
    engine = make_engine(fresh_url)
    try:
        migrate(engine, "mcp_0004")
        migrate(engine)
        store = SQLAlchemyStore(engine)
        now = time.time()
        store.create_session(_session(last_seen=now))
        store.beat_worker("host:1:abc", now)
        loaded = store.get_session("s1")
        assert loaded is not None and loaded.last_seen == pytest.approx(now, abs=2e-6)
        assert store.worker_seen("host:1:abc") == pytest.approx(now, abs=2e-6)
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_a_database_migrated_before_mcp_0006_holds_long_text(fresh_url: str) -> None:
    """MySQL and MariaDB: mcp_0001-0005 made 64 kB ``TEXT`` columns there; an upgraded
    database keeps a longer state, event and answer whole, as a fresh one does."""
    engine = make_engine(fresh_url)
    try:
        migrate(engine, "mcp_0005")
        migrate(engine)
        store = SQLAlchemyStore(engine)
        now = time.time()
        long = "x" * 200_000
        store.save_request_state(replace(_state(now=now), sealed=long), [])
        claimed = _consume(store, now + 1)
        assert claimed is not None and claimed.sealed == long
        store.create_session(_session(last_seen=now))
        store.append_event("s1", "k1", long)
        assert [event.message for event in store.events_after("s1", "k1", 0)] == [long]
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_a_downgrade_below_mcp_0006_neither_cuts_long_text_nor_stops_half_done(fresh_url: str) -> None:
    """MySQL and MariaDB alter one column at a time, each committed: a value longer than
    ``TEXT`` holds must refuse ``--revision mcp_0005`` before the first column changes, naming
    the column, rather than fail at its own column with the earlier ones already ``TEXT`` under
    revision mcp_0006 (which ``migrate`` then never fixes). Elsewhere the downgrade changes no
    text column."""
    from alembic.util import CommandError

    engine = make_engine(fresh_url)
    try:
        migrate(engine)
        store = SQLAlchemyStore(engine)
        now = time.time()
        long = "x" * 200_000
        store.create_session(_session(last_seen=now))
        store.append_event("s1", "k1", long)
        if engine.dialect.name in ("mysql", "mariadb"):
            with pytest.raises(CommandError, match=r"mcp_event\.message"):
                migrate(engine, "mcp_0005")
            assert current_revision(engine) == HEAD
        else:
            migrate(engine, "mcp_0005")
        migrate(engine)
        assert [event.message for event in store.events_after("s1", "k1", 0)] == [long]
        # Every text column still holds a long value, the first one altered included.
        store.create_session(replace(_session("s2", last_seen=now), client_params=long))
        loaded = store.get_session("s2")
        assert loaded is not None and loaded.client_params == long
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_migrate_from_the_previous_revision_keeps_the_data(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    try:
        migrate(engine, PREVIOUS)
        assert current_revision(engine) == PREVIOUS
        assert not set(NEW_TABLES) & set(sa.inspect(engine).get_table_names())
        store = SQLAlchemyStore(engine)
        now = time.time()
        store.create_session(_session(last_seen=now))
        store.create_pending("s1", "srv-1", "roots/list", "{}")
        migrate(engine)
        _check_head(engine)
        assert store.get_session("s1") is not None and store.get_pending("s1", "srv-1") is not None
        store.save_request_state(_state(now=now), [])
        assert _consume(store, now + 1) is not None
        # And back down: the new tables go, the old rows stay.
        _alembic(engine, lambda config: command.downgrade(config, PREVIOUS))
        assert current_revision(engine) == PREVIOUS
        assert not set(NEW_TABLES) & set(sa.inspect(engine).get_table_names())
        assert store.get_session("s1") is not None
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_migrate_to_an_earlier_revision_downgrades_and_base_drops_the_tables(fresh_url: str) -> None:
    """As Django's ``migrate mcp_django <migration>`` and ``zero``: an earlier revision takes
    the tables back to it, keeping the rows it still has a table for, and ``base`` drops every
    MCP table (removing the extension), leaving the application's own tables alone."""
    engine = make_engine(fresh_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("CREATE TABLE shop_order (id INTEGER PRIMARY KEY)"))
        migrate(engine)
        store = SQLAlchemyStore(engine)
        store.create_session(_session(last_seen=time.time()))
        migrate(engine, PREVIOUS)
        assert current_revision(engine) == PREVIOUS
        assert not set(NEW_TABLES) & set(sa.inspect(engine).get_table_names())
        assert store.get_session("s1") is not None
        migrate(engine, "base")
        assert current_revision(engine) is None
        assert set(sa.inspect(engine).get_table_names()) == {"shop_order"}
        with engine.begin() as connection:
            connection.execute(sa.text("DROP TABLE shop_order"))
        migrate(engine)  # and installed again
        _check_head(engine)
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_url", BACKENDS, indirect=True)
def test_cli_migrate_upgrades_an_existing_database(fresh_url: str, tmp_path: Path) -> None:
    app = Flask("mcp_flask_elicitation_tests", instance_path=str(tmp_path / "instance"))
    app.config.update(SECRET_KEY="flask-adapter-tests-secret-key-0123456789abcdef", MCP_DATABASE_URI=fresh_url)
    MCP(app, server=server)
    try:
        MCP.migrate(app, PREVIOUS)
        result = app.test_cli_runner().invoke(args=["mcp", "migrate"])
        assert result.exit_code == 0, result.output
        assert HEAD in result.output
        engine = app.extensions["mcp"].engine
        _check_head(engine)
    finally:
        app.extensions["mcp"].close()


def test_models_mirror_the_django_models() -> None:
    """Same columns (names, types, lengths, nullability) and indexes as ``mcp_django.models``."""
    from django.db import models as dj

    from mcp_django import models as django_models

    pairs = [
        (django_models.MCPElicitation, MCPElicitation),
        (django_models.MCPRequestState, MCPRequestState),
        (django_models.MCPWorker, MCPWorker),
    ]
    for django_model, flask_model in pairs:
        table = flask_model.__table__
        django_fields = {f.column: f for f in django_model._meta.concrete_fields}
        assert set(django_fields) == set(table.columns.keys()), table.name
        single_indexes = {tuple(c.name for c in ix.columns) for ix in table.indexes if len(ix.columns) == 1}
        for name, field in django_fields.items():
            column = table.columns[name]
            assert column.primary_key == field.primary_key, name
            assert column.nullable == (field.null and not field.primary_key), name
            assert ((name,) in single_indexes) == (field.db_index and not field.primary_key), name
            if isinstance(field, dj.CharField):
                assert isinstance(column.type, sa.String) and not isinstance(column.type, sa.Text), name
                assert column.type.length == field.max_length, name
            elif isinstance(field, dj.TextField):
                assert isinstance(column.type, sa.Text), name
            elif isinstance(field, dj.DateTimeField):
                assert isinstance(column.type, sa.TypeDecorator) and column.type.impl.timezone, name
            else:  # pragma: no cover - a field type this test does not know yet
                pytest.fail(f"{django_model.__name__}.{name}: {type(field).__name__}")
        composite = {tuple(c.name for c in ix.columns) for ix in table.indexes if len(ix.columns) > 1}
        assert composite == {tuple(ix.fields) for ix in django_model._meta.indexes}, table.name


def test_only_an_in_memory_database_is_private_to_the_process(store: SessionStore, tmp_path: Path) -> None:
    # A file or a server other workers reach: the endpoint writes this worker's heartbeat there.
    assert store.process_private() is isinstance(store, MemoryStore)
    for url in ("sqlite://", "sqlite:///:memory:", "sqlite:///file:shop?mode=memory&cache=shared&uri=true"):
        assert SQLAlchemyStore(make_engine(url)).process_private() is True, url
    assert SQLAlchemyStore(make_engine(f"sqlite:///{tmp_path / 'shop.sqlite3'}")).process_private() is False


def test_a_retry_with_nul_characters_is_answered_as_on_any_store(store: SessionStore) -> None:
    """PostgreSQL text cannot hold NUL: a client's retry naming a tool or a question with one
    matches nothing stored, and is answered as such (never a 500 from the database driver)."""
    from tests.core.test_elicitation import ask, call, endpoint, refused

    point = endpoint(store)  # type: ignore[arg-type]
    try:
        key, _, handle = ask(point)
        answer = {"action": "accept", "content": {"name": "Ada"}}
        assert refused(*call(point, "hel\x00lo", {}, inputResponses={key: answer}, requestState=handle))
        status, body = call(point, "hello", {}, inputResponses={key + "\x00": answer}, requestState=handle)
        assert status == 200 and body["result"]["resultType"] == "input_required", body
    finally:
        # Its heartbeat would go on using the store's engine after the fixture disposed it.
        point.close()


def test_a_legacy_answer_to_an_id_with_a_nul_is_dropped_as_unknown(store: SessionStore) -> None:
    """An answer to a server request nobody made (its id holds a NUL, which PostgreSQL text
    cannot) is accepted and dropped like any unknown answer, not a 500 from the driver."""
    from tests.core.test_elicitation import endpoint, initialize, legacy

    point = endpoint(store)  # type: ignore[arg-type]
    try:
        session = initialize(point, {"elicitation": {}})
        for request_id in ("srv-unknown", "srv-\x00"):
            reply = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {}}}
            assert point.handle(legacy(session, reply)).status == 202
    finally:
        point.close()  # as above


UNSTORABLE = {"lone-surrogate": "\ud800", "nul": "\x00"}
"""Text JSON carries and no database takes: UTF-8 has no lone surrogate (every driver refuses to
encode one), PostgreSQL text has no NUL."""


@pytest.mark.parametrize("odd", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_a_retry_with_text_no_database_holds_is_answered_as_on_any_store(store: SessionStore, odd: str) -> None:
    """A retry naming a question with such a key matches nothing stored, and is answered as
    such (never a 500 from the database driver)."""
    from tests.core.test_elicitation import ask, call, endpoint

    point = endpoint(store)  # type: ignore[arg-type]
    try:
        key, _, handle = ask(point)
        answer = {"action": "accept", "content": {"name": "Ada"}}
        status, body = call(point, "hello", {}, inputResponses={key + odd: answer}, requestState=handle)
        assert status == 200 and body["result"]["resultType"] == "input_required", body
    finally:
        point.close()  # its heartbeat would outlive the store's engine


@pytest.mark.parametrize("odd", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_a_legacy_answer_to_an_id_no_database_holds_is_dropped_as_unknown(store: SessionStore, odd: str) -> None:
    from tests.core.test_elicitation import endpoint, initialize, legacy

    point = endpoint(store)  # type: ignore[arg-type]
    try:
        session = initialize(point, {"elicitation": {}})
        reply = {"jsonrpc": "2.0", "id": f"srv-{odd}", "result": {"action": "accept", "content": {}}}
        assert point.handle(legacy(session, reply)).status == 202
    finally:
        point.close()


@pytest.mark.parametrize("odd", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_a_question_built_from_a_clients_text_is_asked_and_completed_on_any_store(
    store: SessionStore, odd: str
) -> None:
    """The tool puts the client's argument in its question (its URL, its elicitation id): the
    question is asked, on either wire, and the id the tool completes reaches its row. The rows
    keep the text with U+FFFD in place of what the database cannot hold."""
    from tests.core.test_elicitation import ask, endpoint, events, initialize, legacy_call

    point = endpoint(store, stream_hold_seconds=0.3)  # type: ignore[arg-type]
    try:
        _, question, _ = ask(point, "hold", {"booking_id": f"7{odd}"})
        assert question["params"]["url"] == f"https://pay.example.com/7{odd}"
        session = initialize(point, {"elicitation": {"form": {}, "url": {}}})
        called = legacy_call(point, session, "pay", {"booking_id": f"8{odd}"})
        asked = [e["data"] for e in events(point, called) if e["data"]]
        assert asked[0]["method"] == "elicitation/create", asked
        assert asked[0]["params"]["elicitationId"] == f"dep-8{odd}"
        for booking in ("7", "8"):
            (row,) = store.find_elicitations(f"dep-{booking}\ufffd")
            assert row.url == f"https://pay.example.com/{booking}\ufffd"
            moved, exists = complete_in_store(store, f"dep-{booking}{odd}")
            assert [r.id for r in moved] == [row.id] and exists
    finally:
        point.close()


@pytest.mark.parametrize("odd", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_completing_an_id_no_database_holds_completes_nothing(store: SessionStore, odd: str) -> None:
    """A webhook's caller chose the id: one no row can have is unknown, not a driver error."""
    assert complete_in_store(store, f"deposit-{odd}") == ([], False)


def test_a_session_whose_client_wrote_a_lone_surrogate_opens_on_any_store(store: SessionStore) -> None:
    from tests.core.test_elicitation import endpoint, legacy
    from tests.core.test_endpoint import request

    point = endpoint(store)  # type: ignore[arg-type]
    try:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "\ud800", "version": "0"}}
        opened = point.handle(request("POST", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
        assert opened.status == 200, opened.body
        listed = point.handle(legacy(opened.headers["Mcp-Session-Id"], {"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        assert listed.status == 200, listed.body
    finally:
        point.close()


def _notes_server() -> MCPServer:
    """A resource template that asks before it answers (2026-07-28): the request state is
    bound to the URI the client read, the client's text, free text here (the SDK's checks of
    a path are off for it)."""
    server = MCPServer("Notes")

    @server.resource("notes://{name}", security=ResourceSecurity(exempt_params={"name"}))
    async def note(name: str, ctx: Context) -> str | InputRequiredResult:
        key = f"confirm {name}"  # a question per note
        answer = (ctx.input_responses or {}).get(key)
        if answer is None:
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            ask = ElicitRequest(params=ElicitRequestFormParams(message="Show it?", requested_schema=schema))
            return InputRequiredResult(input_requests={key: ask}, request_state="asked")
        return f"note {name!r}: {answer.action}"

    return server


def _read(point: Any, uri: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    """One 2026-07-28 ``resources/read``, as the SDK's client sends it (its ``Mcp-Name`` header
    base64-wrapped when the URI is not plain printable ASCII)."""
    import json

    from mcp.shared.inbound import encode_header_value

    from tests.core.test_endpoint import MODERN, request

    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": meta, **extra}}
    req = request(
        "POST", body, mcp_protocol_version=MODERN, mcp_method="resources/read", mcp_name=encode_header_value(uri)
    )
    response = point.handle(req)
    return response.status, json.loads(response.body)


def test_a_resource_read_by_a_uri_no_database_holds_asks_and_answers_on_any_store(store: SessionStore) -> None:
    """The URI is the client's text, and JSON lets it carry a NUL (PostgreSQL text cannot): the
    resource's question (its key built from the URI) is asked, answered and recorded as
    answered, on every store, as for any other URI."""
    from mcp_common import MCPConfig, MCPEndpoint
    from mcp_common.state import parse_handle
    from tests.core.test_endpoint import SECRET

    point = MCPEndpoint(_notes_server(), MCPConfig(secret_keys=(SECRET,), poll_interval=0.02), store)
    try:
        for name in ("plain", "odd\x00"):
            status, body = _read(point, f"notes://{name}")
            assert status == 200 and body["result"]["resultType"] == "input_required", (name, body)
            ((key, _),) = body["result"]["inputRequests"].items()
            handle = body["result"]["requestState"]
            answers = {key: {"action": "accept", "content": {"ok": True}}}
            status, body = _read(point, f"notes://{name}", inputResponses=answers, requestState=handle)
            assert status == 200 and body["result"]["contents"][0]["text"] == f"note {name!r}: accept", (name, body)
            (row,) = store.elicitations_for_state(parse_handle(point, handle))
            assert row.status == "accepted", name
        # The row keeps U+FFFD in the NUL's place; the state is still bound to the very URI.
        status, body = _read(point, "notes://odd\x00")
        handle = body["result"]["requestState"]
        status, body = _read(point, "notes://odd\ufffd", requestState=handle)
        assert status == 400 and body["error"]["data"] == {"reason": "invalid_request_state"}, body
    finally:
        point.close()


@pytest.mark.parametrize("tool", ["hello", "greet"])
def test_a_refused_answer_is_recorded_as_refused(store: SessionStore, tool: str) -> None:
    """The SDK refuses an answer that does not fit the schema: the row says so, on every backend."""
    from tests.core.test_elicitation import check_a_refused_answer_is_recorded_as_refused

    check_a_refused_answer_is_recorded_as_refused(store, tool, {"action": "accept", "content": {"nam": "Ada"}})


@pytest.mark.parametrize("tool", ["interview", "hello"])
def test_a_refused_legacy_answer_is_recorded_as_refused(store: SessionStore, tool: str) -> None:
    """On the legacy wire too: the SDK refuses an answer that does not fit the schema, the row says so."""
    from tests.core.test_elicitation import check_a_refused_legacy_answer_is_recorded_as_refused

    check_a_refused_legacy_answer_is_recorded_as_refused(store, tool, {"action": "accept", "content": {"name": 5}})


def test_a_question_with_a_long_key_round_trips(store: SessionStore) -> None:
    """A question keyed longer than the row's column asks and is answered, on every backend."""
    from tests.core.test_elicitation import check_a_question_with_a_long_key_round_trips

    check_a_question_with_a_long_key_round_trips(store)


def test_a_long_answer_is_recorded(store: SessionStore) -> None:
    """An answer longer than MySQL's TEXT is recorded whole, on every backend."""
    from tests.core.test_elicitation import check_a_long_answer_is_recorded

    check_a_long_answer_is_recorded(store)


def test_a_long_principal_is_bound_like_a_short_one(store: SessionStore) -> None:
    """A principal longer than the rows' column binds questions, on every backend."""
    from tests.core.test_elicitation import check_a_long_principal_is_bound_like_a_short_one

    check_a_long_principal_is_bound_like_a_short_one(store)


def test_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras(store: SessionStore) -> None:
    """A tool named longer than the row's column, or with a NUL, asks on every backend."""
    from tests.core.test_elicitation import check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras

    check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras(store)


def test_a_round_of_many_questions_is_recorded(store: SessionStore) -> None:
    """More questions in one round than one PostgreSQL statement can carry, on every backend."""
    from tests.core.test_elicitation import check_a_round_of_many_questions_is_recorded

    check_a_round_of_many_questions_is_recorded(store)
