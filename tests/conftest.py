"""Fixtures shared by every test: real server processes on loopback, and real databases.

A protocol test asks for ``live_server(framework, server, workers, database)`` and gets the
base URL of the example app started by the README's own launcher
(``python -m example_project serve``) on a free 127.0.0.1 port, migrated, with its own
database: a fresh SQLite file, or a fresh database on the PostgreSQL server of this machine.
"""

from __future__ import annotations

import contextlib
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


@dataclass
class Database:
    kind: str
    url: str


class DatabaseFactory:
    """Creates throwaway databases; drops the PostgreSQL ones at the end of the session."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.created: list[str] = []

    def new(self, kind: str) -> Database:
        if kind == "sqlite":
            return Database("sqlite", f"sqlite:///{self.tmp / f'db-{uuid.uuid4().hex[:8]}.sqlite3'}")
        import psycopg

        name = f"mcp_test_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
        return Database("postgres", f"{base}/{name}")

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
        """``count`` servers on one database: the first alone (it migrates the database), the
        others then side by side (each start is seconds of imports)."""
        first = self.start(framework, server, workers, database, env)
        others = [self._spawn(framework, server, workers, database, env) for _ in range(count - 1)]
        for live in others:
            self._wait_ready(live)
        return [first, *others]

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
