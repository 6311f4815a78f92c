"""What the Django and Flask store tests both check on PostgreSQL (and the event log on
MariaDB), with the real store against a real server. The event log: interleavings are forced
with a trigger that holds an INSERT's transaction open until the test lets it go. Writes whose
acknowledgement is lost: a proxy (tests.pg_proxy) cuts the connection after the server
committed."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from mcp_common.elicitation import new_record
from mcp_common.store import (
    GET_STREAM,
    ElicitationRecord,
    RequestStateRecord,
    SessionRecord,
    SessionStore,
    new_row_id,
)
from tests.pg_proxy import PostgresProxy


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


class PostgresGate:
    """Holds the commit of one INSERT into ``table`` open: a trigger waits for an advisory lock
    that the test holds. ``admin``: a psycopg connection (autocommit) of its own to the
    store's database."""

    def __init__(self, admin: Any, table: str) -> None:
        self.admin = admin
        self.table = table
        self.suffix = uuid.uuid4().hex[:12]
        self.key = int(self.suffix[:7], 16)

    def install(self, message: str) -> None:
        """Gate the INSERT of the event whose message is ``message``."""
        self.admin.execute(
            f"CREATE FUNCTION mcp_gate_{self.suffix}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.message = '{message}' THEN PERFORM pg_advisory_xact_lock_shared({self.key}); END IF; "
            "RETURN NEW; END $$"
        )
        self.admin.execute(
            f"CREATE TRIGGER mcp_gate_{self.suffix} AFTER INSERT ON {self.table} FOR EACH ROW "
            f"EXECUTE FUNCTION mcp_gate_{self.suffix}()"
        )

    def close(self) -> None:
        self.admin.execute(f"DROP TRIGGER IF EXISTS mcp_gate_{self.suffix} ON {self.table}")
        self.admin.execute(f"DROP FUNCTION IF EXISTS mcp_gate_{self.suffix}()")

    def hold(self) -> None:
        self.admin.execute("SELECT pg_advisory_lock(%s)", [self.key])

    def release(self) -> None:
        self.admin.execute("SELECT pg_advisory_unlock_all()")

    def _waiting(self) -> list[int]:
        # The advisory locks sessions of this database wait for (objid: the low 32 bits).
        return [
            row[0]
            for row in self.admin.execute(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        ]

    def gated(self) -> bool:
        """The gated INSERT waits."""
        return self.key in self._waiting()

    def waiting(self) -> int:
        """How many connections to the database wait for a lock."""
        return len(self._waiting())


class MariaDBGate:
    """:class:`PostgresGate` on MariaDB or MySQL: the trigger waits for a named lock
    (``GET_LOCK``) that the test holds. ``admin``: a MySQLdb connection (autocommit) of its own
    to the store's database."""

    def __init__(self, admin: Any, table: str) -> None:
        self.admin = admin
        self.table = table
        self.suffix = uuid.uuid4().hex[:12]
        self.lock = f"mcp_gate_{self.suffix}"

    def _run(self, sql: str, params: Any = ()) -> list[Any]:
        with self.admin.cursor() as cursor:
            cursor.execute(sql, params or None)
            return list(cursor.fetchall() or ())

    def install(self, message: str) -> None:
        self._run(
            f"CREATE TRIGGER mcp_gate_{self.suffix} AFTER INSERT ON {self.table} FOR EACH ROW "
            f"BEGIN IF NEW.message = '{message}' THEN "
            f"SET @mcp_gate = GET_LOCK('{self.lock}', 30); SET @mcp_gate = RELEASE_LOCK('{self.lock}'); "
            "END IF; END"
        )

    def close(self) -> None:
        self._run(f"DROP TRIGGER IF EXISTS mcp_gate_{self.suffix}")

    def hold(self) -> None:
        assert self._run("SELECT GET_LOCK(%s, 5)", [self.lock]) == [(1,)]

    def release(self) -> None:
        self._run("DO RELEASE_ALL_LOCKS()")

    def _waiting(self) -> list[str]:
        # The statements of this database's connections that wait for a named lock.
        return [
            str(row[0])
            for row in self._run(
                "SELECT INFO FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND DB = DATABASE()"
            )
        ]

    def gated(self) -> bool:
        # A trigger's waiting statement is its own (the GET_LOCK of the gate), not the INSERT.
        return any(self.lock in info for info in self._waiting())

    def waiting(self) -> int:
        return len(self._waiting())


def check_a_reader_misses_no_event_committed_late(
    store: SessionStore, gate: PostgresGate | MariaDBGate, thread_done: Callable[[], None] = lambda: None
) -> None:
    """Two workers append to one stream (the session's GET stream); the first takes its event
    id, then its commit is slow. A reader that reads "events after the last id I delivered"
    between the two commits must still get the first event afterwards.

    ``gate`` holds the first append's commit open until the test lets it go. ``thread_done``
    runs at the end of each writer thread.
    """
    slow = '{"n": "slow commit"}'
    gate.install(slow)

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
    gate.hold()
    try:
        writers[0].start()
        _wait_for(gate.gated, "the first append waits to commit")
        writers[1].start()
        _wait_for(lambda: second_done.is_set() or gate.waiting() == 2, "the second append committed or waits")
        # A worker's reader polls now, then after both commits, from the last id it delivered.
        seen = store.events_after("s-gated", GET_STREAM, 0)
        after = seen[-1].event_id if seen else 0
        gate.release()
        for writer in writers:
            writer.join(10)
        assert first_done.is_set() and second_done.is_set()
        seen += store.events_after("s-gated", GET_STREAM, after)
        delivered = [(event.event_id, event.message) for event in seen]
        assert sorted(message for _, message in delivered) == sorted([slow, '{"n": 2}']), delivered
        # Delivered in id order, each once.
        assert [event_id for event_id, _ in delivered] == sorted({event_id for event_id, _ in delivered}), delivered
    finally:
        gate.release()
        for writer in writers:
            if writer.is_alive():
                writer.join(10)
        gate.close()


# -- writes whose acknowledgement is lost --------------------------------------------------------
# The store runs a call once more when its connection dies. The connection can die after the
# database committed the call's write and before its acknowledgement arrived: the re-run then
# meets the write it already made, and must report the call's success, not a conflict.
# ``proxy`` (tests.pg_proxy.PostgresProxy) stands between the store and its PostgreSQL server.

_FORM = {"mode": "form", "message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}


def _new_session(principal: str | None = "user:1") -> SessionRecord:
    now = time.time()
    return SessionRecord(
        uuid.uuid4().hex, "2025-11-25", '{"protocolVersion":"2025-11-25"}', principal, "Bistro", now, now
    )


def _question(request_key: str, session_id: str | None = None, state_id: str | None = None) -> ElicitationRecord:
    return new_record(
        server_name="Bistro",
        tool="book",
        params=_FORM,
        request_key=request_key,
        principal="user:1",
        expires=time.time() + 60,
        session_id=session_id,
        state_id=state_id,
    )


def _new_state(store: SessionStore) -> tuple[RequestStateRecord, ElicitationRecord]:
    now = time.time()
    state = RequestStateRecord(
        new_row_id(), "Bistro", "tools/call", "book", "d" * 64, "user:1", "sealed", now, now + 60
    )
    question = _question("name", state_id=state.state_id)
    store.save_request_state(state, [question])
    return state, question


def _redeem(store: SessionStore, state: RequestStateRecord, now: float) -> RequestStateRecord | None:
    answers = {"name": ("accepted", '{"name": "Ada"}')}
    return store.consume_request_state(
        state.state_id, state.server_name, state.method, state.target, state.args_digest, state.principal, now, answers
    )


def _pending_question(store: SessionStore) -> tuple[str, str, ElicitationRecord]:
    session = _new_session()
    store.create_session(session)
    request_id = f"srv-{uuid.uuid4().hex}"
    question = _question(request_id, session_id=session.session_id)
    store.create_pending(session.session_id, request_id, "elicitation/create", json.dumps(_FORM), question)
    return session.session_id, request_id, question


def _answer(request_id: str, name: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {"name": name}}})


def check_a_session_created_once_its_acknowledgement_lost(store: SessionStore, proxy: PostgresProxy) -> None:
    record = _new_session()
    proxy.cut_next_write()
    store.create_session(record)  # initialize succeeds: the session was written
    assert proxy.cuts == 1
    found = store.get_session(record.session_id)
    assert found is not None and (found.server_name, found.principal) == ("Bistro", "user:1")


def check_a_session_id_taken_by_another_row_still_conflicts(
    store: SessionStore, proxy: PostgresProxy, conflict: type[BaseException]
) -> None:
    """The re-run's conflict is a success only when the row is the one the call wrote."""
    taken = _new_session(principal="user:2")
    store.create_session(taken)
    proxy.cut_next_write(after_commit=False)
    with pytest.raises(conflict):
        store.create_session(replace(_new_session(), session_id=taken.session_id))
    assert proxy.cuts == 1
    found = store.get_session(taken.session_id)
    assert found is not None and found.principal == "user:2"


def check_a_pending_request_created_once_its_acknowledgement_lost(store: SessionStore, proxy: PostgresProxy) -> None:
    session = _new_session()
    store.create_session(session)
    request_id = f"srv-{uuid.uuid4().hex}"
    question = _question(request_id, session_id=session.session_id)
    proxy.cut_next_write()
    store.create_pending(session.session_id, request_id, "elicitation/create", json.dumps(_FORM), question)
    assert proxy.cuts == 1
    pending = store.get_pending(session.session_id, request_id)
    assert pending is not None and pending.method == "elicitation/create" and pending.response is None
    row = store.get_elicitation(question.id)
    assert row is not None and row.status == "pending"


def check_a_request_state_saved_once_its_acknowledgement_lost(store: SessionStore, proxy: PostgresProxy) -> None:
    proxy.cut_next_write()
    state, question = _new_state(store)  # the tool call's input_required result goes out
    assert proxy.cuts == 1
    assert [row.id for row in store.elicitations_for_state(state.state_id)] == [question.id]
    redeemed = _redeem(store, state, time.time())
    assert redeemed is not None and redeemed.sealed == "sealed"


def check_a_redemption_survives_its_lost_acknowledgement(store: SessionStore, proxy: PostgresProxy) -> None:
    state, question = _new_state(store)
    proxy.cut_next_write()
    redeemed = _redeem(store, state, time.time())
    assert proxy.cuts == 1
    # The client's one valid retry goes on, with the answer it carried recorded.
    assert redeemed is not None and (redeemed.state_id, redeemed.sealed) == (state.state_id, "sealed")
    assert redeemed.expires == pytest.approx(state.expires, abs=1e-5)
    row = store.get_elicitation(question.id)
    assert row is not None and (row.status, row.answer) == ("accepted", '{"name": "Ada"}')
    # The handle is spent all the same.
    assert _redeem(store, state, time.time()) is None


def check_a_spent_handle_stays_spent_across_a_lost_connection(store: SessionStore, proxy: PostgresProxy) -> None:
    """A re-run that finds the handle spent by an earlier redemption still refuses it."""
    state, _question_row = _new_state(store)
    assert _redeem(store, state, time.time() - 1) is not None
    proxy.cut_next_write(after_commit=False)
    assert _redeem(store, state, time.time()) is None
    assert proxy.cuts == 1


def check_an_answer_recorded_once_its_acknowledgement_lost(store: SessionStore, proxy: PostgresProxy) -> None:
    session_id, request_id, question = _pending_question(store)
    reply = _answer(request_id, "Ada")
    proxy.cut_next_write()
    assert store.answer_pending(session_id, request_id, reply, "accepted", '{"name": "Ada"}')
    assert proxy.cuts == 1
    pending = store.get_pending(session_id, request_id)
    assert pending is not None and pending.response == reply
    row = store.get_elicitation(question.id)
    assert row is not None and row.status == "accepted"


def check_an_answer_after_another_stays_dropped_across_a_lost_connection(
    store: SessionStore, proxy: PostgresProxy
) -> None:
    """The first answer wins: a re-run that finds another answer recorded reports none."""
    session_id, request_id, _question_row = _pending_question(store)
    first = _answer(request_id, "Ada")
    assert store.answer_pending(session_id, request_id, first, "accepted", '{"name": "Ada"}')
    proxy.cut_next_write(after_commit=False)
    assert not store.answer_pending(session_id, request_id, _answer(request_id, "Bob"), "accepted", '{"name": "Bob"}')
    assert proxy.cuts == 1
    pending = store.get_pending(session_id, request_id)
    assert pending is not None and pending.response == first


LOST_ACKNOWLEDGEMENT_CHECKS = (
    check_a_session_created_once_its_acknowledgement_lost,
    check_a_pending_request_created_once_its_acknowledgement_lost,
    check_a_request_state_saved_once_its_acknowledgement_lost,
    check_a_redemption_survives_its_lost_acknowledgement,
    check_a_spent_handle_stays_spent_across_a_lost_connection,
    check_an_answer_recorded_once_its_acknowledgement_lost,
    check_an_answer_after_another_stays_dropped_across_a_lost_connection,
)
"""The checks that take ``(store, proxy)``."""


def check_threads_share_an_in_memory_database(
    store: SessionStore, thread_done: Callable[[], None] = lambda: None
) -> None:
    """An application's tests on an in-memory SQLite database (Django's test database; Flask's
    ``sqlite://``) serve several requests at once: the store's reads and writes from several
    threads all succeed, and every event written is there to read, in order. Two threads write
    the event log while two read it and the pending requests. ``thread_done`` runs at the end
    of each thread (Django: close its connection)."""
    session = _new_session()
    store.create_session(session)
    errors: list[BaseException] = []
    written = threading.Event()
    per_writer = 150

    def write() -> None:
        try:
            for n in range(per_writer):
                store.append_event(session.session_id, "stream", json.dumps({"n": n}))
        except BaseException as exc:
            errors.append(exc)
        finally:
            thread_done()

    def read() -> None:
        try:
            while not written.is_set() and not errors:
                ids = [event.event_id for event in store.events_after(session.session_id, "stream", 0)]
                assert ids == sorted(ids), ids
                assert store.get_pending(session.session_id, "nobody") is None
                assert store.get_session(session.session_id) is not None
        except BaseException as exc:
            errors.append(exc)
        finally:
            thread_done()

    writers = [threading.Thread(target=write) for _ in range(2)]
    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in writers + readers:
        thread.start()
    for thread in writers:
        thread.join(60)
    written.set()
    for thread in readers:
        thread.join(60)
    assert not errors, errors[:3]
    assert len(store.events_after(session.session_id, "stream", 0)) == 2 * per_writer


# -- a completion that fails half-way -----------------------------------------------------------
# Celery delivers a task at least once and payment providers retry their webhooks: a
# completion that failed must be worth running again. A trigger makes the database refuse the
# notification's event, as a full disk or a lost connection would.

_NO_EVENTS = {
    "sqlite": (
        [
            "CREATE TRIGGER mcp_test_no_events BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'no space left on device'); END"
        ],
        ["DROP TRIGGER mcp_test_no_events"],
    ),
    "postgresql": (
        [
            "CREATE FUNCTION mcp_test_no_events() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'no space left on device'; END $$",
            "CREATE TRIGGER mcp_test_no_events BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION mcp_test_no_events()",
        ],
        ["DROP TRIGGER mcp_test_no_events ON {table}", "DROP FUNCTION mcp_test_no_events()"],
    ),
    "mysql": (
        [
            "CREATE TRIGGER mcp_test_no_events BEFORE INSERT ON {table} FOR EACH ROW "
            "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no space left on device'"
        ],
        ["DROP TRIGGER mcp_test_no_events"],
    ),
}


def _url_question(store: SessionStore) -> tuple[SessionRecord, str, ElicitationRecord]:
    """A legacy session of the anonymous caller, and a URL-mode question the server ``"Bistro"``
    asked it under a fresh elicitation id."""
    session = _new_session(None)
    store.create_session(session)
    elicitation_id = f"pay-{uuid.uuid4().hex[:8]}"
    question = new_record(
        server_name="Bistro",
        tool="pay",
        params={"mode": "url", "message": "Pay", "url": "https://pay.example.com/1", "elicitationId": elicitation_id},
        request_key="srv-pay",
        principal=None,
        expires=time.time() + 60,
        session_id=session.session_id,
        stream_key=GET_STREAM,
    )
    store.create_pending(session.session_id, "srv-pay", "elicitation/create", "{}", question)
    return session, elicitation_id, question


def check_a_completion_that_could_not_notify_is_completed_by_its_retry(
    store: SessionStore, complete: Callable[[str], int], execute: Callable[[str], None], vendor: str, table: str
) -> None:
    """A completion whose ``notifications/elicitation/complete`` could not be queued records
    nothing: the question stays open, so the retry (the task redelivered, the webhook sent
    again) completes it and its client is told, once. ``complete(elicitation_id)`` is the
    framework's ``complete_elicitation``; ``execute(sql)`` runs DDL on the store's database,
    whose event table is ``table``."""
    session, elicitation_id, question = _url_question(store)
    create, drop = _NO_EVENTS[vendor]
    for statement in create:
        execute(statement.format(table=table))
    try:
        with pytest.raises(Exception, match="no space left on device"):
            complete(elicitation_id)
    finally:
        for statement in drop:
            execute(statement.format(table=table))
    row = store.get_elicitation(question.id)
    assert row is not None and row.status == "pending"
    assert complete(elicitation_id) == 1
    assert complete(elicitation_id) == 0
    (event,) = store.events_after(session.session_id, GET_STREAM, 0)
    assert json.loads(event.message)["params"] == {"elicitationId": elicitation_id}


def check_a_purge_removes_events_left_for_a_session_that_is_gone(store: SessionStore) -> None:
    """A completion notifies the sessions that asked, and one may have ended meanwhile (a URL
    question accepted, then the client left): its event then belongs to no session, and the
    purge, which removed events only with their session, kept it for ever. It goes once it is
    older than the purge's cutoff; a live session's events stay. So do the pending rows a
    question wrote while its session's DELETE committed (which no sweep counts any more)."""
    now = time.time()
    live = replace(_new_session(), last_seen=now + 3600)  # not idle at the cutoff below
    gone = _new_session()
    store.create_session(live)
    store.create_session(gone)
    store.delete_session(gone.session_id)
    store.append_event(gone.session_id, GET_STREAM, '{"left": "behind"}', False)
    store.append_event(live.session_id, GET_STREAM, '{"still": "read"}', False)
    # So may a question's pending row, written while the session's DELETE was committing.
    store.create_pending(gone.session_id, "srv-late", "elicitation/create", "{}")
    store.create_pending(live.session_id, "srv-live", "elicitation/create", "{}")
    store.purge_expired(now + 60)
    assert store.events_after(gone.session_id, GET_STREAM, 0) == []
    assert [e.message for e in store.events_after(live.session_id, GET_STREAM, 0)] == ['{"still": "read"}']
    assert store.get_pending(gone.session_id, "srv-late") is None
    assert store.get_pending(live.session_id, "srv-live") is not None


def check_a_completion_for_a_mistyped_server_says_so(
    store: SessionStore, complete: Callable[[str, str | None], int], caplog: pytest.LogCaptureFixture
) -> None:
    """``complete_elicitation(id, server="Bistr")`` for a question the server ``"Bistro"``
    asked: the name limits it, so nothing is completed, and a payment's question would stay
    open with nobody told why. A WARNING says which server did ask it. The right name completes
    it; an id no server asked, or one already completed, says nothing (a webhook sent twice)."""
    _, elicitation_id, question = _url_question(store)

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "mcp_common.elicitation"]

    with caplog.at_level(logging.WARNING, logger="mcp_common.elicitation"):
        assert complete(elicitation_id, "Bistr") == 0
        (warning,) = said()
        assert warning.levelno == logging.WARNING
        assert warning.getMessage() == (
            f"complete_elicitation({elicitation_id!r}, server='Bistr') completed nothing: no server of "
            "that name asked it, but 'Bistro' did; is the server name right?"
        )
        stored = store.get_elicitation(question.id)
        assert stored is not None and stored.status == "pending"
        caplog.clear()
        assert complete(f"{elicitation_id}-nobody", "Bistr") == 0
        assert complete(elicitation_id, "Bistro") == 1
        assert complete(elicitation_id, "Bistro") == 0
        assert said() == []
    stored = store.get_elicitation(question.id)
    assert stored is not None and stored.status == "completed"
