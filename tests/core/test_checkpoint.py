"""SQLite's WAL checkpoints run on a thread of their own after the store's writes, not inside
whichever request's commit takes the log past SQLite's limit (mcp_common.checkpoint)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_common.checkpoint import BUSY_RETRIES, WalCheckpointer
from mcp_common.store import SQLiteWriteLock
from tests.core.test_elicitation import wait_for

fork = multiprocessing.get_context("fork")
PAGE = 4096
ROWS = 64
"""Rows of 4 KiB per write: a quarter MiB that lands in the log, not in the database file."""


def make_database(path: Path, journal: str = "wal") -> str:
    database = str(path)
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute(f"PRAGMA journal_mode={journal}")
    connection.execute("CREATE TABLE t (data BLOB)")
    connection.close()
    return database


class Writer:
    """A store's pooled connection: open for the whole test (the last connection to close would
    checkpoint on its own), and never checkpointing on commit. Whatever reaches the database
    file, the checkpointer copied."""

    def __init__(self, database: str) -> None:
        self.connection = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self.connection.execute("PRAGMA wal_autocheckpoint=0")

    def __call__(self, lock: SQLiteWriteLock, rows: int = ROWS) -> None:
        """One transaction of ``rows`` rows, under the lock as a store writes."""
        with lock:
            self.connection.execute("BEGIN IMMEDIATE")
            self.connection.executemany("INSERT INTO t VALUES (?)", [(os.urandom(PAGE),) for _ in range(rows)])
            self.connection.execute("COMMIT")


def copied_all(checkpointer: WalCheckpointer) -> bool:
    """Whether the last checkpoint returned having copied the whole log, and it held rows."""
    last = checkpointer.last
    return last is not None and last[0] == 0 and last[1] == last[2] >= ROWS


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcp-sqlite-checkpoint"]


class Setup:
    """A WAL database, a store's pooled connection to it and its write lock."""

    def __init__(self, tmp_path: Path, interval: float, journal: str) -> None:
        self.database = make_database(tmp_path / "db.sqlite3", journal)
        self.write = Writer(self.database)
        self.lock = SQLiteWriteLock(self.database, checkpoint_interval=interval)

    @property
    def checkpointer(self) -> WalCheckpointer:
        assert self.lock.checkpointer is not None
        return self.lock.checkpointer

    def close(self) -> None:
        if self.lock.checkpointer is not None:
            self.lock.checkpointer.stop()
        self.write.connection.close()


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    """``setup(interval, journal="wal")``: a :class:`Setup`, its thread stopped afterwards."""
    made: list[Setup] = []

    def make(interval: float, journal: str = "wal") -> Setup:
        made.append(Setup(tmp_path, interval, journal))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_writes_reach_the_database_file_through_the_thread(setup: Any) -> None:
    wal = setup(0.01)
    before = os.path.getsize(wal.database)
    wal.write(wal.lock)
    # The file grows while the checkpoint copies; ``last`` is set once it has returned.
    assert wait_for(lambda: os.path.getsize(wal.database) >= before + ROWS * PAGE and copied_all(wal.checkpointer))
    busy, log, copied = wal.checkpointer.last or (None, None, None)
    assert busy == 0 and log is not None and log >= ROWS and copied == log


def test_without_an_interval_no_thread_copies_the_log(setup: Any) -> None:
    """The same write with the checkpointer off: the rows stay in the log (which is what the
    test above would see if its thread did nothing)."""
    wal = setup(0)
    assert wal.lock.checkpointer is None
    before = os.path.getsize(wal.database)
    wal.write(wal.lock)
    time.sleep(0.3)
    assert os.path.getsize(wal.database) == before
    assert os.path.getsize(f"{wal.database}-wal") >= ROWS * PAGE


@pytest.mark.parametrize("name", [":memory:", "file::memory:?cache=shared", ""])
def test_a_database_in_memory_gets_no_checkpointer(name: str) -> None:
    assert SQLiteWriteLock(name, checkpoint_interval=0.05).checkpointer is None


def test_writes_in_quick_succession_share_checkpoints_and_none_run_without_writes(setup: Any) -> None:
    wal = setup(0.2)
    checkpointer = wal.checkpointer
    for _ in range(20):
        wal.write(wal.lock, rows=4)
    # Everything written is copied in the end, in far fewer checkpoints than writes.
    assert wait_for(lambda: checkpointer.last is not None and checkpointer.last[1] == checkpointer.last[2] >= 80)
    time.sleep(0.5)
    settled = checkpointer.checkpoints
    assert 1 <= settled < 20, settled
    time.sleep(0.6)  # three intervals, no write
    assert checkpointer.checkpoints == settled


def test_the_thread_ends_when_idle_and_the_next_write_starts_another(setup: Any) -> None:
    wal = setup(0.01)
    checkpointer = wal.checkpointer
    checkpointer.idle_exit = 0.2
    wal.write(wal.lock)
    first = checkpointer._thread
    assert first is not None
    assert wait_for(lambda: checkpointer.checkpoints >= 1)
    first.join(5)
    assert not first.is_alive()
    assert first not in checkpoint_threads()
    size = os.path.getsize(wal.database)
    wal.write(wal.lock)
    assert wait_for(lambda: os.path.getsize(wal.database) >= size + ROWS * PAGE)
    assert checkpointer._thread is not first


def test_a_database_not_in_wal_mode_stops_the_checkpointer_for_good(setup: Any) -> None:
    wal = setup(0.01, journal="delete")
    checkpointer = wal.checkpointer
    wal.write(wal.lock, rows=1)
    assert wait_for(lambda: checkpointer.disabled)
    assert checkpointer.last == (0, -1, -1)
    thread = checkpointer._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive()
    wal.write(wal.lock, rows=1)
    assert checkpointer._thread is thread and not thread.is_alive()  # no new thread
    assert checkpointer.checkpoints == 1


def test_a_failing_checkpoint_is_logged_and_leaves_writes_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpointer = WalCheckpointer(str(tmp_path / "no-such-folder" / "db.sqlite3"), 0.01)
    with caplog.at_level(logging.WARNING, logger="mcp_common.checkpoint"):
        checkpointer.wrote()
        assert wait_for(lambda: checkpointer.disabled)
        thread = checkpointer._thread
        assert thread is not None
        thread.join(5)
    assert not thread.is_alive()
    assert any("Background checkpoints of" in r.getMessage() for r in caplog.records), caplog.text
    checkpointer.wrote()  # a no-op from now on
    assert checkpointer._thread is thread


@pytest.mark.parametrize("interval", [0, -1, float("nan")])
def test_an_interval_must_be_positive(interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        WalCheckpointer("db.sqlite3", interval)


def _write_in_child(database: str, lock: SQLiteWriteLock, results: Any) -> None:
    checkpointer = lock.checkpointer
    assert checkpointer is not None
    write = Writer(database)
    before = os.path.getsize(database)
    write(lock)
    grew = wait_for(lambda: os.path.getsize(database) >= before + ROWS * PAGE and copied_all(checkpointer))
    thread = checkpointer._thread
    results.put((grew, thread is not None and thread.is_alive(), checkpointer.last))
    checkpointer.stop()
    write.connection.close()


@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")
def test_a_forked_worker_checkpoints_with_a_thread_of_its_own(setup: Any) -> None:
    """gunicorn ``--preload``: the store (and its lock) was made, and written through, before
    the fork. The child inherits the parent's "a thread is running" but not the thread."""
    wal = setup(0.01)
    checkpointer = wal.checkpointer
    wal.write(wal.lock, rows=1)
    assert wait_for(lambda: checkpointer.checkpoints >= 1)
    assert checkpointer._thread is not None and checkpointer._thread.is_alive()
    results = fork.Queue()
    child = fork.Process(target=_write_in_child, args=(wal.database, wal.lock, results))
    child.start()
    grew, alive, last = results.get(timeout=20)
    child.join(10)
    assert child.exitcode == 0
    assert grew and alive, (grew, alive, last)
    assert last is not None and last[0] == 0 and last[1] == last[2] >= ROWS


class Answering:
    """The checkpointer's connection, with SQLite's first answers to ``wal_checkpoint`` given in
    advance: a row, or an exception to raise (what another connection's checkpoint, or a lock
    held while the log's index is recovered, makes SQLite answer; neither can be timed from
    here on a loaded machine)."""

    def __init__(self, connection: sqlite3.Connection, answers: list[Any]) -> None:
        self.connection = connection
        self.answers = answers

    def execute(self, sql: str) -> Any:
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return SimpleNamespace(fetchone=lambda: answer)
        return self.connection.execute(sql)

    def close(self) -> None:
        self.connection.close()


def answering(checkpointer: WalCheckpointer, monkeypatch: pytest.MonkeyPatch, *answers: Any) -> None:
    connect = checkpointer._connect
    monkeypatch.setattr(checkpointer, "_connect", lambda: Answering(connect(), list(answers)))


def test_another_connections_checkpoint_is_not_taken_for_a_database_out_of_wal_mode(
    setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite answers ``(1, -1, -1)`` while another connection checkpoints, ``(0, -1, -1)``
    for a database out of WAL mode: the first leaves the checkpointer on."""
    wal = setup(0.01)
    checkpointer = wal.checkpointer
    answering(checkpointer, monkeypatch, (1, -1, -1))
    wal.write(wal.lock, rows=1)
    assert wait_for(lambda: checkpointer.checkpoints >= 1)
    assert checkpointer.last == (1, -1, -1) and not checkpointer.disabled
    size = os.path.getsize(wal.database)
    wal.write(wal.lock)
    assert wait_for(lambda: os.path.getsize(wal.database) >= size + ROWS * PAGE and copied_all(checkpointer))


def busy(message: str = "database is locked") -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = sqlite3.SQLITE_BUSY
    return error


def test_a_busy_database_is_tried_again_without_another_write(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = setup(0.01)
    checkpointer = wal.checkpointer
    answering(checkpointer, monkeypatch, busy(), busy())
    size = os.path.getsize(wal.database)
    wal.write(wal.lock)  # the only write: the third try copies it
    assert wait_for(lambda: os.path.getsize(wal.database) >= size + ROWS * PAGE and copied_all(checkpointer))
    assert checkpointer.checkpoints == 1 and not checkpointer.disabled


def test_a_database_busy_for_long_waits_for_the_next_write(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = setup(0.01)
    checkpointer = wal.checkpointer
    answering(checkpointer, monkeypatch, *[busy() for _ in range(BUSY_RETRIES + 1)])
    size = os.path.getsize(wal.database)
    wal.write(wal.lock)
    time.sleep(0.5)  # the first try and BUSY_RETRIES more, then nothing until a write
    assert os.path.getsize(wal.database) == size and checkpointer.checkpoints == 0
    assert not checkpointer.disabled
    wal.write(wal.lock, rows=1)
    assert wait_for(lambda: os.path.getsize(wal.database) >= size + ROWS * PAGE and copied_all(checkpointer))
