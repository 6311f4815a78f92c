"""What the Django and Flask tests of the event log both check on PostgreSQL, with the real
store against a real server: interleavings are forced with a trigger that holds an INSERT's
transaction open until the test lets it go."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from mcp_common.store import GET_STREAM, SessionStore


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


def check_a_reader_misses_no_event_committed_late(
    store: SessionStore, admin: Any, table: str, thread_done: Callable[[], None] = lambda: None
) -> None:
    """Two workers append to one stream (the session's GET stream); the first takes its event
    id, then its commit is slow. A reader that reads "events after the last id I delivered"
    between the two commits must still get the first event afterwards.

    ``admin``: a psycopg connection (autocommit) of its own to the store's database, where
    ``table`` is the event table. ``thread_done`` runs at the end of each writer thread.
    """
    suffix = uuid.uuid4().hex[:12]
    gate = int(suffix[:7], 16)
    slow = '{"n": "slow commit"}'
    admin.execute(
        f"CREATE FUNCTION mcp_gate_{suffix}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.message = '{slow}' THEN PERFORM pg_advisory_xact_lock_shared({gate}); END IF; "
        "RETURN NEW; END $$"
    )
    admin.execute(
        f"CREATE TRIGGER mcp_gate_{suffix} AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION mcp_gate_{suffix}()"
    )

    def waiting() -> list[int]:
        # The advisory locks sessions of this database wait for (objid: the low 32 bits).
        return [
            row[0]
            for row in admin.execute(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        ]

    def append(message: str, done: threading.Event) -> None:
        try:
            store.append_event("s-gated", GET_STREAM, message)
        finally:
            thread_done()
            done.set()

    first_done, second_done = threading.Event(), threading.Event()
    writers = [
        threading.Thread(target=append, args=(slow, first_done)),
        threading.Thread(target=append, args=('{"n": 2}', second_done)),
    ]
    admin.execute("SELECT pg_advisory_lock(%s)", [gate])
    try:
        writers[0].start()
        _wait_for(lambda: gate in waiting(), "the first append waits to commit")
        writers[1].start()
        _wait_for(lambda: second_done.is_set() or len(waiting()) == 2, "the second append committed or waits")
        # A worker's reader polls now, then after both commits, from the last id it delivered.
        seen = store.events_after("s-gated", GET_STREAM, 0)
        after = seen[-1].event_id if seen else 0
        admin.execute("SELECT pg_advisory_unlock(%s)", [gate])
        for writer in writers:
            writer.join(10)
        assert first_done.is_set() and second_done.is_set()
        seen += store.events_after("s-gated", GET_STREAM, after)
        delivered = [(event.event_id, event.message) for event in seen]
        assert sorted(message for _, message in delivered) == sorted([slow, '{"n": 2}']), delivered
        # Delivered in id order, each once.
        assert [event_id for event_id, _ in delivered] == sorted({event_id for event_id, _ in delivered}), delivered
    finally:
        admin.execute("SELECT pg_advisory_unlock_all()")
        for writer in writers:
            if writer.is_alive():
                writer.join(10)
        admin.execute(f"DROP TRIGGER IF EXISTS mcp_gate_{suffix} ON {table}")
        admin.execute(f"DROP FUNCTION IF EXISTS mcp_gate_{suffix}()")
