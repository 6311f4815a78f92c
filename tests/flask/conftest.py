"""Fixtures of the Flask adapter's own tests: apps, databases, a live server on a real socket."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import Engine, text
from werkzeug.serving import ThreadedWSGIServer, make_server

from mcp_flask import MCP, make_engine, migrate

SECRET_KEY = "flask-adapter-tests-secret-key-0123456789abcdef"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB_URL = os.environ.get("MCP_TEST_MARIADB", "")
"""The MariaDB (or MySQL) server of the MariaDB tests, as ``mysql://user@host:port``; unset,
they are skipped. scripts/test.sh sets it."""


@pytest.fixture
def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mcp.sqlite3'}"


@pytest.fixture
def make_app(sqlite_uri: str, tmp_path: Path) -> Callable[..., Flask]:
    """``make_app(**config)``: a bare app with a secret key and a SQLite file of its own."""

    def factory(**config: Any) -> Flask:
        app = Flask("mcp_flask_tests", instance_path=str(tmp_path / "instance"))
        app.config.update(SECRET_KEY=SECRET_KEY, MCP_DATABASE_URI=sqlite_uri)
        app.config.update(config)
        return app

    return factory


def _postgres_reachable() -> str | None:
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        return str(exc).strip().splitlines()[0]
    return None


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[dict[str, Any]]:
    """A schema of its own on the test PostgreSQL server, dropped afterwards.

    Yields the engine options that put it first on the search path, so the tables, indexes
    and Alembic's version table all land in it and parallel runs never collide.
    """
    reason = _postgres_reachable()
    if reason is not None:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable (scripts/test.sh starts it): {reason}")
    schema = f"mcp_flask_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(POSTGRES_URL)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield {"connect_args": {"options": f"-csearch_path={schema}"}}
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


class MariaDBDatabases:
    """Fresh databases on the MariaDB server of ``MCP_TEST_MARIADB``, dropped by :meth:`drop_all`."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def _admin(self) -> Engine:
        if not MARIADB_URL:
            pytest.skip("MariaDB/MySQL: set MCP_TEST_MARIADB=mysql://root@127.0.0.1:3306 (scripts/test.sh does)")
        engine = make_engine(MARIADB_URL)
        try:
            engine.connect().close()
        except Exception as exc:
            engine.dispose()
            pytest.fail(f"MariaDB at {MARIADB_URL} (MCP_TEST_MARIADB) is unreachable: {exc}")
        return engine

    def new(self, prefix: str = "mcp_flask_test") -> str:
        """The URL of a new empty database."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        admin = self._admin()
        with admin.begin() as connection:
            connection.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
        admin.dispose()
        self.created.append(name)
        return f"{MARIADB_URL.rstrip('/')}/{name}"

    def drop_all(self) -> None:
        if not self.created:
            return
        admin = self._admin()
        with admin.begin() as connection:
            for name in self.created:
                connection.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()
        self.created.clear()


@pytest.fixture(scope="session")
def mariadb_databases() -> Iterator[MariaDBDatabases]:
    databases = MariaDBDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture(scope="session")
def mariadb_url(mariadb_databases: MariaDBDatabases) -> str:
    """A database of its own on the MariaDB server (skips when ``MCP_TEST_MARIADB`` is unset)."""
    return mariadb_databases.new()


BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
"""Every database the Flask store tests run against."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, sqlite_uri: str) -> tuple[str, dict[str, Any]]:
    """``(MCP_DATABASE_URI, MCP_ENGINE_OPTIONS)`` of each database the tests run against."""
    if request.param == "sqlite":
        return sqlite_uri, {}
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url")), {}
    options: dict[str, Any] = request.getfixturevalue("postgres_schema")
    return POSTGRES_URL, options


@pytest.fixture
def engine(backend: tuple[str, dict[str, Any]]) -> Iterator[Engine]:
    """A migrated engine on each backend, emptied after the test."""
    uri, options = backend
    engine = make_engine(uri, options)
    migrate(engine)
    yield engine
    with engine.begin() as connection:
        for table in (
            "mcp_event",
            "mcp_pending_request",
            "mcp_session",
            "mcp_elicitation",
            "mcp_request_state",
            "mcp_worker",
        ):
            connection.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


class LiveServer:
    """A Flask app served by werkzeug's threaded server on a free loopback port."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        server = make_server("127.0.0.1", 0, app, threaded=True)
        assert isinstance(server, ThreadedWSGIServer)
        self._server = server
        # Joined on close: a request still running (an idle stream ends after the hold time)
        # must not touch the database after the test has disposed of its engine.
        self._server.daemon_threads = False
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture
def flask_live_server() -> Iterator[Callable[[Flask], LiveServer]]:
    """``flask_live_server(app)`` migrates the app's MCP tables and serves it until the test ends."""
    servers: list[LiveServer] = []

    def start(app: Flask) -> LiveServer:
        MCP.migrate(app)
        server = LiveServer(app)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        server.app.extensions["mcp"].close()


@pytest.fixture
def fast_config() -> dict[str, Any]:
    """Short stream holds and polls: an idle GET stream would otherwise hold a thread for 25 s."""
    return {"MCP_STREAM_HOLD_SECONDS": 0.5, "MCP_SSE_RETRY_MS": 100, "MCP_POLL_INTERVAL": 0.02}
