"""``SQLAlchemyStore`` and the shipped migrations, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from mcp_common.store import GET_STREAM, SessionRecord, stream_turn_name
from mcp_flask import SQLAlchemyStore, make_engine, migrate
from mcp_flask.migrations import current_revision
from mcp_flask.models import VERSION_TABLE, include_object, metadata
from tests.flask.conftest import POSTGRES_URL
from tests.pg_proxy import PostgresProxy
from tests.store_checks import (
    LOST_ACKNOWLEDGEMENT_CHECKS,
    MariaDBGate,
    PostgresGate,
    check_a_purge_removes_events_left_for_a_session_that_is_gone,
    check_a_reader_misses_no_event_committed_late,
    check_a_session_id_taken_by_another_row_still_conflicts,
    check_threads_share_an_in_memory_database,
)


def _session(
    session_id: str = "s1", *, last_seen: float | None = None, principal: str | None = "flask-user:1"
) -> SessionRecord:
    now = time.time()
    return SessionRecord(
        session_id=session_id,
        protocol_version="2025-11-25",
        client_params='{"protocolVersion":"2025-11-25"}',
        principal=principal,
        server_name="Library",
        created=now - 5,
        last_seen=now if last_seen is None else last_seen,
    )


@pytest.fixture
def store(engine: Engine) -> SQLAlchemyStore:
    return SQLAlchemyStore(engine)


def test_session_round_trip(store: SQLAlchemyStore) -> None:
    record = _session()
    store.create_session(record)
    loaded = store.get_session("s1")
    assert loaded is not None
    assert (loaded.session_id, loaded.protocol_version, loaded.client_params, loaded.principal, loaded.server_name) == (
        record.session_id,
        record.protocol_version,
        record.client_params,
        record.principal,
        record.server_name,
    )
    # Timestamps come back as the same instant (microseconds), whatever the server's timezone.
    assert loaded.created == pytest.approx(record.created, abs=1e-5)
    assert loaded.last_seen == pytest.approx(record.last_seen, abs=1e-5)
    store.touch_session("s1", record.last_seen + 100)
    touched = store.get_session("s1")
    assert touched is not None and touched.last_seen == pytest.approx(record.last_seen + 100, abs=1e-5)
    assert store.get_session("nope") is None


def test_anonymous_session(store: SQLAlchemyStore) -> None:
    store.create_session(_session(principal=None))
    loaded = store.get_session("s1")
    assert loaded is not None and loaded.principal is None


def test_event_log(store: SQLAlchemyStore) -> None:
    store.create_session(_session())
    first = store.append_event("s1", "call", '{"n":1}')
    other = store.append_event("s1", "other", '{"n":2}')
    last = store.append_event("s1", "call", '{"n":3}', final=True)
    assert first < other < last
    events = store.events_after("s1", "call", 0)
    assert [(e.event_id, e.message, e.final) for e in events] == [(first, '{"n":1}', False), (last, '{"n":3}', True)]
    assert [e.event_id for e in store.events_after("s1", "call", first)] == [last]
    assert store.events_after("s1", "call", last) == []
    assert store.has_stream("s1", "other") and not store.has_stream("s1", GET_STREAM)


def test_cursor_only_moves_forward(store: SQLAlchemyStore) -> None:
    store.create_session(_session())
    assert store.get_cursor("s1") == 0
    store.set_cursor("s1", 7)
    store.set_cursor("s1", 3)
    assert store.get_cursor("s1") == 7
    assert store.get_cursor("unknown") == 0


def test_pending_first_answer_wins(store: SQLAlchemyStore) -> None:
    store.create_session(_session())
    store.create_pending("s1", "srv-1", "elicitation/create", '{"message":"?"}')
    pending = store.get_pending("s1", "srv-1")
    assert pending is not None and pending.response is None and pending.method == "elicitation/create"
    assert store.answer_pending("s1", "srv-1", '{"result":1}')
    assert not store.answer_pending("s1", "srv-1", '{"result":2}')
    assert not store.answer_pending("s1", "unknown", '{"result":3}')
    answered = store.get_pending("s1", "srv-1")
    assert answered is not None and answered.response == '{"result":1}'
    store.delete_pending("s1", "srv-1")
    assert store.get_pending("s1", "srv-1") is None


def test_concurrent_answers_one_winner(store: SQLAlchemyStore) -> None:
    store.create_session(_session())
    store.create_pending("s1", "srv-race", "elicitation/create", "{}")
    start = threading.Barrier(8)

    def answer(n: int) -> bool:
        start.wait()
        return store.answer_pending("s1", "srv-race", f'{{"n":{n}}}')

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(answer, range(8)))
    assert results.count(True) == 1
    winner = results.index(True)
    pending = store.get_pending("s1", "srv-race")
    assert pending is not None and pending.response == f'{{"n":{winner}}}'


def test_delete_session_takes_everything(store: SQLAlchemyStore) -> None:
    store.create_session(_session())
    store.create_session(_session("s2"))
    store.append_event("s1", "call", "{}")
    store.append_event("s2", "call", "{}")
    store.create_pending("s1", "srv-1", "roots/list", "{}")
    assert store.delete_session("s1")
    assert not store.delete_session("s1")
    assert store.get_session("s1") is None
    assert store.events_after("s1", "call", 0) == []
    assert store.get_pending("s1", "srv-1") is None
    assert len(store.events_after("s2", "call", 0)) == 1


def test_purge_expired(store: SQLAlchemyStore) -> None:
    now = time.time()
    store.create_session(_session("old", last_seen=now - 1000))
    store.create_session(_session("new", last_seen=now))
    store.append_event("old", "call", "{}")
    assert store.purge_expired(now - 500) == 1
    assert store.get_session("old") is None and store.get_session("new") is not None
    assert store.events_after("old", "call", 0) == []


def test_migrations_match_models_and_keep_their_own_version_table(engine: Engine) -> None:
    migrate(engine)  # a second run is a no-op
    assert current_revision(engine) == "mcp_0006"
    tables = set(sa.inspect(engine).get_table_names())
    assert {
        "mcp_session",
        "mcp_event",
        "mcp_pending_request",
        "mcp_elicitation",
        "mcp_request_state",
        "mcp_worker",
        VERSION_TABLE,
    } <= tables
    assert "alembic_version" not in tables  # the application's Flask-Migrate history stays its own
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


def test_include_object_hides_the_tables_from_an_apps_autogenerate(engine: Engine) -> None:
    app_metadata = sa.MetaData()
    sa.Table("app_thing", app_metadata, sa.Column("id", sa.Integer, primary_key=True))
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_object": include_object})
        diff = compare_metadata(context, app_metadata)
    # Only the app's own new table; nothing proposes to drop the MCP tables.
    assert [(op[0], op[1].name) for op in diff] == [("add_table", "app_thing")]


def test_postgres_urls_use_psycopg3() -> None:
    for uri in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"):
        engine = make_engine(uri)
        assert engine.url.drivername == "postgresql+psycopg"
        engine.dispose()


@pytest.mark.postgres
def test_postgres_connections_prepare_no_statements_unless_told_to(postgres_schema: dict[str, Any]) -> None:
    """PgBouncer in transaction mode runs each transaction on any server connection: no
    prepared statement may live on one (tests/protocol/test_pgbouncer.py); an app that has no
    such pooler may have them back."""
    for options, threshold in (({}, None), ({"connect_args": {"prepare_threshold": 5}}, 5)):
        engine = make_engine(POSTGRES_URL, options)
        with engine.connect() as connection:
            assert connection.connection.dbapi_connection.prepare_threshold == threshold
        engine.dispose()


@pytest.mark.postgres
def test_an_exhausted_connection_pool_is_told_from_other_failures(postgres_schema: dict[str, Any]) -> None:
    """SQLAlchemy's pool with no connection free within ``pool_timeout``: the endpoint answers
    that 503, to retry, and other failures 500."""
    engine = make_engine(POSTGRES_URL, {"pool_size": 1, "max_overflow": 0, "pool_timeout": 0.1, **postgres_schema})
    store = SQLAlchemyStore(engine)
    try:
        with engine.connect(), pytest.raises(Exception) as raised:
            store.worker_seen("w")  # the pool's one connection is taken
        assert store.pool_exhausted(raised.value), raised.value
        assert not store.pool_exhausted(DBAPIError("SELECT 1", {}, RuntimeError("server closed the connection")))
        assert not store.pool_exhausted(RuntimeError("a bug"))
    finally:
        engine.dispose()


def test_postgres_connections_are_pinged_after_a_rest_unless_told_otherwise() -> None:
    """Not at every checkout (a round trip per store call); ``pool_pre_ping`` in the options
    hands the choice back to SQLAlchemy."""
    default = make_engine("postgresql://u@h/db")
    assert not default.pool._pre_ping
    assert _checkout_listener(default) is not None
    for pre_ping in (True, False):
        engine = make_engine("postgresql://u@h/db", {"pool_pre_ping": pre_ping})
        assert engine.pool._pre_ping is pre_ping
        assert _checkout_listener(engine) is None
        engine.dispose()
    default.dispose()


def _checkout_listener(engine: Engine) -> Any:
    """The idle-ping checkout listener ``make_engine`` installed on ``engine``, if any."""
    for listener in engine.pool.dispatch.checkout:
        if getattr(listener, "__name__", "") == "ping":
            return listener
    return None


def test_sqlite_file_uses_wal_and_a_lock_timeout(sqlite_uri: str) -> None:
    engine = make_engine(sqlite_uri)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        # WAL's recommended sync level: no sync of the log per commit (1 = NORMAL, 2 = FULL).
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    engine.dispose()


def test_a_database_never_migrated_names_the_migration(sqlite_uri: str) -> None:
    """Through SQLAlchemy (the session's insert) and on the driver's cursor (its read) alike."""
    engine = make_engine(sqlite_uri)
    store = SQLAlchemyStore(engine)
    try:
        for call in (lambda: store.create_session(_session()), lambda: store.get_session("s1")):
            with pytest.raises(DBAPIError) as failed:
                call()
            assert "no such table: mcp_session" in str(failed.value)
            assert "run `flask mcp migrate`" in str(failed.value)
    finally:
        engine.dispose()


def test_in_memory_sqlite_is_one_shared_connection() -> None:
    engine = make_engine("sqlite://")
    migrate(engine)
    store = SQLAlchemyStore(engine)
    store.create_session(_session())
    # Another thread sees the same in-memory database.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(store.get_session, "s1").result() is not None
    engine.dispose()


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite://",
        "sqlite:///file:shop?mode=memory&cache=shared&uri=true",
        "sqlite:///file::memory:?cache=shared&uri=true",
    ],
)
def test_threads_share_an_in_memory_database(uri: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one connection (or the shared cache) serves one store call at a time: without
    that, one thread's statement lands in another's transaction ("cannot commit - no
    transaction is active")."""
    monkeypatch.chdir(tmp_path)
    engine = make_engine(uri)
    migrate(engine)
    check_threads_share_an_in_memory_database(SQLAlchemyStore(engine))
    engine.dispose()
    assert list(tmp_path.iterdir()) == []  # no lock file beside a database that has no file


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_reader_misses_no_event_committed_late(store: SQLAlchemyStore, postgres_schema: dict[str, Any]) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, **postgres_schema["connect_args"]) as admin:
        check_a_reader_misses_no_event_committed_late(store, PostgresGate(admin, "mcp_event"))


@pytest.mark.mariadb
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_reader_misses_no_event_committed_late_on_mariadb(store: SQLAlchemyStore) -> None:
    admin = store.engine.raw_connection()
    try:
        admin.dbapi_connection.autocommit(True)  # type: ignore[union-attr]
        check_a_reader_misses_no_event_committed_late(store, MariaDBGate(admin.dbapi_connection, "mcp_event"))
    finally:
        admin.invalidate()  # never back to the pool in autocommit mode


@pytest.fixture
def proxied(engine: Engine, postgres_schema: dict[str, Any]) -> Iterator[tuple[SQLAlchemyStore, PostgresProxy]]:
    """A store on ``engine``'s PostgreSQL schema whose connections go through a proxy."""
    url = make_url(POSTGRES_URL)
    with PostgresProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        connect_args = {**postgres_schema["connect_args"], "sslmode": "disable"}
        through = make_engine(url.set(host="127.0.0.1", port=proxy.port), {"connect_args": connect_args})
        try:
            yield SQLAlchemyStore(through), proxy
        finally:
            through.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("check", LOST_ACKNOWLEDGEMENT_CHECKS, ids=lambda check: check.__name__[6:])
def test_a_write_whose_acknowledgement_is_lost(
    proxied: tuple[SQLAlchemyStore, PostgresProxy], check: Callable[[SQLAlchemyStore, PostgresProxy], None]
) -> None:
    check(*proxied)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_session_id_taken_by_another_row_still_conflicts(proxied: tuple[SQLAlchemyStore, PostgresProxy]) -> None:
    check_a_session_id_taken_by_another_row_still_conflicts(*proxied, IntegrityError)


@pytest.mark.mariadb
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_an_append_leaves_its_streams_turn_even_when_it_fails(store: SQLAlchemyStore) -> None:
    """A pooled connection that kept a stream's named lock would stall every other worker's
    appends to that stream."""
    store.append_event("s1", "call", "{}")
    with pytest.raises(DBAPIError):
        store.append_event("s1", "call", None)  # type: ignore[arg-type]  # NOT NULL
    with store.engine.connect() as other:
        used = other.exec_driver_sql("SELECT IS_USED_LOCK(%s)", (stream_turn_name("s1", "call"),)).scalar()
    assert used is None


def test_a_purge_removes_events_left_for_a_session_that_is_gone(store: SQLAlchemyStore) -> None:
    check_a_purge_removes_events_left_for_a_session_that_is_gone(store)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_question_asked_while_a_delete_commits_ends_with_the_session(
    engine: Engine, postgres_schema: dict[str, Any]
) -> None:
    """Two workers on one PostgreSQL database. Worker B's DELETE of a session has removed the
    session's pending rows, and its transaction is still open, when worker A's tool asks a
    question: A's new pending row escapes the DELETE, and A still reads the session as alive.
    Once B commits, A's question belongs to a session that is gone: A's call must end with it
    (as the SDK ends a deleted session's calls), not wait for the client until REQUEST_TIMEOUT."""
    import psycopg

    from tests.core.test_elicitation import wait_for
    from tests.core.test_endpoint import endpoint, initialize, request
    from tests.core.test_endpoint import legacy as legacy_request

    connect_args = postgres_schema["connect_args"]
    deleting_engine = make_engine(POSTGRES_URL, {"connect_args": {**connect_args, "application_name": "mcp-deleter"}})
    asking = endpoint(SQLAlchemyStore(engine), request_timeout=120)  # type: ignore[arg-type]
    deleting = endpoint(SQLAlchemyStore(deleting_engine), request_timeout=120)  # type: ignore[arg-type]
    with psycopg.connect(POSTGRES_URL, autocommit=True, **connect_args) as admin:
        gate = PostgresGate(admin, "mcp_pending_request")
        # Worker B's DELETE of pending rows waits, its transaction open, until the test lets it go.
        admin.execute(
            f"CREATE FUNCTION mcp_gate_{gate.suffix}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF current_setting('application_name') = 'mcp-deleter' THEN "
            f"PERFORM pg_advisory_xact_lock_shared({gate.key}); END IF; RETURN NULL; END $$"
        )
        admin.execute(
            f"CREATE TRIGGER mcp_gate_{gate.suffix} AFTER DELETE ON mcp_pending_request FOR EACH STATEMENT "
            f"EXECUTE FUNCTION mcp_gate_{gate.suffix}()"
        )
        deleter: threading.Thread | None = None
        try:
            session = initialize(asking, {"elicitation": {}})
            gate.hold()
            deleted: list[int] = []
            deleter = threading.Thread(
                target=lambda: deleted.append(deleting.handle(request("DELETE", mcp_session_id=session)).status)
            )
            deleter.start()
            assert wait_for(gate.gated)
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "interview", "arguments": {}}}
            response = asking.handle(legacy_request(session, body))
            reader = threading.Thread(target=lambda: b"".join(asking.iter_body(response)), daemon=True)
            reader.start()

            def asked() -> list[Any]:
                with engine.connect() as connection:
                    return list(connection.execute(sa.text("SELECT status, detail FROM mcp_elicitation")))

            assert wait_for(lambda: asked() == [("pending", None)])
            gate.release()
            deleter.join(10)
            assert deleted == [200]
            # The question ends with its session, long before its request timeout.
            assert wait_for(lambda: asked() == [("cancelled", "The session ended")]), asked()
        finally:
            gate.release()
            if deleter is not None:
                deleter.join(10)
            gate.close()
            asking.close()
            deleting.close()
            deleting_engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("how", ["cancelled", "deleted"])
def test_a_call_ends_when_cancelled_through_another_worker_before_it_noted_its_worker(engine: Engine, how: str) -> None:
    from tests.core.test_elicitation import SlowOwner, check_a_call_ends_when_cancelled_before_it_noted_its_worker

    class SlowOwnerStore(SlowOwner, SQLAlchemyStore):
        pass

    check_a_call_ends_when_cancelled_before_it_noted_its_worker(SlowOwnerStore(engine), how)


@pytest.mark.parametrize("interval", [0.01, 0])
def test_sqlite_checkpoints_run_on_the_stores_thread_when_an_interval_is_set(sqlite_uri: str, interval: float) -> None:
    """``MCP_SQLITE_CHECKPOINT_INTERVAL``: the store's engine leaves WAL checkpoints to a thread
    (SQLite's own in a commit only past 10,000 pages), and the thread copies what the store
    wrote; with 0 SQLite checkpoints in commits, at its default 1,000 pages."""
    engine = make_engine(sqlite_uri)
    migrate(engine)
    store = SQLAlchemyStore(engine, checkpoint_interval=interval)
    checkpointer = store._write_lock.checkpointer if store._write_lock is not None else None
    try:
        with engine.connect() as connection:
            pages = connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
        for number in range(20):
            store.create_session(_session(f"s{number}"))
        if not interval:
            assert checkpointer is None and pages == 1000
            return
        assert checkpointer is not None and pages == 10_000
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            checkpointer.last and checkpointer.last[1] == checkpointer.last[2] > 0
        ):
            time.sleep(0.01)
        assert checkpointer.last is not None and checkpointer.last[0] == 0, checkpointer.last
        assert checkpointer.last[1] == checkpointer.last[2] > 0, checkpointer.last
        thread = checkpointer._thread
        store.close()
        assert thread is not None and not thread.is_alive()
        assert store.get_session("s19") is not None
    finally:
        store.close()
        engine.dispose()
