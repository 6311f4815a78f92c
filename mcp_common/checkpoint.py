"""SQLite's WAL checkpoints on a thread of their own instead of inside a request's commit.

In WAL mode SQLite appends every commit to ``<database>-wal`` and copies the log back into the
database file at a checkpoint. By default the commit that takes the log past
``wal_autocheckpoint`` pages (1,000) runs that checkpoint itself, before it returns: a request
that happens to make it waits 2-5 ms more, and on a file the store's writers take turns on
(:class:`~mcp_common.store.SQLiteWriteLock`) every writer queued behind it waits too. A
2026-07-28 elicitation round trip writes about 16 pages, so one round trip in about 60 paid
for it; that one was most of the round trip's p99.

SQLite's documentation suggests the cure: checkpoint from another thread. After the store's
writes, :class:`WalCheckpointer` wakes a thread that runs ``PRAGMA wal_checkpoint(PASSIVE)``
on a connection of its own, at most once per interval while writes keep coming. A passive
checkpoint takes no lock a reader or writer waits for and copies what it can, so the log
rarely reaches SQLite's limit, and SQLite's own checkpoint stays as the safety net. The thread
ends after a few idle seconds and starts again with the next write; a forked worker starts its
own. A database not in WAL mode has nothing to checkpoint: the first attempt finds that out,
and the checkpointer stops for good.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref

logger = logging.getLogger("mcp_common.checkpoint")

AUTOCHECKPOINT_PAGES = 10_000
"""``PRAGMA wal_autocheckpoint`` for connections a store owns (Flask's engine) while a checkpointer
runs: SQLite's own checkpoint in a commit, 1,000 pages by default, becomes a rare safety net
(the log may grow to about 40 MiB under a load that never pauses). A connection the
application shares (Django's) keeps its own setting."""

IDLE_EXIT = 5.0
"""Seconds without a write after which the thread ends (the next write starts another)."""

BUSY_RETRIES = 3
"""Checkpoints tried again, an interval apart, when the database was busy."""

_ALL: weakref.WeakSet[WalCheckpointer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for checkpointer in list(_ALL):
        checkpointer._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class WalCheckpointer:
    """Checkpoints one SQLite file's write-ahead log from a background thread, after writes.

    :meth:`wrote` is what a writer calls once its transaction is over: a few hundred
    nanoseconds, and never waits for a checkpoint. ``interval``: the least time between two
    checkpoints while writes keep coming (seconds, > 0).
    """

    def __init__(self, database: str, interval: float, *, idle_exit: float = IDLE_EXIT) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, not {interval!r}")
        self.database = database
        self.interval = interval
        self.idle_exit = idle_exit
        self.checkpoints = 0
        """Checkpoints run so far, in this process."""
        self.last: tuple[int, int, int] | None = None
        """The last checkpoint's ``(busy, log pages, pages checkpointed)``, as SQLite reports it:
        ``(1, -1, -1)`` when another connection was checkpointing (the next wake tries again),
        ``(0, -1, -1)`` when the database is not in WAL mode."""
        self.disabled = False
        """Set once the database turned out not to be in WAL mode (or a checkpoint failed)."""
        self._reset()

        _ALL.add(self)

    def _reset(self) -> None:
        # Also in a forked child (before it has a second thread): it inherits none of its
        # parent's threads, and must not reuse the parent's lock or event (either may have
        # been held or waited on at the fork).
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running = False
        self._stopping = False
        self._busy = 0
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        """A write to the database finished: have its log checkpointed soon."""
        if self.disabled:
            return
        self._wake.set()
        if not self._running:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._running or self._stopping or self.disabled:
                return
            self._running = True
            thread = threading.Thread(target=self._run, name="mcp-sqlite-checkpoint", daemon=True)
            self._thread = thread
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread, if one runs (a test's clean-up, an orderly shutdown); the next write
        starts another."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            self._stopping = False
            self._wake.clear()

    def _idle(self) -> bool:
        """Whether the thread should end: nothing written for ``idle_exit`` seconds (or a stop).
        ``_running`` goes false before the last look at the event, so that a write racing with
        the thread's end either is seen here or starts a thread of its own."""
        with self._lock:
            self._running = False
            if self._wake.is_set() and not self._stopping:
                self._running = True
                return False
            return True

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                if not self._wake.wait(self.idle_exit) and self._idle():
                    return
                if self._stopping:
                    with self._lock:
                        self._running = False
                    return
                self._wake.clear()
                try:
                    if connection is None:
                        connection = self._connect()
                    row = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.OperationalError as exc:
                    # Busy: another connection held a lock this one needed first (recovering
                    # the log's index, the last connection's checkpoint as it closes). Tried
                    # again after the interval, a few times; then the next write wakes it.
                    if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                        raise
                    logger.debug("checkpoint of %s skipped: %s", self.database, exc)
                    self._busy += 1
                    if self._busy <= BUSY_RETRIES:
                        self._wake.set()
                    time.sleep(self.interval)
                    continue
                self._busy = 0
                self.last = (int(row[0]), int(row[1]), int(row[2]))
                self.checkpoints += 1
                if self.last == (0, -1, -1):  # not in WAL mode: there is no log to copy
                    logger.debug("%s is not in WAL mode: no checkpoints needed", self.database)
                    self.disabled = True
                    with self._lock:
                        self._running = False
                    return
                # Writes during the pause set the event again: one checkpoint covers them all.
                time.sleep(self.interval)
        except Exception:
            # Never the request's problem: SQLite's own checkpoints go on as without this thread.
            logger.warning("Background checkpoints of %s stopped; SQLite's own go on", self.database, exc_info=True)
            self.disabled = True
            with self._lock:
                self._running = False
        finally:
            if connection is not None:
                connection.close()

    def _connect(self) -> sqlite3.Connection:
        # A passive checkpoint never waits in SQLite's busy handler; opening may, briefly.
        return sqlite3.connect(
            self.database,
            timeout=0.1,
            isolation_level=None,
            check_same_thread=False,
            uri=self.database.startswith("file:"),
        )
