"""SQLite writers take turns across threads and worker processes on one lock, handed over by
the kernel rather than found by SQLite's sleeping busy handler."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from mcp_common.store import SQLiteWriteLock

fork = multiprocessing.get_context("fork")
# The children only take the lock and sleep: forking a process that has other threads is safe
# for that (Python 3.12 warns about it in general).
forks_safely = pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")


def hold(database: str, ready: object, seconds: float, releasing: object = None) -> None:
    lock = SQLiteWriteLock(database)
    with lock:
        ready.set()  # type: ignore[attr-defined]
        time.sleep(seconds)
        if releasing is not None:
            releasing.value = time.monotonic()  # type: ignore[attr-defined]  # one clock for all processes


@forks_safely
def test_a_worker_waits_for_another_workers_writer(tmp_path: Path) -> None:
    database = str(tmp_path / "db.sqlite3")
    lock = SQLiteWriteLock(database)
    with lock:  # used before the fork: the child must not share this process's lock
        pass
    ready, releasing = fork.Event(), fork.Value("d", 0.0)
    other = fork.Process(target=hold, args=(database, ready, 0.4, releasing))
    other.start()
    try:
        assert ready.wait(10)
        with lock:
            taken = time.monotonic()
    finally:
        other.join(10)
    assert other.exitcode == 0
    # Taken once the other's writer was done, however late this process woke from its wait.
    assert taken >= releasing.value > 0, (taken, releasing.value)
    assert Path(f"{database}-mcp.lock").exists()


@forks_safely
def test_a_forked_child_takes_its_own_turn(tmp_path: Path) -> None:
    database = str(tmp_path / "db.sqlite3")
    lock = SQLiteWriteLock(database)
    with lock:
        ready = fork.Event()
        # A child forked while the parent holds the lock waits for the parent's release.
        child = fork.Process(target=hold, args=(database, ready, 0.0))
        child.start()
        assert not ready.wait(0.3)
    assert ready.wait(10)
    child.join(10)
    assert child.exitcode == 0


def test_threads_of_one_worker_take_turns_and_a_thread_may_re_enter(tmp_path: Path) -> None:
    lock = SQLiteWriteLock(str(tmp_path / "db.sqlite3"))
    inside = 0
    most = 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        for _ in range(50):
            with lock, lock:  # re-entrant
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0005)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1


@pytest.mark.parametrize("database", [":memory:", "file::memory:?cache=shared", "file:x?mode=memory&cache=shared"])
def test_an_in_memory_database_needs_no_lock_file(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with SQLiteWriteLock(database):
        pass
    assert list(tmp_path.iterdir()) == []
