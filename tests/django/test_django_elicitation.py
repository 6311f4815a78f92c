"""Django side of persisted elicitations: the ORM store, ``complete_elicitation``, the system
check for elicitation schemas, and the admin panel where staff review questions."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.test import Client, override_settings

import mcp_django
from mcp_common.elicitation import new_record
from mcp_common.store import GET_STREAM, RequestStateRecord, SessionRecord
from mcp_django.models import MCPElicitation, MCPEvent
from mcp_django.store import DjangoStore

pytestmark = pytest.mark.django_db(transaction=True)


def session(store: DjangoStore) -> str:
    sid = uuid.uuid4().hex
    now = time.time()
    store.create_session(SessionRecord(sid, "2025-11-25", "{}", None, "Bistro", now, now))
    return sid


def url_row(
    store: DjangoStore,
    sid: str | None,
    elicitation_id: str,
    request_key: str = "srv-1",
    server_name: str = "Bistro",
    principal: str | None = None,
    expires: float | None = None,
):
    record = new_record(
        server_name=server_name,
        tool="pay_deposit",
        params={"mode": "url", "message": "Pay", "url": "https://pay.example.com/1", "elicitationId": elicitation_id},
        request_key=request_key,
        principal=principal,
        expires=time.time() + 60 if expires is None else expires,
        session_id=sid,
        owner="host:1:x",
        stream_key="s1",
        call_id="5",
    )
    store.create_pending(sid or "", request_key, "elicitation/create", "{}", record)
    return record


def test_pending_answer_updates_the_row_in_the_same_transaction() -> None:
    store = DjangoStore()
    sid = session(store)
    record = url_row(store, sid, "dep-1")
    assert store.get_elicitation(record.id) == record.__class__(
        **{
            **record.__dict__,
            "created": pytest.approx(record.created),
            "updated": pytest.approx(record.updated),
            "expires": pytest.approx(record.expires),
        }
    )
    assert store.answer_pending(sid, "srv-1", '{"result": {"action": "accept"}}', "accepted", None)
    assert not store.answer_pending(sid, "srv-1", '{"result": {"action": "decline"}}', "declined", None)
    assert store.get_elicitation(record.id).status == "accepted"
    assert [r.id for r in store.stream_elicitations(sid, "s1")] == [record.id]


def test_answers_are_found_by_time_and_pending_rows_by_session() -> None:
    store = DjangoStore()
    s1, s2, gone = session(store), session(store), session(store)
    store.create_pending(s1, "srv-1", "elicitation/create", "{}")
    store.create_pending(s1, "srv-2", "roots/list", "{}")
    store.create_pending(s2, "srv-3", "elicitation/create", "{}")
    before = time.time() - 0.001
    assert store.answered_since(before) == []
    assert store.answer_pending(s1, "srv-2", '{"result":{"roots":[]}}')
    assert sorted(store.answered_since(before)) == [(s1, "srv-2", '{"result":{"roots":[]}}')]
    assert store.answered_since(time.time() + 5) == []
    many = [f"m{n}" for n in range(1200)]
    for n in range(0, 1200, 100):
        many[n] = session(store)
        store.create_pending(many[n], "srv-x", "roots/list", "{}")
    assert store.pending_keys([s1, s2, "s9", *many]) == {
        (s1, "srv-1"),
        (s1, "srv-2"),
        (s2, "srv-3"),
        *((sid, "srv-x") for sid in many[::100]),
    }
    store.delete_pending(s1, "srv-2")
    assert store.answered_since(before) == []
    assert store.pending_keys([s1]) == {(s1, "srv-1")}
    # A row written after its session's DELETE took the session's rows (while the DELETE's
    # transaction was still open) does not count: the session is gone.
    store.delete_session(gone)
    store.create_pending(gone, "srv-late", "elicitation/create", "{}")
    assert store.pending_keys([s1, gone]) == {(s1, "srv-1")}


def test_a_row_without_detail_is_claimed_once() -> None:
    """Two workers that find the call's worker dead each try to set the row's detail, the
    status left as it is: the first wins, the second changes nothing."""
    store = DjangoStore()
    record = url_row(store, session(store), "dep-claim")
    now = time.time()
    claims = [
        store.update_elicitation(record.id, "pending", now + n, detail=f"claim {n}", without_detail=True)
        for n in (1, 2)
    ]
    assert claims == [True, False]
    assert (store.get_elicitation(record.id).status, store.get_elicitation(record.id).detail) == ("pending", "claim 1")


def test_complete_elicitation_queues_the_notification_once() -> None:
    store = DjangoStore()
    sid = session(store)
    url_row(store, sid, "dep-2")
    assert mcp_django.complete_elicitation("dep-2") == 1
    assert mcp_django.complete_elicitation("dep-2") == 0
    (event,) = store.events_after(sid, GET_STREAM, 0)
    assert json.loads(event.message) == {
        "jsonrpc": "2.0",
        "method": "notifications/elicitation/complete",
        "params": {"elicitationId": "dep-2"},
    }
    assert MCPElicitation.objects.get(elicitation_id="dep-2").status == "completed"
    assert mcp_django.complete_elicitation("never-asked") == 0


def test_a_completion_that_could_not_notify_is_completed_by_its_retry() -> None:
    """Celery's at-least-once delivery, a webhook sent again: the retry of a completion whose
    notification the database refused completes the question and tells its client, once."""
    from django.db import connection

    from tests.store_checks import check_a_completion_that_could_not_notify_is_completed_by_its_retry

    def execute(sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)

    check_a_completion_that_could_not_notify_is_completed_by_its_retry(
        DjangoStore(), mcp_django.complete_elicitation, execute, connection.vendor, MCPEvent._meta.db_table
    )


def test_a_completion_inside_a_transaction_rolled_back_completes_and_notifies_nothing() -> None:
    """A webhook view under ``ATOMIC_REQUESTS`` (or its own ``atomic``) that fails after the
    completion: the row and its notification roll back with the view's writes; the payment
    provider's retry then completes it. ``transaction.on_commit`` defers it to the commit."""
    from django.db import transaction

    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-tx")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert mcp_django.complete_elicitation("dep-tx") == 1
        raise RuntimeError("the view failed")
    assert store.get_elicitation(row.id).status == "pending"
    assert store.events_after(sid, GET_STREAM, 0) == []
    with transaction.atomic():
        transaction.on_commit(lambda: mcp_django.complete_elicitation("dep-tx"))
    assert store.get_elicitation(row.id).status == "completed"
    assert len(store.events_after(sid, GET_STREAM, 0)) == 1


def test_a_completion_for_a_mistyped_server_completes_nothing_and_says_which_server_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through ``complete_elicitation`` and the Celery task that runs it."""
    from mcp_django.tasks import complete_elicitation_task
    from tests.store_checks import check_a_completion_for_a_mistyped_server_says_so

    check_a_completion_for_a_mistyped_server_says_so(DjangoStore(), mcp_django.complete_elicitation, caplog)
    check_a_completion_for_a_mistyped_server_says_so(
        DjangoStore(), lambda eid, server: complete_elicitation_task.apply(args=[eid, server]).get(), caplog
    )


NOT_TEXT = {"None": None, "int": 17, "bytes": b"dep-2", "list": ["dep-2"]}


@pytest.mark.parametrize("value", NOT_TEXT.values(), ids=list(NOT_TEXT))
def test_complete_elicitation_refuses_an_id_that_is_not_text_naming_the_argument(value: Any) -> None:
    """A webhook whose payload lacked the field (``payload.get("id")``) hears it where it
    called, not as a TypeError from deep inside the store; so does the Celery task."""
    from mcp_django.tasks import complete_elicitation_task

    with pytest.raises(TypeError, match=rf"^elicitation_id must be a str, not {type(value).__name__}"):
        mcp_django.complete_elicitation(value)
    with pytest.raises(TypeError, match=r"^elicitation_id must be a str"):
        complete_elicitation_task.apply(args=[value]).get()
    with pytest.raises(TypeError, match=r"^server must be a str or None, not int"):
        mcp_django.complete_elicitation("dep-2", 3)  # type: ignore[arg-type]


def test_the_celery_task_retries_a_completion_the_database_refused_for_a_moment(monkeypatch: Any) -> None:
    """A payment's completion survives a database that is briefly locked or unreachable: the
    task retries (eagerly here, with backoff under a worker) and the question is completed."""
    from django.db import OperationalError

    import mcp_django.tasks
    from mcp_django.tasks import complete_elicitation_task

    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-retry")
    calls: list[str] = []

    def flaky(elicitation_id: str, server: str | None = None) -> int:
        calls.append(elicitation_id)
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return mcp_django.complete_elicitation(elicitation_id, server)

    monkeypatch.setattr(mcp_django.tasks, "complete_elicitation", flaky)
    assert complete_elicitation_task.apply(args=["dep-retry"]).get() == 1
    assert calls == ["dep-retry", "dep-retry"]
    assert store.get_elicitation(row.id).status == "completed"
    assert len(store.events_after(sid, GET_STREAM, 0)) == 1


def test_the_celery_task_does_not_retry_an_error_a_retry_would_not_mend(monkeypatch: Any) -> None:
    """A missing table (or any error but a transient one) fails the task at once."""
    from django.db import ProgrammingError

    import mcp_django.tasks
    from mcp_django.tasks import complete_elicitation_task

    calls: list[str] = []

    def broken(elicitation_id: str, server: str | None = None) -> int:
        calls.append(elicitation_id)
        raise ProgrammingError("no such table: mcp_django_mcpelicitation")

    monkeypatch.setattr(mcp_django.tasks, "complete_elicitation", broken)
    with pytest.raises(ProgrammingError):
        complete_elicitation_task.apply(args=["dep-x"]).get()
    assert calls == ["dep-x"]


def test_the_celery_task_does_not_retry_sqlites_missing_table(monkeypatch: Any) -> None:
    """SQLite says a table is missing (``migrate`` not run) with an ``OperationalError``, the
    class of its transient "database is locked": the task fails at once, as on PostgreSQL and
    MariaDB, instead of retrying for 40 minutes."""
    from django.db import OperationalError

    import mcp_django.tasks
    from mcp_django.tasks import complete_elicitation_task

    calls: list[str] = []

    def unmigrated(elicitation_id: str, server: str | None = None) -> int:
        calls.append(elicitation_id)
        raise OperationalError("no such table: mcp_django_mcpelicitation")

    monkeypatch.setattr(mcp_django.tasks, "complete_elicitation", unmigrated)
    with pytest.raises(Exception, match="no such table: mcp_django_mcpelicitation"):
        complete_elicitation_task.apply(args=["dep-z"]).get()
    assert calls == ["dep-z"]


def test_the_celery_task_gives_up_after_its_retries(monkeypatch: Any) -> None:
    """A database that stays down fails the task after ``MAX_RETRIES`` retries, with its error."""
    from django.db import InterfaceError

    import mcp_django.tasks
    from mcp_django.tasks import MAX_RETRIES, complete_elicitation_task

    calls: list[str] = []

    def down(elicitation_id: str, server: str | None = None) -> int:
        calls.append(elicitation_id)
        raise InterfaceError("connection already closed")

    monkeypatch.setattr(mcp_django.tasks, "complete_elicitation", down)
    with pytest.raises(InterfaceError):
        complete_elicitation_task.apply(args=["dep-y"]).get()
    assert len(calls) == MAX_RETRIES + 1


QUESTION_ON_FILE = """
import django, time
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from mcp_common.elicitation import new_record
from mcp_common.store import SessionRecord
from mcp_django.store import DjangoStore
store, now = DjangoStore(), time.time()
store.create_session(SessionRecord("s-crash", "2025-11-25", "{}", None, "Bistro", now, now))
params = {"mode": "url", "message": "Pay", "url": "https://pay.example.com/9", "elicitationId": "dep-crash"}
record = new_record(server_name="Bistro", tool="pay_deposit", params=params, request_key="srv-1",
                    principal=None, expires=now + 600, session_id="s-crash")
store.create_pending("s-crash", "srv-1", "elicitation/create", "{}", record)
"""


def _blocked_on(lock_file: Path) -> list[int]:
    """The processes waiting for the ``flock`` on ``lock_file`` (Linux's ``/proc/locks``)."""
    inode = f":{os.stat(lock_file).st_ino} "
    waiting = [line.split() for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line]
    return [int(fields[fields.index("->") + 4]) for fields in waiting]


@pytest.mark.slow
def test_the_celery_task_completes_after_its_worker_process_died_mid_completion(tmp_path: Path) -> None:
    """A Celery worker process killed while it completes a payment's question (out of memory,
    a deploy's SIGKILL, a lost machine) must not lose the completion: the task, idempotent, is
    acknowledged only once done, and runs again."""
    from celery import Celery

    from mcp_common.store import SQLiteWriteLock
    from tests.conftest import ROOT, end_process

    database = tmp_path / "celery.sqlite3"
    broker = "redis://127.0.0.1:6379/7"
    queue = f"mcp-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "example_project.django_site.settings",
        "MCP_EXAMPLE_DATABASE_URL": f"sqlite:///{database}",
        "MCP_EXAMPLE_CELERY_BROKER": broker,
        "MCP_EXAMPLE_CELERY_BACKEND": broker,
    }
    subprocess.run([sys.executable, "-c", QUESTION_ON_FILE], cwd=ROOT, env=env, check=True)
    command = [sys.executable, "-m", "celery", "-A", "example_project.django_site.celery", "worker"]
    command += ["--pool=prefork", "--concurrency=1", "-Q", queue, "--without-gossip", "--without-mingle"]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([*command, "--loglevel=INFO"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    sender = Celery(broker=broker, backend=broker, set_as_current=False)  # the tasks keep their app
    # The store's writers to the file take turns on this lock: held here, the worker's
    # completion waits for it, mid-task, until its process is killed.
    lock = SQLiteWriteLock(str(database))
    try:
        with lock:
            result = sender.send_task("mcp_django.complete_elicitation", args=["dep-crash"], queue=queue)
            deadline = time.monotonic() + 60
            while not (blocked := _blocked_on(Path(f"{database}-mcp.lock"))) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert blocked, (tmp_path / "worker.log").read_text()
            os.kill(blocked[0], signal.SIGKILL)
        assert result.get(timeout=60) == 1, (tmp_path / "worker.log").read_text()
        with sqlite3.connect(database) as connection:
            ((status,),) = connection.execute(
                "SELECT status FROM mcp_django_mcpelicitation WHERE elicitation_id = 'dep-crash'"
            ).fetchall()
        assert status == "completed"
    finally:
        end_process(worker)
        log.close()
        with sender.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
        sender.close()


def test_the_example_projects_celery_task_runs_in_place_until_a_broker_is_configured() -> None:
    """The example runs in one command (SQLite, no worker): ``complete_elicitation_task.delay``
    completes the question there and then, as Celery's eager mode does. Queued on a broker
    that no worker reads, it would never run, and the client would wait for good."""
    from mcp_django.tasks import complete_elicitation_task

    assert "MCP_EXAMPLE_CELERY_BROKER" not in os.environ
    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-eager")
    assert complete_elicitation_task.delay("dep-eager").get(timeout=5) == 1
    assert store.get_elicitation(row.id).status == "completed"


@pytest.mark.slow
def test_the_example_sites_tasks_go_to_the_broker_its_settings_name(tmp_path: Path) -> None:
    """A task sent from the example site (a view, ``manage.py shell``) goes to the broker in its
    settings, which its worker (``celery -A example_project.django_site.celery worker``)
    reads: not to Celery's default broker, where no worker would ever run it."""
    import redis

    from tests.conftest import ROOT

    queue = f"mcp-test-{uuid.uuid4().hex[:8]}"
    send = (
        "import django; django.setup()\n"
        "from mcp_django.tasks import complete_elicitation_task\n"
        f"complete_elicitation_task.apply_async(args=['dep-sent'], queue={queue!r})\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "example_project.django_site.settings",
        "MCP_EXAMPLE_DATABASE_URL": f"sqlite:///{tmp_path / 'sent.sqlite3'}",
        "MCP_EXAMPLE_CELERY_BROKER": "redis://127.0.0.1:6379/7",
    }
    broker = redis.Redis.from_url("redis://127.0.0.1:6379/7")
    try:
        subprocess.run([sys.executable, "-c", send], cwd=ROOT, env=env, check=True, timeout=60)
        (message,) = broker.lrange(queue, 0, -1)
        headers = json.loads(message)["headers"]
        assert (headers["task"], headers["argsrepr"]) == ("mcp_django.complete_elicitation", "['dep-sent']")
    finally:
        broker.delete(queue)
        broker.close()


def test_complete_elicitation_refuses_an_empty_id() -> None:
    """No question is asked under an empty id: completing one is a caller's mistake (a field
    left blank), said as such rather than answered with 0."""
    with pytest.raises(ValueError, match=r"^elicitation_id must not be empty"):
        mcp_django.complete_elicitation("")


@pytest.mark.django_db  # a TestCase: the test's writes are in its open transaction
def test_acomplete_elicitation_runs_where_the_callers_database_work_does() -> None:
    """Async code (an async view, an async test) completes on the thread Django runs its sync
    work on, as Django's own async ORM does: it sees the caller's transaction (a ``TestCase``'s
    rows), and its connection is the one Django closes after the request, not one left open on
    some executor thread (which also kept PostgreSQL from dropping the test database)."""
    from asgiref.sync import async_to_sync

    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-async")
    assert async_to_sync(mcp_django.acomplete_elicitation)("dep-async") == 1
    assert store.get_elicitation(row.id).status == "completed"
    assert len(store.events_after(sid, GET_STREAM, 0)) == 1
    assert async_to_sync(mcp_django.acomplete_elicitation)("dep-async") == 0


def test_elicitation_ids_differing_only_in_case_are_apart() -> None:
    """A payment provider's ids are case-sensitive; completing one never completes another
    (MySQL and MariaDB compare text case-insensitively and ignore trailing spaces by default)."""
    store = DjangoStore()
    sid = session(store)
    lower = url_row(store, sid, "cs_a1b", request_key="srv-1")
    upper = url_row(store, sid, "cs_A1B", request_key="srv-2")
    spaced = url_row(store, sid, "cs_a1b ", request_key="srv-3")
    assert [r.id for r in store.find_elicitations("cs_a1b")] == [lower.id]
    assert [r.id for r in store.complete_elicitations("cs_A1B", time.time(), server_name="Bistro")] == [upper.id]
    assert store.get_elicitation(lower.id).status == "pending"
    assert store.get_elicitation(spaced.id).status == "pending"


def test_completion_expires_a_pending_question_past_its_expiry_instead() -> None:
    """Between a question's expiry and the heartbeat that marks it expired, completing it must
    not complete it nor notify its client: it ends expired, as the heartbeat would have left
    it. An answered question past its expiry is still completed (the heartbeat leaves it)."""
    store = DjangoStore()
    # An hour ahead of the clock: a running endpoint's heartbeat, which expires rows by the
    # clock, would otherwise race this test for its overdue row.
    now = time.time() + 3600
    late_sid, answered_sid = session(store), session(store)
    late = url_row(store, late_sid, "dep-late", expires=now - 1)
    answered = url_row(store, answered_sid, "dep-late", request_key="srv-2", expires=now - 1)
    assert store.answer_pending(answered_sid, "srv-2", '{"result": {"action": "accept"}}', "accepted", None)
    moved = store.complete_elicitations("dep-late", now)
    assert [r.id for r in moved] == [answered.id]
    assert store.get_elicitation(late.id).status == "expired"
    assert store.get_elicitation(answered.id).status == "completed"
    assert store.complete_elicitations("dep-late", now + 1) == []
    assert store.expire_elicitations(now + 1) == 0


def test_request_state_is_single_use_and_bound() -> None:
    store = DjangoStore()
    now = time.time()
    state = RequestStateRecord(
        uuid.uuid4().hex, "Files", "tools/call", "delete_folder", "abc", "user:1", "v1.x", now, now + 60
    )
    question = new_record(
        server_name="Files",
        tool="delete_folder",
        params={"mode": "form", "message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}},
        request_key="k",
        principal="user:1",
        expires=now + 60,
        state_id=state.state_id,
    )
    store.save_request_state(state, [question])
    args = (state.state_id, "Files", "tools/call", "delete_folder", "abc")
    answers = {"k": ("accepted", '{"ok": true}')}
    assert store.consume_request_state(*args, "user:2", time.time(), answers) is None
    assert store.consume_request_state(*args, None, time.time(), answers) is None
    # Told apart on every database (MySQL and MariaDB compare text case-insensitively and ignore
    # trailing spaces by default).
    assert store.consume_request_state(*args, "USER:1", time.time(), answers) is None
    assert store.consume_request_state(*args, "user:1 ", time.time(), answers) is None
    assert (
        store.consume_request_state(
            state.state_id, "Files", "tools/call", "Delete_Folder", "abc", "user:1", time.time(), answers
        )
        is None
    )
    assert (
        store.consume_request_state(
            state.state_id, "Files", "tools/call", "other", "abc", "user:1", time.time(), answers
        )
        is None
    )
    assert store.get_elicitation(question.id).status == "pending"
    redeemed = store.consume_request_state(*args, "user:1", time.time(), answers)
    assert redeemed is not None and redeemed.sealed == "v1.x"
    assert store.consume_request_state(*args, "user:1", time.time(), answers) is None
    row = store.get_elicitation(question.id)
    assert row.status == "accepted" and json.loads(row.answer) == {"ok": True}
    assert [r.id for r in store.elicitations_for_state(state.state_id)] == [question.id]


@pytest.mark.parametrize("key", ["K", "k "])
def test_an_answer_under_a_key_differing_in_case_or_trailing_spaces_answers_nothing(key: str) -> None:
    """The SDK takes an answer by its exact key and asks ``k`` again: its row must not say
    ``accepted`` with an answer the tool never got (MySQL and MariaDB compare text
    case-insensitively and ignore trailing spaces by default)."""
    store = DjangoStore()
    state, question = _state_and_question()
    store.save_request_state(state, [question])
    args = (state.state_id, "Files", "tools/call", "delete_folder", "abc", None, time.time())
    assert store.consume_request_state(*args, {key: ("accepted", '{"ok": true}')}) is not None
    row = store.get_elicitation(question.id)
    assert row is not None and row.status != "accepted" and row.answer is None, row


@pytest.mark.parametrize("answered", [0, 1])
def test_a_retry_expires_the_questions_it_left_unanswered(answered: int) -> None:
    """A client that answers some of a round's questions: the state is spent, so the others
    can never be answered through it. They leave the pending list (the next round asks again
    if the tool still needs them); another state's question under the same key stays."""
    store = DjangoStore()
    state, first = _state_and_question()
    keys = ["k", "copies", "pay"]
    questions = [first] + [replace(first, id=uuid.uuid4().hex, request_key=key) for key in keys[1:]]
    other_state, other = _state_and_question()
    store.save_request_state(state, questions)
    store.save_request_state(other_state, [other])
    answers = {"k": ("accepted", '{"ok": true}')} if answered else {}
    later = time.time() + 1
    assert store.consume_request_state(
        state.state_id, "Files", "tools/call", "delete_folder", "abc", None, later, answers
    )
    rows = {r.request_key: (r.status, r.detail) for r in store.elicitations_for_state(state.state_id)}
    unanswered = ("expired", "The client retried without answering it")
    assert rows == {"k": ("accepted", None) if answered else unanswered, "copies": unanswered, "pay": unanswered}
    assert store.get_elicitation(other.id).status == "pending"


def _state_and_question(state_id: str | None = None, question_id: str | None = None):
    now = time.time()
    state = RequestStateRecord(
        state_id or uuid.uuid4().hex, "Files", "tools/call", "delete_folder", "abc", None, "v1.x", now, now + 60
    )
    question = new_record(
        server_name="Files",
        tool="delete_folder",
        params={"mode": "form", "message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}},
        request_key="k",
        principal=None,
        expires=now + 60,
        state_id=state.state_id,
    )
    if question_id is not None:
        question = question.__class__(**{**question.__dict__, "id": question_id})
    return state, question


def test_a_request_state_is_saved_whole_or_not_at_all() -> None:
    from django.db import IntegrityError, connection

    store = DjangoStore()
    state, question = _state_and_question()
    store.save_request_state(state, [question])
    # Autocommit (no application transaction): the store's own transaction on the driver.
    assert connection.get_autocommit() and not connection.in_atomic_block
    again, clash = _state_and_question(question_id=question.id)
    with pytest.raises(IntegrityError):  # Django's error, not the driver's
        store.save_request_state(again, [clash])
    # The question's insert failed: its state was rolled back with it.
    assert (
        store.consume_request_state(
            again.state_id, "Files", "tools/call", "delete_folder", "abc", None, time.time(), {}
        )
        is None
    )
    assert (
        store.consume_request_state(
            state.state_id, "Files", "tools/call", "delete_folder", "abc", None, time.time(), {}
        )
        is not None
    )


def _question(state_id: str, key: str, now: float, status: str = "pending"):
    record = new_record(
        server_name="Files",
        tool="delete_folder",
        params={"mode": "form", "message": f"{key}?", "requestedSchema": {"type": "object", "properties": {}}},
        request_key=key,
        principal=None,
        expires=now + 60,
        state_id=state_id,
    )
    return record.__class__(**{**record.__dict__, "status": status})


def test_a_redemption_answers_only_its_own_pending_questions() -> None:
    """Several questions saved with one state (on PostgreSQL: one statement for all of them),
    answered by one redemption (one statement too): each answer reaches its own pending row,
    and nothing else moves."""
    store = DjangoStore()
    now = time.time()
    state, _ = _state_and_question()
    questions = [
        _question(state.state_id, "edition", now),
        _question(state.state_id, "copies", now),
        _question(state.state_id, "pay", now, status="declined"),
    ]
    store.save_request_state(state, questions)
    other_state, _ = _state_and_question()
    other = _question(other_state.state_id, "edition", now)
    store.save_request_state(other_state, [other])
    answers = {
        "edition": ("accepted", '{"edition": "first"}'),
        "pay": ("accepted", '{"paid": true}'),
        "unknown": ("declined", None),
    }
    args = (state.state_id, "Files", "tools/call", "delete_folder", "abc", None)
    redeemed = store.consume_request_state(*args, now + 5, answers)
    assert redeemed is not None and redeemed.sealed == "v1.x"
    assert redeemed.expires == pytest.approx(state.expires, abs=2e-6)
    rows = {r.request_key: (r.status, r.answer) for r in store.elicitations_for_state(state.state_id)}
    assert rows == {
        "edition": ("accepted", '{"edition": "first"}'),
        "copies": ("expired", None),  # left out of the retry: no retry can answer it now
        "pay": ("declined", None),
    }
    assert store.get_elicitation(questions[0].id).updated == pytest.approx(now + 5, abs=2e-6)
    assert (store.get_elicitation(other.id).status, store.get_elicitation(other.id).answer) == ("pending", None)
    # A second redemption of the same handle changes nothing, not even with new answers.
    assert store.consume_request_state(*args, now + 6, {"copies": ("accepted", "{}")}) is None
    assert store.get_elicitation(questions[1].id).status == "expired"


def test_a_redemption_with_more_answers_than_questions() -> None:
    """The client chooses how many answers it sends: beyond ``ONE_STATEMENT_ANSWERS`` they are
    recorded one statement each on PostgreSQL, with the same result."""
    from mcp_common.store import ONE_STATEMENT_ANSWERS

    store = DjangoStore()
    now = time.time()
    state, _ = _state_and_question()
    questions = [_question(state.state_id, f"k{n}", now) for n in range(2)]
    store.save_request_state(state, questions)
    answers = {f"k{n}": ("accepted", f'{{"n": {n}}}') for n in range(ONE_STATEMENT_ANSWERS + 24)}
    args = (state.state_id, "Files", "tools/call", "delete_folder", "abc", None)
    assert store.consume_request_state(*args, now + 1, answers) is not None
    rows = {r.request_key: (r.status, r.answer) for r in store.elicitations_for_state(state.state_id)}
    assert rows == {"k0": ("accepted", '{"n": 0}'), "k1": ("accepted", '{"n": 1}')}
    assert store.consume_request_state(*args, now + 2, answers) is None


def test_inside_an_application_transaction_the_store_joins_it() -> None:
    from django.db import transaction

    store = DjangoStore()
    state, question = _state_and_question()
    with pytest.raises(RuntimeError), transaction.atomic():
        store.save_request_state(state, [question])
        raise RuntimeError("the view failed")
    assert store.get_elicitation(question.id) is None
    store.save_request_state(state, [question])
    assert store.get_elicitation(question.id) is not None


def test_expired_state_and_elicitations() -> None:
    store = DjangoStore()
    # An hour ahead of the clock: a running endpoint's heartbeat, which expires rows by the
    # clock, would otherwise race this test for its overdue row.
    now = time.time() + 3600
    state = RequestStateRecord(uuid.uuid4().hex, "Files", "tools/call", "t", "d", None, "v1.x", now - 10, now - 1)
    question = new_record(
        server_name="Files",
        tool="t",
        params={"message": "?"},
        request_key="k",
        principal=None,
        expires=now - 1,
        state_id=state.state_id,
    )
    store.save_request_state(state, [question])
    assert store.consume_request_state(state.state_id, "Files", "tools/call", "t", "d", None, now, {}) is None
    assert store.expire_elicitations(now) == 1
    assert store.get_elicitation(question.id).status == "expired"
    assert store.purge_expired(now) == 0  # no idle session, but the dead state is gone
    assert not store.consume_request_state(state.state_id, "Files", "tools/call", "t", "d", None, now - 5, {})


def test_worker_heartbeat() -> None:
    store = DjangoStore()
    assert store.worker_seen("w:1:a") is None
    store.beat_worker("w:1:a", 100.0)
    store.beat_worker("w:1:a", 200.0)
    assert store.worker_seen("w:1:a") == 200.0


def test_system_check_refuses_a_nested_elicitation_model() -> None:
    with override_settings(MCP={"SERVER": "tests.django.bad_server.mcp"}):
        errors = [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E004"]
    assert len(errors) == 1
    assert (
        "Elicitation schema field 'address' rendered as {'$ref': '#/$defs/Address'}, "
        "which is not a valid PrimitiveSchemaDefinition" in errors[0].msg
    )
    assert "tool 'register'" in errors[0].msg
    # The example project's servers (including those routed in its URLconf) all pass.
    assert not [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E004"]


def test_staff_review_and_complete_elicitations_in_the_admin() -> None:
    store = DjangoStore()
    sid = session(store)
    record = url_row(store, sid, "dep-admin")
    # Another server of the site asked under the same id: completing this row leaves it alone.
    namesake = url_row(store, session(store), "dep-admin", server_name="Library")
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/mcp_django/mcpelicitation/?status__exact=pending")
    assert page.status_code == 200
    assert b"dep-admin" in page.content and b"pay_deposit" in page.content
    assert client.get(f"/admin/mcp_django/mcpelicitation/{record.id}/change/").status_code == 200
    done = client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "complete_selected", "_selected_action": [record.id]},
        follow=True,
    )
    assert done.status_code == 200 and b"1 elicitation(s) completed." in done.content
    assert store.get_elicitation(record.id).status == "completed"
    assert store.get_elicitation(namesake.id).status == "pending"
    # The row's history says who completed it (Django's admin log), as for any admin change.
    from django.contrib.admin.models import LogEntry

    (entry,) = LogEntry.objects.filter(object_id=record.id)
    assert entry.user == staff and entry.is_change() and "completed" in entry.get_change_message()
    history = client.get(f"/admin/mcp_django/mcpelicitation/{record.id}/history/")
    assert b"Marked completed" in history.content
    # Selected again: nothing left to complete, and the message says why.
    again = client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "complete_selected", "_selected_action": [record.id]},
        follow=True,
    )
    assert b"0 elicitation(s) completed." in again.content
    assert b"1 selected elicitation(s) were not open URL questions" in again.content
    assert LogEntry.objects.filter(object_id=record.id).count() == 1
    assert client.get("/admin/mcp_django/mcpelicitation/add/").status_code == 403
    anonymous = Client().get("/admin/mcp_django/mcpelicitation/")
    assert anonymous.status_code == 302


def test_the_admin_names_the_user_who_was_asked_and_finds_questions_by_user() -> None:
    """Staff reviewing a question see who it was asked of by name, not ``django-user:17``, and
    find a user's questions by searching their name. One query names a page's users, however
    many rows it lists; a principal that is no user (a token's, a deleted user's) shows as is."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    store = DjangoStore()
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only")
    ada = User.objects.create_user("ada.lovelace", "ada@example.com")
    gone = User.objects.create_user("gone")
    gone_principal = f"django-user:{gone.pk}"
    gone.delete()
    rows = {
        "ada": url_row(store, None, "dep-ada", request_key="k-ada", principal=f"django-user:{ada.pk}"),
        "token": url_row(store, None, "dep-token", request_key="k-token", principal="token:ci-bot"),
        "gone": url_row(store, None, "dep-gone", request_key="k-gone", principal=gone_principal),
        "anonymous": url_row(store, None, "dep-anon", request_key="k-anon"),
    }
    client = Client()
    client.force_login(staff)

    def listed(query: str = "") -> tuple[str, int]:
        user_table = User._meta.db_table
        with CaptureQueriesContext(connection) as queries:
            page = client.get(f"/admin/mcp_django/mcpelicitation/{query}")
        assert page.status_code == 200
        return page.content.decode(), sum(user_table in q["sql"] and "IN (" in q["sql"] for q in queries)

    page, lookups = listed()
    assert '<td class="field-asked_by">ada.lovelace</td>' in page
    assert '<td class="field-asked_by">token:ci-bot</td>' in page
    assert f'<td class="field-asked_by">{gone_principal}</td>' in page
    assert '<td class="field-asked_by">-</td>' in page  # anonymous: Django's empty value
    assert lookups == 1
    # More users on the page, still one lookup.
    for n in range(5):
        user = User.objects.create_user(f"user{n}")
        url_row(store, None, f"dep-{n}", request_key=f"k-{n}", principal=f"django-user:{user.pk}")
    page, lookups = listed()
    assert '<td class="field-asked_by">user4</td>' in page and lookups == 1
    # Search by the user's name, or part of it: their questions, no one else's.
    page, _ = listed("?q=lovelace")
    assert "dep-ada" in page and "dep-token" not in page and "dep-1" not in page
    page, _ = listed("?q=ci-bot")  # the principal itself is searched as before
    assert "dep-token" in page and "dep-ada" not in page
    assert rows["ada"].id in listed("?q=ada.lovelace")[0]
    # The question's own page names the user too (and keeps the principal as written).
    for key, shown in (("ada", "ada.lovelace"), ("token", "token:ci-bot"), ("gone", gone_principal)):
        detail = client.get(f"/admin/mcp_django/mcpelicitation/{rows[key].id}/change/")
        assert detail.status_code == 200
        html = detail.content.decode()
        assert re.search(r'<div class="readonly">' + re.escape(shown) + "</div>", html), key
        assert rows[key].principal is None or rows[key].principal in html
    detail = client.get(f"/admin/mcp_django/mcpelicitation/{rows['anonymous'].id}/change/").content.decode()
    assert "asked_by" in detail and rows["anonymous"].principal is None


def test_the_admin_answers_a_nul_in_a_filter_an_id_or_a_selection_as_matching_nothing() -> None:
    """PostgreSQL text cannot hold NUL, and its driver refuses to look one up: such a filter,
    object id or selected row matches nothing, as on any database (not a 500)."""
    store = DjangoStore()
    record = url_row(store, session(store), "dep-nul")
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only"))
    for query in ("status__exact=%00", "server_name=%00", "mode__exact=form%00"):
        page = client.get(f"/admin/mcp_django/mcpelicitation/?{query}")
        assert page.status_code == 200 and b"dep-nul" not in page.content, query
    missing = client.get("/admin/mcp_django/mcpelicitation/x%00/change/")
    assert (missing.status_code, missing["Location"]) == (302, "/admin/")
    done = client.post(
        "/admin/mcp_django/mcpelicitation/", {"action": "complete_selected", "_selected_action": ["\x00"]}
    )
    assert done.status_code == 302
    assert store.get_elicitation(record.id).status == "pending"


@pytest.mark.parametrize(
    "query",
    [
        "created__year=99999999999999999999",
        "created__year=9999",
        "created__year=9999&created__month=12",
        "created__year=9999&created__month=12&created__day=31",
    ],
    ids=["year-too-large-for-c", "last-year", "last-month", "last-day"],
)
def test_the_admins_date_drill_down_answers_a_date_out_of_range_as_a_bad_filter(query: str) -> None:
    """Django's date hierarchy turns a year too large for a C long, or the last month or day
    of year 9999 (whose end is out of range), into an exception it does not catch: a 500 page
    for a hand-edited address. It is a bad filter, answered as Django answers the others."""
    store = DjangoStore()
    url_row(store, session(store), "dep-date")
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only"))
    page = client.get(f"/admin/mcp_django/mcpelicitation/?{query}")
    assert (page.status_code, page["Location"]) == (302, "/admin/mcp_django/mcpelicitation/?e=1")


@pytest.mark.parametrize("marked", [False, True], ids=["still-pending", "expired-meanwhile"])
def test_the_admin_does_not_complete_a_question_past_its_expiry_and_says_so(marked: bool) -> None:
    """A question still pending after its expiry (the heartbeat has not marked it yet) is not
    completed from the admin: staff read that it had expired, and its client hears nothing.
    One the heartbeat marks after the list was shown has dropped out of the list's filter by
    the time staff press the button, yet they selected it: they are told too, not left with a
    count one short. (A running endpoint's heartbeat may mark the first one meanwhile too.)"""
    store = DjangoStore()
    sid = session(store)
    late = url_row(store, sid, "dep-overdue", expires=time.time() + (60 if marked else -1))
    fresh = url_row(store, session(store), "dep-in-time", expires=time.time() + 3600)
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(staff)
    if marked:
        listed = client.get("/admin/mcp_django/mcpelicitation/?status__exact=pending")
        assert late.id.encode() in listed.content and fresh.id.encode() in listed.content
        assert store.expire_elicitations(time.time() + 120) == 1
    # Selected in the list of pending questions, as staff would look for what to complete.
    done = client.post(
        "/admin/mcp_django/mcpelicitation/?status__exact=pending",
        {"action": "complete_selected", "_selected_action": [late.id, fresh.id]},
        follow=True,
    )
    assert b"1 elicitation(s) completed." in done.content
    assert b"1 selected elicitation(s) had expired: not completed." in done.content
    assert store.get_elicitation(late.id).status == "expired"
    assert store.get_elicitation(fresh.id).status == "completed"
    assert store.events_after(sid, GET_STREAM, 0) == []


def test_example_payment_webhook_refuses_a_non_ascii_token_with_401() -> None:
    answer = Client().post(
        "/payments/webhook",
        json.dumps({"elicitation_id": "deposit-1"}),
        content_type="application/json",
        headers={"Authorization": "Bearer d\u00e9mo"},
    )
    assert answer.status_code == 401 and answer.json() == {"error": "unauthorized"}


WEBHOOK_BODIES = {
    "nested-past-the-recursion-limit": (b'{"elicitation_id":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400),
    "lone-surrogate": (b'{"elicitation_id":"deposit-\\ud800"}', 200),
    "nul": (b'{"elicitation_id":"deposit-\\u0000"}', 200),
}


@pytest.mark.parametrize(("body", "status"), WEBHOOK_BODIES.values(), ids=list(WEBHOOK_BODIES))
def test_example_payment_webhook_answers_json_whatever_the_body(body: bytes, status: int) -> None:
    answer = Client().post(
        "/payments/webhook",
        body,
        content_type="application/json",
        headers={"Authorization": "Bearer demo-webhook-token"},
    )
    assert answer.status_code == status, answer.content[:300]
    assert answer.json() == ({"completed": 0} if status == 200 else {"error": 'expected {"elicitation_id": "..."}'})


def test_purge_command_keeps_pending_questions() -> None:
    from io import StringIO
    from types import SimpleNamespace
    from unittest.mock import patch

    from django.core.management import call_command

    from mcp_django.management.commands import mcp_purge

    store = DjangoStore()
    old = time.time() - 40 * 86400
    # Overdue for the command, which runs an hour from now; not yet for a running endpoint's
    # heartbeat, which expires overdue rows too and would otherwise race the command for it.
    expires = time.time() + 1800
    rows = []
    for status in ("declined", "pending"):
        row = new_record(
            server_name="s",
            tool="t",
            params={"message": "?"},
            request_key=status,
            principal=None,
            expires=expires,
            state_id="1" * 32,
        )
        rows.append(row.__class__(**{**row.__dict__, "status": status, "created": old, "updated": old}))
    store.save_request_state(RequestStateRecord("1" * 32, "s", "tools/call", "t", "d", None, "x", old, old), rows)
    out = StringIO()
    in_an_hour = time.time() + 3600
    with patch.object(mcp_purge, "time", SimpleNamespace(time=lambda: in_an_hour)):
        call_command("mcp_purge", stdout=out)
    assert "1 old elicitation(s); marked 1 overdue elicitation(s) expired." in out.getvalue()
    assert [r.status for r in store.elicitations_for_state("1" * 32)] == ["expired"]


@pytest.mark.parametrize("days", ["-1", "nan", "inf"])
def test_purge_command_refuses_a_number_of_days_that_is_not_one_and_deletes_nothing(days: str) -> None:
    """``--elicitation-days -1`` (a typo) must not delete every answered question, the one a
    webhook completed a moment ago among them; nor may a value end in a traceback."""
    from django.core.management import CommandError, call_command

    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-purge")
    assert mcp_django.complete_elicitation("dep-purge") == 1
    with pytest.raises(CommandError, match=r"--elicitation-days must be a number of days, 0 or more"):
        call_command("mcp_purge", f"--elicitation-days={days}")
    assert store.get_elicitation(row.id).status == "completed"
    call_command("mcp_purge", "--elicitation-days=1e300")  # longer than time has run: all kept
    assert store.get_elicitation(row.id).status == "completed"
    call_command("mcp_purge", "--elicitation-days=0")  # 0: every answered question, as asked
    assert store.get_elicitation(row.id) is None


def test_celery_beat_runs_the_purge_as_a_task_named_for_its_schedule() -> None:
    """Beat schedules tasks, not management commands: ``mcp_django.purge`` does what
    ``mcp_purge`` does, reports what it deleted, and refuses a bad number of days as the
    command does, deleting nothing."""
    from mcp_django.tasks import purge_task

    assert purge_task.name == "mcp_django.purge"
    store = DjangoStore()
    sid = session(store)
    row = url_row(store, sid, "dep-beat")
    assert mcp_django.complete_elicitation("dep-beat") == 1
    with pytest.raises(ValueError, match=r"^elicitation_days must be a number of days, 0 or more"):
        purge_task.apply(kwargs={"elicitation_days": -1}).get()
    assert store.get_elicitation(row.id).status == "completed"
    kept = purge_task.apply().get()  # 30 days by default: a question answered now is kept
    assert kept == {"sessions": 0, "elicitations": 0, "expired": 0}
    assert store.get_elicitation(row.id).status == "completed"
    assert purge_task.apply(kwargs={"elicitation_days": 0}).get() == {"sessions": 0, "elicitations": 1, "expired": 0}
    assert store.get_elicitation(row.id) is None
    assert store.get_session(sid) is not None  # a live session is no business of the purge


def test_a_redemption_reaches_its_question_by_state_not_through_every_pending_row() -> None:
    """With thousands of questions pending, redeeming one handle must not walk them all:
    SQLite (no statistics) chose the status index for the answer's UPDATE until the
    ``(state_id, request_key)`` index existed."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the planner choice checked here is SQLite's")
    store = DjangoStore()
    now = time.time()
    states = []
    for n in range(300):
        state = RequestStateRecord(uuid.uuid4().hex, "Files", "tools/call", "t", "d", None, "v1.x", now, now + 60)
        form = {"mode": "form", "message": f"Sure {n}?", "requestedSchema": {"type": "object", "properties": {}}}
        question = new_record(
            server_name="Files",
            tool="t",
            params=form,
            request_key="k",
            principal=None,
            expires=now + 60,
            state_id=state.state_id,
        )
        store.save_request_state(state, [question])
        states.append((state, question))
    state, question = states[150]
    connection.ensure_connection()
    statements: list[str] = []
    connection.connection.set_trace_callback(statements.append)
    try:
        redeemed = store.consume_request_state(
            state.state_id, "Files", "tools/call", "t", "d", None, now, {"k": ("declined", None)}
        )
    finally:
        connection.connection.set_trace_callback(None)
    assert redeemed is not None
    assert store.get_elicitation(question.id).status == "declined"
    assert store.get_elicitation(states[151][1].id).status == "pending"
    # The answer, then the questions left unanswered: both by the state's index.
    updates = [s for s in statements if s.startswith("UPDATE") and "mcpelicitation" in s]
    assert len(updates) == 2, updates
    for update in updates:
        plan = " ".join(str(row) for row in connection.connection.execute("EXPLAIN QUERY PLAN " + update))
        assert "mcp_elicitation_state" in plan, (update, plan)


def test_completing_a_selected_question_leaves_other_users_questions_with_the_same_id_alone() -> None:
    """Staff complete the questions they selected: another user who asked under the same id has
    not paid because this one did, and their resolver's ``elicitation_completed`` must not say so."""
    store = DjangoStore()
    ada = url_row(store, session(store), "dep-shared", principal="user:ada")
    bob_sid = session(store)
    bob = url_row(store, bob_sid, "dep-shared", principal="user:bob")
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(staff)
    done = client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "complete_selected", "_selected_action": [ada.id]},
        follow=True,
    )
    assert b"1 elicitation(s) completed." in done.content
    assert store.get_elicitation(ada.id).status == "completed"
    assert store.get_elicitation(bob.id).status == "pending"
    assert [e for e in store.events_after(bob_sid, GET_STREAM, 0) if "dep-shared" in e.message] == []


def test_staff_who_may_only_view_elicitations_cannot_complete_them() -> None:
    """Completing a URL elicitation (a deposit marked paid) is a change: the admin's action is
    not offered to, nor run for, staff whose permission on the model is only to view it."""
    from django.contrib.auth.models import Permission

    store = DjangoStore()
    record = url_row(store, session(store), "dep-viewer")
    viewer = User.objects.create_user("viewer", "viewer@example.com", "pw-for-tests-only", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_mcpelicitation"))
    client = Client()
    client.force_login(viewer)
    page = client.get("/admin/mcp_django/mcpelicitation/")
    assert page.status_code == 200 and b"complete_selected" not in page.content
    client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "complete_selected", "_selected_action": [record.id]},
    )
    assert store.get_elicitation(record.id).status == "pending"

    # The model's change permission is the one that lets staff complete.
    viewer.user_permissions.add(Permission.objects.get(codename="change_mcpelicitation"))
    viewer = User.objects.get(pk=viewer.pk)  # a fresh permission cache
    client.force_login(viewer)
    client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "complete_selected", "_selected_action": [record.id]},
    )
    assert store.get_elicitation(record.id).status == "completed"


def close_database_threads(point: Any) -> None:
    """Close the connection each of the endpoint's database threads opened (each thread keeps
    its own): on PostgreSQL the test database cannot be dropped while one is open."""
    from django.db import connections

    threads = len(point._executor._threads)
    barrier = threading.Barrier(threads)

    def close() -> None:
        barrier.wait(10)  # one task on each thread: none may take a second
        connections.close_all()

    for future in [point._executor.submit(close) for _ in range(threads)]:
        future.result(10)


@pytest.mark.parametrize("tool", ["hello", "greet"])
@pytest.mark.parametrize("content", [{"nam": "Ada"}, None], ids=["missing-field", "no-content"])
def test_a_refused_answer_is_recorded_as_refused(tool: str, content: dict[str, str] | None) -> None:
    """The SDK refuses an answer that does not fit the schema: the ORM row says so."""
    from tests.core.test_elicitation import check_a_refused_answer_is_recorded_as_refused

    answer = {"action": "accept", **({"content": content} if content is not None else {})}
    check_a_refused_answer_is_recorded_as_refused(DjangoStore(), tool, answer, done=close_database_threads)


@pytest.mark.parametrize("tool", ["hello", "greet"])
def test_answers_to_questions_never_asked_cost_no_statements(tool: str) -> None:
    """A retry's ``inputResponses`` are the client's: thousands of answers to questions its
    state never asked (a megabyte of body) cost no database statement each, and the question
    that was asked is answered as usual."""
    from django.db import connection

    from tests.core.test_elicitation import ask, call, endpoint

    if connection.vendor != "sqlite":
        pytest.skip("counts the statements SQLite's driver runs")
    store = DjangoStore()
    point = endpoint(store)
    statements: list[str] = []
    try:
        key, _, handle = ask(point, tool)
        answers: dict[str, Any] = {f"unasked-{n}": {"action": "decline"} for n in range(2000)}
        answers[key] = {"action": "accept", "content": {"name": "Ada"}}
        connection.ensure_connection()  # the request's thread is this one: so is its connection
        connection.connection.set_trace_callback(statements.append)
        try:
            status, body = call(point, tool, {}, inputResponses=answers, requestState=handle)
        finally:
            connection.connection.set_trace_callback(None)
        assert status == 200 and body["result"]["content"][0]["text"].endswith("Ada!"), body
        assert len(statements) < 20, len(statements)
        (row,) = MCPElicitation.objects.filter(request_key=key)
        assert (row.status, json.loads(row.answer)) == ("accepted", {"name": "Ada"})
    finally:
        close_database_threads(point)
        point.close()


def test_a_long_answer_is_recorded() -> None:
    """An answer longer than MySQL's TEXT is recorded whole by the ORM."""
    from tests.core.test_elicitation import check_a_long_answer_is_recorded

    check_a_long_answer_is_recorded(DjangoStore(), done=close_database_threads)


def test_a_long_principal_is_bound_like_a_short_one() -> None:
    """A principal longer than the ORM rows' column binds questions and sessions."""
    from tests.core.test_elicitation import check_a_long_principal_is_bound_like_a_short_one

    check_a_long_principal_is_bound_like_a_short_one(DjangoStore(), done=close_database_threads)


def test_a_question_with_a_long_key_round_trips() -> None:
    """A question keyed longer than the ORM row's column asks and is answered."""
    from tests.core.test_elicitation import check_a_question_with_a_long_key_round_trips

    check_a_question_with_a_long_key_round_trips(DjangoStore(), done=close_database_threads)


def test_a_round_of_many_questions_is_recorded() -> None:
    """More questions in one round than one PostgreSQL statement can carry, by the ORM's store."""
    from tests.core.test_elicitation import check_a_round_of_many_questions_is_recorded

    check_a_round_of_many_questions_is_recorded(DjangoStore(), done=close_database_threads)


def test_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras() -> None:
    """A tool named longer than the ORM row's column, or with a NUL, asks on either era."""
    from tests.core.test_elicitation import check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras

    check_a_tool_whose_name_a_row_cannot_keep_asks_on_both_eras(DjangoStore(), done=close_database_threads)


@pytest.mark.parametrize("tool", ["interview", "interview_or_guess", "hello"])
def test_a_refused_legacy_answer_is_recorded_as_refused(tool: str) -> None:
    """On the legacy wire too: the SDK refuses an answer that does not fit the schema, the ORM row says so."""
    from tests.core.test_elicitation import check_a_refused_legacy_answer_is_recorded_as_refused

    answer = {"action": "accept", "content": {}}
    check_a_refused_legacy_answer_is_recorded_as_refused(DjangoStore(), tool, answer, done=close_database_threads)


def test_the_admin_does_not_delete_questions() -> None:
    """The admin reviews questions and completes URL ones: a superuser's "Delete" (the button
    on a question's page, "Delete selected" in the list) removed a pending question from under
    the conversation waiting on it, with the record of what its user was asked, and a
    webhook's completion then found nothing to complete and told the client nothing. Rows go
    when ``mcp_purge`` removes ended ones, as in the Flask panel."""
    store = DjangoStore()
    sid = session(store)
    record = url_row(store, sid, "dep-delete")
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only"))
    page = client.get("/admin/mcp_django/mcpelicitation/")
    assert page.status_code == 200 and b"delete_selected" not in page.content
    assert b"/delete/" not in client.get(f"/admin/mcp_django/mcpelicitation/{record.id}/change/").content
    assert client.get(f"/admin/mcp_django/mcpelicitation/{record.id}/delete/").status_code == 403
    assert client.post(f"/admin/mcp_django/mcpelicitation/{record.id}/delete/", {"post": "yes"}).status_code == 403
    client.post(
        "/admin/mcp_django/mcpelicitation/",
        {"action": "delete_selected", "_selected_action": [record.id], "post": "yes"},
    )
    assert store.get_elicitation(record.id) is not None
    assert mcp_django.complete_elicitation("dep-delete") == 1
    assert [e for e in store.events_after(sid, GET_STREAM, 0) if "dep-delete" in e.message]


def test_a_search_longer_than_sqlite_compares_is_refused_not_a_500() -> None:
    """SQLite refuses a LIKE pattern past 50,000 bytes ("pattern too complex"): a long text
    pasted into the admin's search box was a 500 page. There it lists nothing and says why;
    other databases search it; a search within the limit is searched everywhere."""
    from django.db import connection

    store = DjangoStore()
    url_row(store, session(store), "dep-" + "x" * 200)
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw-for-tests-only"))
    page = client.get("/admin/mcp_django/mcpelicitation/", {"q": "y" * 50_000})
    assert page.status_code == 200
    if connection.vendor == "sqlite":
        assert b"The search is too long" in page.content
    found = client.get("/admin/mcp_django/mcpelicitation/", {"q": "x" * 200})
    assert found.status_code == 200 and b"dep-xxx" in found.content
