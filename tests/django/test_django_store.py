"""The Django store on PostgreSQL and on MariaDB (run by scripts/test.sh with
``MCP_EXAMPLE_DATABASE_URL`` set): its event log (on SQLite one writer at a time commits ids in
order), and on PostgreSQL its writes whose acknowledgement a lost connection took. On every
database: several threads at once (on SQLite, Django's test database is in memory)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections
from django.db.utils import ConnectionHandler

from mcp_common.store import stream_turn_name
from mcp_django.models import MCPEvent
from mcp_django.store import DjangoStore
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

pytestmark = pytest.mark.django_db(transaction=True)


def _needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: set MCP_EXAMPLE_DATABASE_URL (scripts/test.sh does)")


@pytest.fixture
def proxy() -> Iterator[PostgresProxy]:
    """Django's connection goes through a :class:`PostgresProxy` for the test."""
    _needs_postgresql()
    settings = connection.settings_dict
    saved = {key: settings[key] for key in ("HOST", "PORT", "OPTIONS")}
    connection.close()
    with PostgresProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)) as proxy:
        settings.update(HOST="127.0.0.1", PORT=str(proxy.port), OPTIONS={**saved["OPTIONS"], "sslmode": "disable"})
        try:
            yield proxy
        finally:
            connection.close()
            settings.update(saved)


def test_threads_share_the_test_database() -> None:
    """Django's test database on SQLite is in memory, its threads' connections share one cache:
    there a store read that met another thread's write failed at once ("database table is
    locked"), and a test serving two requests at once failed at random."""
    check_threads_share_an_in_memory_database(DjangoStore(), thread_done=connections.close_all)


@pytest.mark.parametrize("name", ["file::memory:?cache=shared", "file:shop?mode=memory&cache=shared", ":memory:"])
def test_a_database_named_in_memory_has_its_reads_take_turns_and_no_lock_file(
    name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every name SQLite gives an in-memory database (Django opens NAME as a URI): the store's
    reads take turns with its writes there (see test_threads_share_the_test_database), and no
    lock file named after it appears in the working directory."""
    import mcp_django.store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mcp_django.store, "_SQLITE_LOCKS", {})
    handler = ConnectionHandler({DEFAULT_DB_ALIAS: {"ENGINE": "django.db.backends.sqlite3", "NAME": name}})
    monkeypatch.setattr(mcp_django.store, "connections", handler)
    lock = mcp_django.store._sqlite_lock(DjangoStore())
    assert lock is not None and lock.in_memory
    with lock:
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("interval", [0.5, 0])
def test_a_sqlite_file_gets_a_checkpointer_at_the_set_interval(
    interval: float, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """``MCP["SQLITE_CHECKPOINT_INTERVAL"]`` reaches the file's write lock; 0 leaves SQLite's
    checkpoints in its commits. Django's connections are the application's own: their
    ``wal_autocheckpoint`` is left as the project set it."""
    import mcp_django.store

    settings.MCP = {**settings.MCP, "SQLITE_CHECKPOINT_INTERVAL": interval}
    monkeypatch.setattr(mcp_django.store, "_SQLITE_LOCKS", {})
    name = str(tmp_path / "db.sqlite3")
    handler = ConnectionHandler({DEFAULT_DB_ALIAS: {"ENGINE": "django.db.backends.sqlite3", "NAME": name}})
    monkeypatch.setattr(mcp_django.store, "connections", handler)
    lock = mcp_django.store._sqlite_lock(DjangoStore())
    assert lock is not None and not lock.in_memory
    if interval:
        assert lock.checkpointer is not None and lock.checkpointer.interval == interval
        assert lock.checkpointer.database == name
    else:
        assert lock.checkpointer is None
    with handler[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone()[0] == 1000
    handler.close_all()


def _other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
def test_an_idle_endpoint_holds_no_connection_so_the_test_database_can_be_dropped() -> None:
    """A project's test posts to its MCP endpoint once, on PostgreSQL: the endpoint's database
    threads (its heartbeat, a legacy session's writes) opened connections of their own, which
    Django's request signals never reach. Kept open, the test run ended with "database
    test_... is being accessed by other users" when the test database was dropped. They are
    closed once the endpoint has been idle for a second; the next request opens them again."""
    from django.test import Client

    from mcp_django.registry import get_endpoint
    from tests.django.test_django_asgi import ACCEPT, LEGACY_INIT

    _needs_postgresql()
    client = Client(HTTP_ACCEPT=ACCEPT)
    endpoint = get_endpoint(None)
    try:
        for _ in range(2):
            answer = client.post("/mcp", LEGACY_INIT, content_type="application/json")
            assert answer.status_code == 200, answer.content
            deadline = time.monotonic() + 4  # PostgreSQL waits 5 s for them before refusing
            while _other_sessions() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _other_sessions() == 0
    finally:
        endpoint.close()


@pytest.mark.postgres
@pytest.mark.parametrize("check", LOST_ACKNOWLEDGEMENT_CHECKS, ids=lambda check: check.__name__[6:])
def test_a_write_whose_acknowledgement_is_lost(
    proxy: PostgresProxy, check: Callable[[DjangoStore, PostgresProxy], None]
) -> None:
    check(DjangoStore(), proxy)


@pytest.mark.postgres
def test_a_session_id_taken_by_another_row_still_conflicts(proxy: PostgresProxy) -> None:
    check_a_session_id_taken_by_another_row_still_conflicts(DjangoStore(), proxy, IntegrityError)


@pytest.mark.postgres
def test_a_reader_misses_no_event_committed_late() -> None:
    _needs_postgresql()
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"], autocommit=True
    ) as admin:
        gate = PostgresGate(admin, connection.ops.quote_name(MCPEvent._meta.db_table))
        check_a_reader_misses_no_event_committed_late(DjangoStore(), gate, lambda: connection.close())


def test_a_reader_misses_no_event_committed_late_on_mariadb() -> None:
    if connection.vendor != "mysql":
        pytest.skip("MariaDB/MySQL only: set MCP_EXAMPLE_DATABASE_URL=mysql://... (scripts/test.sh does)")
    import MySQLdb

    settings = connection.settings_dict
    admin = MySQLdb.connect(
        database=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"] or "127.0.0.1",
        port=int(settings["PORT"] or 3306),
        autocommit=True,
    )
    try:
        gate = MariaDBGate(admin, connection.ops.quote_name(MCPEvent._meta.db_table))
        check_a_reader_misses_no_event_committed_late(DjangoStore(), gate, lambda: connection.close())
    finally:
        admin.close()


def test_an_append_leaves_its_streams_turn_even_when_it_fails() -> None:
    """MariaDB: a connection that kept a stream's named lock would stall every other worker's
    appends to that stream."""
    if connection.vendor != "mysql":
        pytest.skip("MariaDB/MySQL only: set MCP_EXAMPLE_DATABASE_URL=mysql://... (scripts/test.sh does)")
    store = DjangoStore()
    store.append_event("s1", "call", "{}")
    with pytest.raises(IntegrityError):
        store.append_event("s1", "call", None)  # type: ignore[arg-type]  # NOT NULL
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT IS_USED_LOCK(%s)", [stream_turn_name("s1", "call")])
            assert cursor.fetchone()[0] is None
    finally:
        other.close()


@pytest.mark.django_db
def test_a_store_call_failing_inside_the_callers_transaction_leaves_it_to_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under WSGI the store's queries run on the request's thread and connection, inside the
    transaction it has open (``ATOMIC_REQUESTS``, a ``TestCase``: here the test's). One that
    fails there is the caller's error: the store no longer closes the connection to run it
    again, which on PostgreSQL threw away the caller's transaction (its rows, and every later
    query of the request: "the connection is closed")."""
    from django.contrib.auth.models import User
    from django.db import OperationalError

    from mcp_common.store import SessionRecord
    from mcp_django import store as store_module

    User.objects.create(username="ada")
    rows = store_module._rows
    failures = [OperationalError("could not serialize access due to concurrent update")]

    def rows_failing_once(model: Any) -> Any:
        queryset = rows(model)
        if model is store_module.MCPSession and failures:
            error = failures.pop()

            def create(**fields: Any) -> Any:
                raise error

            queryset.create = create
        return queryset

    monkeypatch.setattr(store_module, "_rows", rows_failing_once)
    now = time.time()
    with pytest.raises(OperationalError, match="concurrent update"):
        DjangoStore().create_session(SessionRecord("s1", "2025-11-25", "{}", None, "x", now, now))
    assert User.objects.filter(username="ada").exists()


@pytest.fixture
def local_time(settings: Any) -> Iterator[None]:
    """A project that kept Django's default before 5.0, ``USE_TZ = False``, in a zone far
    from UTC (naive local times in the database, as the rest of the project writes them).

    The endpoints of earlier tests are shut down first and last: their database threads'
    connections (a heartbeat's) would otherwise live across the change, read times by the
    settings they were opened under, and skew a later test's by hours."""
    from mcp_django.registry import reset_endpoints

    reset_endpoints()
    settings.USE_TZ = False
    settings.TIME_ZONE = "America/New_York"
    yield
    reset_endpoints()


def test_the_store_keeps_times_right_without_time_zone_support(local_time: None) -> None:
    """Every store write and read, ORM and plain SQL, under ``USE_TZ = False``: the times read
    back are the times written (an hour's skew would expire questions early or late, and take
    live workers for dead), and the rows hold local wall time, as the admin shows them."""
    from django.utils import timezone

    _check_times_read_back_as_written(timezone.is_naive)


@pytest.fixture
def database_in_local_time(settings: Any) -> Iterator[None]:
    """A database that keeps local wall time (``DATABASES[...]["TIME_ZONE"]``, under
    ``USE_TZ = True``): one shared with an application that writes local times, as Django
    allows on SQLite, MySQL and MariaDB (on PostgreSQL, which stores the zone, it refuses it)."""
    from mcp_django.registry import reset_endpoints

    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL refuses a database TIME_ZONE under USE_TZ")

    def switch(zone: str | None) -> None:
        reset_endpoints()
        connection.settings_dict["TIME_ZONE"] = zone
        for cached in ("timezone", "timezone_name"):
            connection.__dict__.pop(cached, None)

    saved = connection.settings_dict.get("TIME_ZONE")
    settings.TIME_ZONE = "America/New_York"
    switch("America/New_York")
    yield
    switch(saved)


@pytest.mark.urls("tests.django.home_site")
def test_the_store_keeps_times_right_in_a_database_in_local_time(database_in_local_time: None, settings: Any) -> None:
    """The store's plain SQL read the database's naive times as UTC: five hours early in New
    York, so with ``SESSION_TTL`` under that every legacy session was gone (404) at the request
    after its ``initialize``, and a zone east of UTC read them hours late, so a session in use
    was never marked seen and the purge took it."""
    from django.test import Client
    from django.utils import timezone

    from tests.django.test_django_home import legacy_session

    _check_times_read_back_as_written(timezone.is_aware)
    settings.MCP = {**settings.MCP, "SESSION_TTL": 3600}
    legacy_session(Client())  # its notifications/initialized is answered 202, not 404


def _check_times_read_back_as_written(stored_as: Callable[[Any], bool]) -> None:
    """Every store write and read, ORM and plain SQL: the times read back are the times written,
    the rows' times as Django reads them (``stored_as``: naive or aware) are now."""
    from django.utils import timezone

    from mcp_common.elicitation import worker_id
    from mcp_django.models import MCPElicitation, MCPSession
    from tests.store_checks import _new_session, _new_state, _pending_question, _redeem

    store = DjangoStore()
    session = _new_session()
    store.create_session(session)
    assert abs(store.get_session(session.session_id).created - session.created) < 1
    assert abs(store.get_session(session.session_id).last_seen - session.last_seen) < 1
    stored = MCPSession.objects.get(session_id=session.session_id).created
    assert stored_as(stored) and abs((stored - timezone.now()).total_seconds()) < 60

    store.beat_worker(worker_id(), time.time())
    assert abs(store.worker_seen(worker_id()) - time.time()) < 60

    session_id, request_id, question = _pending_question(store)
    assert abs(store.get_pending(session_id, request_id).created - time.time()) < 60
    assert abs(store.get_elicitation(question.id).expires - question.expires) < 1
    assert store.expire_elicitations(time.time()) == 0
    assert store.expire_elicitations(question.expires + 1) >= 1

    state, asked = _new_state(store)
    redeemed = _redeem(store, state, time.time())
    assert redeemed is not None and abs(redeemed.expires - state.expires) < 1
    row = MCPElicitation.objects.get(id=asked.id)
    assert row.status == "accepted" and stored_as(row.updated)
    assert abs((row.updated - timezone.now()).total_seconds()) < 60


def test_a_purge_removes_events_left_for_a_session_that_is_gone() -> None:
    check_a_purge_removes_events_left_for_a_session_that_is_gone(DjangoStore())


def _raised_by_django(error: Exception) -> BaseException:
    """``error`` of psycopg's as Django's PostgreSQL backend raises it."""
    postgresql = ConnectionHandler({DEFAULT_DB_ALIAS: {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}})
    try:
        with postgresql[DEFAULT_DB_ALIAS].wrap_database_errors:
            raise error
    except Exception as exc:
        return exc
    raise AssertionError("not raised")


def _pool_timeout() -> BaseException:
    from psycopg_pool import PoolTimeout

    return _raised_by_django(PoolTimeout("couldn't get a connection after 30.00 sec"))


def test_an_exhausted_connection_pool_is_told_from_other_failures() -> None:
    """Django's pool (``OPTIONS["pool"]``) raises psycopg_pool's ``PoolTimeout`` as Django's
    ``OperationalError``: the endpoint answers it 503, to retry, and other failures 500."""
    from django.db import OperationalError

    store = DjangoStore()
    exhausted = _pool_timeout()
    assert isinstance(exhausted, OperationalError)
    assert store.pool_exhausted(exhausted)
    assert not store.pool_exhausted(OperationalError("server closed the connection unexpectedly"))
    assert not store.pool_exhausted(RuntimeError("a bug"))


def test_an_exhausted_connection_pool_is_not_waited_for_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store call retries once on a connection that went bad; one that got no connection
    from the pool within its timeout would only wait that long again before the 503."""
    from django.db import OperationalError

    from mcp_django import store as store_module

    attempts: list[Any] = []

    def no_connection(model: Any) -> Any:
        attempts.append(model)
        raise _pool_timeout()

    monkeypatch.setattr(store_module, "_rows", no_connection)
    with pytest.raises(OperationalError):
        DjangoStore().worker_seen("w")
    assert len(attempts) == 1
