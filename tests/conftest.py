"""Fixtures shared by every test: real server processes on loopback, and real databases.

A protocol test asks for ``live_server(framework, server, workers, database)`` and gets the
base URL of the example app started by the README's own launcher
(``python -m example_project serve``) on a free 127.0.0.1 port, migrated, with its own
database: a fresh SQLite file, or a fresh database on the PostgreSQL server of this machine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_ADMIN_URL = os.environ.get("MCP_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def debian_binary(name: str, variable: str, package: str) -> str:
    """A program from a Debian package (``scripts/test.sh`` installs it), or the one that
    ``variable`` names. Outside CI a machine without it skips the test; in CI it fails."""
    for candidate in (os.environ.get(variable), shutil.which(name), f"/usr/bin/{name}", f"/usr/sbin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    message = f"{package} is not installed (scripts/test.sh installs Debian's {name} package)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


HEARTBEAT_RECORD = "The heartbeat of MCP endpoint "


class _NotAHeartbeat(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(HEARTBEAT_RECORD)


@pytest.fixture(autouse=True)
def _heartbeats_left_out_of_the_captured_log(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """``caplog`` without the heartbeat's records, for every test not marked ``heartbeat_logs``.

    An endpoint an earlier test left running in this process (its database gone with that
    test) logs its heartbeat's failure at any moment, with a traceback: a test asserting what
    its own requests logged would see that record as its own.
    """
    if request.node.get_closest_marker("heartbeat_logs"):
        yield
        return
    heartbeats = _NotAHeartbeat()
    handler = caplog.handler  # pytest's one capturing handler, for each phase of every test
    handler.addFilter(heartbeats)
    try:
        yield
    finally:
        handler.removeFilter(heartbeats)


@dataclass
class Database:
    kind: str
    url: str
    fresh: bool = False
    """Made empty by :class:`DatabaseFactory` and not served yet."""
    migrated_for: str | None = None
    """The framework whose example tables it holds, up to date (``None``: not known)."""


class DatabaseFactory:
    """Creates throwaway databases; drops the PostgreSQL ones at the end of the session.

    A fresh database about to be served by an example app gets that app's tables as a copy of a
    template migrated once per framework and kind (:meth:`fill`): migrating costs a second of
    CPU per server start, and the suite starts servers by the dozen on a 2-core machine.
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.created: list[str] = []
        self.templates: dict[tuple[str, str], Database] = {}

    def _empty(self, kind: str, prefix: str) -> Database:
        if kind == "sqlite":
            return Database("sqlite", f"sqlite:///{self.tmp / f'{prefix}-{uuid.uuid4().hex[:8]}.sqlite3'}")
        import psycopg

        name = f"mcp_{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
        return Database("postgres", f"{base}/{name}")

    def new(self, kind: str) -> Database:
        database = self._empty(kind, "db" if kind == "sqlite" else "test")
        database.fresh = True
        return database

    def _template(self, kind: str, framework: str) -> Database:
        template = self.templates.get((kind, framework))
        if template is None:
            template = self._empty(kind, f"template-{framework}" if kind == "sqlite" else f"tpl_{framework}")
            env = {**os.environ, "MCP_EXAMPLE_DATA_DIR": str(self.tmp / f"data-template-{framework}")}
            env.pop("DJANGO_SETTINGS_MODULE", None)
            command = [sys.executable, "-m", "example_project", "migrate", "--framework", framework]
            subprocess.run([*command, "--database", template.url], cwd=ROOT, env=env, check=True)
            template.migrated_for = framework
            self.templates[(kind, framework)] = template
        return template

    def fill(self, database: Database, framework: str) -> None:
        """Give a fresh database the tables (and seed rows) that ``migrate`` gives it."""
        template = self._template(database.kind, framework)
        if database.kind == "sqlite":
            import sqlite3

            source = sqlite3.connect(template.url.removeprefix("sqlite:///"))
            target = sqlite3.connect(database.url.removeprefix("sqlite:///"))
            try:
                source.backup(target)
            finally:
                target.close()
                source.close()
        else:
            import psycopg

            name = database.url.rsplit("/", 1)[1]
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "{name}"')
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template.url.rsplit("/", 1)[1]}"')
        database.fresh = False
        database.migrated_for = framework

    def drop_all(self) -> None:
        if not self.created:
            return
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(tmp_path_factory.mktemp("databases"))
    yield factory
    factory.drop_all()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres" and not postgres_available():
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: the test command starts it")
    return str(request.param)


@dataclass
class LiveServer:
    base_url: str
    framework: str
    server: str
    workers: int
    database: Database
    process: subprocess.Popen[bytes]
    log_path: Path

    def url(self, suffix: str = "") -> str:
        return f"{self.base_url}/mcp{suffix}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class ServerPool:
    """Starts example servers once per configuration and stops them all at the end."""

    def __init__(self, tmp: Path, databases: DatabaseFactory) -> None:
        self.tmp = tmp
        self.databases = databases
        self.servers: dict[tuple[str, str, int, str], LiveServer] = {}
        self.started: list[LiveServer] = []

    def get(self, framework: str, server: str = "gunicorn", workers: int = 2, database: str = "sqlite") -> LiveServer:
        key = (framework, server, workers, database)
        live = self.servers.get(key)
        if live is None or live.process.poll() is not None:
            live = self.start(framework, server, workers, self.databases.new(database))
            self.servers[key] = live
        return live

    def start(
        self, framework: str, server: str, workers: int, database: Database, env: dict[str, str] | None = None
    ) -> LiveServer:
        live = self._spawn(framework, server, workers, database, env)
        self._wait_ready(live)
        return live

    def start_many(
        self,
        count: int,
        framework: str,
        server: str,
        workers: int,
        database: Database,
        env: dict[str, str] | None = None,
    ) -> list[LiveServer]:
        """``count`` servers on one database, side by side (each start is seconds of imports);
        one that migrates the database starts first, alone."""
        servers = []
        if not database.fresh and database.migrated_for != framework:
            servers.append(self.start(framework, server, workers, database, env))
        servers += [self._spawn(framework, server, workers, database, env) for _ in range(count - len(servers))]
        for live in servers:
            self._wait_ready(live)
        return servers

    def _spawn(
        self, framework: str, server: str, workers: int, database: Database, env: dict[str, str] | None
    ) -> LiveServer:
        taken = {live.base_url.rsplit(":", 1)[1] for live in self.started}
        port = free_port()
        while str(port) in taken:  # a server spawned just before may not have bound its port yet
            port = free_port()
        log_path = self.tmp / f"{framework}-{server}-{workers}-{database.kind}-{port}.log"
        full_env = {
            **os.environ,
            "MCP_EXAMPLE_DATA_DIR": str(self.tmp / f"data-{port}"),
            "MCP_EXAMPLE_STREAM_HOLD": "5",
            "MCP_EXAMPLE_WORKER_HEADER": "1",
            **(env or {}),
        }
        full_env.pop("DJANGO_SETTINGS_MODULE", None)
        if database.fresh:
            self.databases.fill(database, framework)
        # A database with this framework's tables up to date is served as it is.
        migrated = ["--no-migrate"] if database.migrated_for == framework else []
        command = [
            sys.executable,
            "-m",
            "example_project",
            "serve",
            "--framework",
            framework,
            "--server",
            server,
            "--workers",
            str(workers),
            "--port",
            str(port),
            "--database",
            database.url,
            *migrated,
        ]
        with log_path.open("wb") as log:
            # Its own process group: stopping it stops its workers too, even if the master dies first.
            process = subprocess.Popen(
                command, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        live = LiveServer(f"http://127.0.0.1:{port}", framework, server, workers, database, process, log_path)
        self.started.append(live)
        return live

    def _wait_ready(self, live: LiveServer) -> None:
        framework, server, workers, process = live.framework, live.server, live.workers, live.process
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{framework}/{server} exited early:\n{live.log()}")
            try:
                if httpx.get(live.base_url + "/", timeout=1).status_code == 200:
                    # Every worker must be up before a test counts on reaching several of them.
                    time.sleep(0.5 if workers > 1 else 0)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        process.kill()
        raise RuntimeError(f"{framework}/{server} did not start in 60 s:\n{live.log()}")

    def stop_all(self) -> None:
        stop_many(self.started)


def end_process(process: subprocess.Popen[bytes]) -> None:
    """Ask a process started by a test (a Celery worker) to stop; kill it if it will not."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def stop(live: LiveServer) -> None:
    """Stop the server and every process of its group (workers included), however it fares."""
    stop_many([live])


STOP_GRACE_SECONDS = 5.0
"""How long stopping servers waits, for all of them together, before it kills what is left."""


def stop_many(servers: list[LiveServer]) -> None:
    """Stop servers side by side: each is asked to stop first, then all are waited for, up to
    one shared deadline (a graceful stop can wait seconds for an open stream; waiting for each
    in turn added those seconds up), and whatever still runs is killed."""
    groups: dict[int, int | None] = {}
    for live in servers:
        process = live.process
        try:
            groups[id(live)] = os.getpgid(process.pid)
        except ProcessLookupError:
            groups[id(live)] = None
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for live in servers:
        process = live.process
        try:
            process.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        group = groups[id(live)]
        if group is not None:
            # Workers left behind (a master killed before its workers exited) go with their group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory: pytest.TempPathFactory, databases: DatabaseFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory.mktemp("servers"), databases)
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session")
def example_server(server_pool: ServerPool) -> Callable[..., LiveServer]:
    return server_pool.get
