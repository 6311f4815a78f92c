"""What a conversation keeps between two HTTP requests, behind small protocols.

Everything here is synchronous: the ORM-backed implementations (Django, SQLAlchemy) are
synchronous, and the pipeline calls them from worker threads, never from its event loop.
:class:`MemoryStore` exists for unit tests of the core only: it is not shared between
processes, so it cannot serve a multi-worker deployment.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mcp_common.jsonrpc import utf8_safe

if TYPE_CHECKING:
    from mcp_common.checkpoint import WalCheckpointer

T = TypeVar("T")


def missing_table(error: BaseException | None, dialect: str) -> bool:
    """Whether the driver's ``error`` says a table or column does not exist: on the MCP tables,
    a database the framework's migration never ran on (or not since an upgrade), which the
    adapters then say in the traceback, where "no such table" alone does not."""
    if dialect == "sqlite":
        text = str(error)
        return text.startswith(("no such table", "no such column")) or "has no column named" in text
    if dialect == "postgresql":
        return getattr(error, "sqlstate", None) in ("42P01", "42703")  # undefined table, column
    if dialect in ("mysql", "mariadb"):
        args = getattr(error, "args", ())
        return bool(args) and args[0] in (1146, 1054)  # no such table, unknown column
    return False


def serial_writes(
    lock_of: Callable[[Any], SQLiteWriteLock | None], *, in_memory_only: bool = False
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a store's write methods so that writers take turns on a lock.

    SQLite admits one writer; a writer that finds the file locked sleeps in growing steps
    (1, 2, 5, 10 ... 100 ms) before trying again. Writers queueing on a lock (a
    :class:`SQLiteWriteLock`: a mutex for the threads of a worker, a file lock between workers)
    are handed over in microseconds instead.
    ``lock_of(store)`` gives the lock to take, or ``None`` (a database with concurrent writers).

    ``in_memory_only``: take the lock only when the database is in memory, for a store's
    reads. The connections to such a database share one cache, where a reader that meets a
    table another connection is writing fails at once ("database table is locked": SQLite's
    busy timeout does not apply), or share one connection (SQLAlchemy's ``StaticPool``), where
    one thread's statement lands in another's transaction. Django's test database on SQLite
    is one, so every store call takes turns there; a file database's readers never wait.
    """

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(store: Any, *args: Any, **kwargs: Any) -> T:
            lock = lock_of(store)
            if lock is None:
                return fn(store, *args, **kwargs)
            with lock.for_reads() if in_memory_only else lock:
                return fn(store, *args, **kwargs)

        return wrapper

    return decorate


class SQLiteWriteLock:
    """Lets the store's writers to one SQLite file take turns, across threads and processes.

    A thread lock, then (for a file database, where ``fcntl`` exists) an exclusive ``flock``
    on ``<database>-mcp.lock`` beside it: a waiting worker is woken by the kernel the moment
    the lock is free, instead of sleeping in SQLite's busy handler. Re-entrant within a
    thread; a forked child opens its own lock file (an inherited descriptor would share its
    parent's lock). Writers that do not take it (the application's own) still meet SQLite's
    lock, as before.

    ``checkpoint_interval`` (seconds, 0: off): on a file database, a
    :class:`~mcp_common.checkpoint.WalCheckpointer` copies the write-ahead log back into the
    file from a thread of its own after the writers' turns, at most once per interval, instead
    of SQLite doing it inside whichever commit takes the log past its limit.
    """

    def __init__(self, database: str | None, *, in_memory: bool | None = None, checkpoint_interval: float = 0) -> None:
        self._thread = threading.RLock()
        self.in_memory = _is_memory_database(database) if in_memory is None else in_memory
        """Whether the database lives in this process's memory (no file to lock beside)."""
        self._path = f"{database}-mcp.lock" if not self.in_memory and _can_flock() else None
        self.checkpointer: WalCheckpointer | None = None
        if checkpoint_interval and not self.in_memory and database:
            from mcp_common.checkpoint import WalCheckpointer

            self.checkpointer = WalCheckpointer(database, checkpoint_interval)
        self._fd: int | None = None
        self._pid = 0
        self._depth = 0

    def for_reads(self) -> contextlib.AbstractContextManager[Any]:
        """What a read takes: this lock on a database in memory (see :func:`serial_writes`),
        nothing on a file, whose readers never wait."""
        return self if self.in_memory else contextlib.nullcontext()

    def __enter__(self) -> SQLiteWriteLock:
        self._thread.acquire()
        try:
            if self._depth == 0 and self._path is not None:
                import fcntl

                fcntl.flock(self._descriptor(), fcntl.LOCK_EX)
        except BaseException:
            self._thread.release()
            raise
        self._depth += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        last = self._depth == 0
        try:
            if last and self._fd is not None:
                import fcntl

                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread.release()
        if last and self.checkpointer is not None:
            # After the turn is handed on: the checkpoint never holds up the next writer.
            self.checkpointer.wrote()

    def _descriptor(self) -> int:
        import os

        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)  # type: ignore[arg-type]
            self._pid = os.getpid()
        return self._fd


def _is_memory_database(database: str | None) -> bool:
    return not database or database == ":memory:" or database.startswith("file::memory:") or "mode=memory" in database


def _can_flock() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:  # not on this platform: the thread lock alone
        return False
    return True


GET_STREAM = "get"
"""The stream key of a session's standalone (GET) stream."""


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    protocol_version: str
    client_params: str
    """The client's ``initialize`` params, as JSON."""
    principal: str | None
    server_name: str
    created: float
    last_seen: float


@dataclass(frozen=True)
class EventRecord:
    event_id: int
    """Monotonic within the store; also the SSE event id's numeric part."""
    session_id: str
    stream_key: str
    message: str
    """The JSON-RPC message, as JSON."""
    final: bool
    """The message is the response that ends its stream."""


def stream_lock_key(session_id: str, stream_key: str) -> int:
    """The key of the PostgreSQL advisory lock that appends to one stream take in turn (on
    MySQL and MariaDB, of the named lock of :func:`take_stream_turn`).

    An event id comes from a sequence: taken when the row is inserted, visible when its
    transaction commits. Two workers appending to one stream (the GET stream is written by
    any worker) could commit ids 10 and 11 in the order 11, 10; a reader polling "events after
    the last id I delivered" in between delivers 11 and never sees 10. With the lock taken in
    the INSERT statement before its row is made, the next append to the stream takes its id
    only after the previous one committed. A transaction-scoped lock, released at commit: no
    extra round trip, and appends to other streams never wait. A 64-bit digest: a key the
    application's own advisory locks would share is as likely as a guessed hash collision.
    """
    digest = hashlib.blake2b(f"{session_id}\x00{stream_key}".encode(), digest_size=8, person=b"mcp-stream")
    return int.from_bytes(digest.digest(), "big", signed=True)


STREAM_TURN_TIMEOUT = 30
"""Seconds a MySQL/MariaDB append waits for its stream's turn before it fails."""


def stream_turn_name(session_id: str, stream_key: str) -> str:
    """The name of the stream's MySQL/MariaDB named lock (server-wide, so a digest, not the ids)."""
    return f"mcp-stream:{stream_lock_key(session_id, stream_key) & (2**64 - 1):016x}"


def take_stream_turn(cursor: Any, session_id: str, stream_key: str) -> str:
    """MySQL and MariaDB: wait for the stream's turn to append (a named lock, ``GET_LOCK``),
    on a DB-API ``cursor`` with ``%s`` parameters; the lock's name, for :func:`leave_stream_turn`.

    InnoDB takes an ``AUTO_INCREMENT`` id at the INSERT and shows it at commit, as PostgreSQL's
    sequence does (see :func:`stream_lock_key`). A named lock belongs to the connection, not
    to the transaction: the caller takes it before the INSERT and leaves it after the commit
    (a connection that dies leaves it too). Raises ``TimeoutError`` after
    :data:`STREAM_TURN_TIMEOUT` seconds.
    """
    name = stream_turn_name(session_id, stream_key)
    cursor.execute("SELECT GET_LOCK(%s, %s)", [name, STREAM_TURN_TIMEOUT])
    row = cursor.fetchone()
    if row is None or row[0] != 1:
        raise TimeoutError(
            f"the stream {stream_key!r} of session {session_id!r} stayed locked for {STREAM_TURN_TIMEOUT} s"
        )
    return name


def leave_stream_turn(cursor: Any, name: str) -> None:
    """Let the next append to the stream go (after the commit of this one)."""
    cursor.execute("DO RELEASE_LOCK(%s)", [name])


MAX_CALL_ID = 255
"""Characters a question's row keeps of its asking call's JSON-RPC id, as JSON (``call_id``)."""
MAX_ELICITATION_ID = 255
"""Characters a question's row keeps of a URL question's ``elicitationId``."""
MAX_REQUEST_KEY = 200
"""Characters a question's row keeps of its key (``request_key``)."""
MAX_PRINCIPAL = 255
"""Characters a session's, question's or request state's row keeps of its principal."""
MAX_TOOL = 200
"""Characters a question's row keeps of its tool's name (``tool``)."""
MAX_SERVER_NAME = 200
"""Characters a session's, question's or request state's row keeps of its server's name (the
name is checked at start-up: it is compared, not only kept)."""


def storable(text: str) -> bool:
    """Whether every supported database can hold ``text``: no NUL (PostgreSQL text cannot) and
    no lone surrogate (no UTF-8 encoding, so no driver, can). JSON text may carry either, so
    a client's text may; a key with one matches no row, and never reaches a driver."""
    return "\x00" not in text and (text.isascii() or utf8_safe(text))


def storable_text(text: str) -> str:
    """``text`` as every database can hold it: each NUL and lone surrogate as U+FFFD, the
    replacement character (what a tool's question built from a client's text is stored as,
    and looked up by)."""
    if storable(text):
        return text
    return "".join("\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char for char in text)


def storable_key(key: str, limit: int = MAX_REQUEST_KEY) -> str:
    """A key as a row keeps it and is found by: as it is when every database can hold it and
    it fits its column (``limit``), else its start (:func:`storable_text`) and a digest of the
    whole, in ``limit`` characters at most: two keys that differ only in a NUL or a lone
    surrogate (both kept as U+FFFD), or beyond the column, stay two keys.

    For a question's key (an ``inputRequests`` key, a server-to-client request id: the tool's
    to choose, and it may build it from a client's text) and a principal (the application's
    string, :data:`MAX_PRINCIPAL`)."""
    if len(key) <= limit and storable(key):
        return key
    text = storable_text(key)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{text[: limit - len(digest) - 1]}#{digest}"


def new_row_id() -> str:
    """A key for a new elicitation or request-state row: 32 hex digits that sort by creation
    time (a version 7 UUID: 48 bits of Unix milliseconds, then 74 random bits).

    A random key (``uuid4``) puts every insert at a random page of the primary-key index, and
    SQLite's write-ahead log then writes a whole page per index touched; a time-ordered key
    appends to the page last written. Measured on SQLite with 30,000 rows, saving a question
    (two rows) took 169 us with random keys and 96 us with these. PostgreSQL's B-trees prefer
    them for the same reason. Handles stay unforgeable: they carry an HMAC of the key.
    """
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (millis & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76
        | ((rand >> 62) & 0xFFF) << 64
        | 0b10 << 62
        | (rand & ((1 << 62) - 1))
    )
    return f"{value:032x}"


@dataclass(frozen=True)
class PendingRequestRecord:
    session_id: str
    request_id: str
    method: str
    params: str
    response: str | None
    """The client's JSON-RPC response (result or error), as JSON, once it has arrived."""
    created: float


TIME_FIELDS = frozenset({"created", "updated", "expires", "consumed", "last_seen"})
"""Record fields holding epoch seconds (stored as timestamps)."""


def column_values(record: Any, to_time: Callable[[float], Any]) -> dict[str, Any]:
    """A record's fields as a row's column values, its times converted by ``to_time``."""
    values = dict(record.__dict__)
    for name in TIME_FIELDS.intersection(values):
        if values[name] is not None:
            values[name] = to_time(values[name])
    return values


def record_of(cls: type[T], row: Any) -> T:
    """The record ``cls`` of a row read back (its attributes named as the record's fields), its
    times as epoch seconds: the reverse of :func:`column_values`."""
    values = {field.name: getattr(row, field.name) for field in fields(cls)}  # type: ignore[arg-type]
    for name in TIME_FIELDS.intersection(values):
        if values[name] is not None:
            values[name] = values[name].timestamp()
    return cls(**values)


ELICITATION_STATUSES = ("pending", "accepted", "declined", "cancelled", "completed", "expired")
"""What became of an elicitation: ``pending`` until the user answers (``accepted``,
``declined``, ``cancelled``); a URL-mode one becomes ``completed`` when
:func:`~mcp_common.elicitation.complete_elicitation` is called; ``expired`` when nobody
answered in time."""

ONE_STATEMENT_ANSWERS = 16
"""Most answers a redemption records in the same statement as its claim (PostgreSQL). The
client chooses how many ``inputResponses`` it sends: more than this many are recorded one
statement each, so the statements built (and cached) per answer count stay few."""

ONE_STATEMENT_QUESTIONS = 16
"""Most questions a round saves in the same statement as its request state (PostgreSQL). A
tool may ask as many as its client gives it items: more than this many are saved by the
stepwise inserts, so the statements built (and cached) per question count stay few, and no
statement outgrows PostgreSQL's 65,535 parameters (some 3,100 questions)."""

UNANSWERED_DETAIL = "The client retried without answering it"
"""``detail`` of a 2026-07-28 question left out of the retry that redeemed its request state:
the row is ``expired`` then (the state is spent, so no later retry can answer it; if the tool
still needs the answer, the next round asks again, in a row of its own)."""

REFUSED_DETAIL = "The answer did not fit the requested schema: the tool never received it"
"""``detail`` of a question whose accepted answer the SDK refused (no content, or content the
requested schema rejects), on either wire: the row is ``cancelled`` then, as the tool went on
(or failed) without the answer; ``answer`` keeps what the client sent."""

OPEN_STATUSES = ("pending", "accepted")
"""Statuses a URL-mode elicitation can be completed from (unless it is :func:`overdue`)."""

ANSWERED_OPEN_STATUSES = ("accepted",)
"""The :data:`OPEN_STATUSES` an :func:`overdue` row can still be completed from: answered
after completion read it pending."""


def overdue(status: str, expires: float, now: float) -> bool:
    """Whether ``expire_elicitations(now)`` expires a row in this status with this expiry: one
    still pending after its expiry (an answered one is left to its completion).

    Completion treats such a row as the heartbeat would have left it, expired: which of the
    two runs first must not decide whether a late question is completed.
    """
    return status == "pending" and expires < now


def purge_cutoff(now: float, days: float) -> float:
    """The time before which the purge commands delete answered questions kept ``days`` days
    (no earlier than the epoch: a longer time keeps them all). ``ValueError`` for a number of
    days that is negative or not finite: a typo must not delete every answered question."""
    if not math.isfinite(days) or days < 0:
        raise ValueError(f"must be a number of days, 0 or more, not {days!r}")
    return max(0.0, now - days * 86400)


def purge_store(store: SessionStore, session_ttl: float, elicitation_days: float, now: float) -> dict[str, int]:
    """What the purge commands (``mcp_purge``, ``flask mcp purge``) and the Celery task do:
    delete legacy sessions idle past ``session_ttl`` (with their event logs) and expired request
    states, mark questions past their deadline expired, then delete answered, expired or
    completed questions older than ``elicitation_days``. Pending questions are never deleted.
    ``ValueError`` for a number of days that is negative or not finite, before anything is
    deleted. How many rows of each kind went."""
    cutoff = purge_cutoff(now, elicitation_days)
    sessions = store.purge_expired(now - session_ttl)
    expired = store.expire_elicitations(now)
    return {"sessions": sessions, "elicitations": store.purge_elicitations(cutoff), "expired": expired}


SQLITE_LIKE_LIMIT = 50_000
"""The longest ``LIKE`` pattern SQLite compares, in bytes (its default
``SQLITE_MAX_LIKE_PATTERN_LENGTH``): a longer one is an error, "pattern too complex"."""


def sqlite_cannot_search(term: str) -> bool:
    """Whether SQLite refuses to search text for ``term`` (``LIKE '%term%'``, with ``\\``,
    ``%`` and ``_`` escaped, as the review pages search): its pattern is too long."""
    escaped = sum(term.count(char) for char in "\\%_")
    return len(term.encode("utf-8", "surrogatepass")) + escaped + 2 > SQLITE_LIKE_LIMIT


class _Identified(Protocol):
    @property
    def elicitation_id(self) -> str | None: ...

    @property
    def server_name(self) -> str: ...

    @property
    def principal(self) -> str | None: ...


R = TypeVar("R", bound=_Identified)


def exactly(rows: Iterable[R], elicitation_id: str, server_name: str | None) -> list[R]:
    """The rows (anything with ``elicitation_id`` and ``server_name`` attributes) a lookup by
    ``elicitation_id`` (and ``server_name``) found that carry exactly these values. The SQL
    lookup matches by the column's collation, case-insensitive and blind to trailing spaces on
    MySQL and MariaDB by default (and still uses its index there)."""
    return [
        row
        for row in rows
        if row.elicitation_id == elicitation_id and (server_name is None or row.server_name == server_name)
    ]


ANY_PRINCIPAL: Any = object()
"""For ``complete_elicitations``: whoever asked (a webhook, a task, staff)."""


def asked_by(rows: Iterable[R], principal: Any) -> list[R]:
    """The rows (anything with a ``principal`` attribute) that ``principal`` asked; all of them
    for :data:`ANY_PRINCIPAL` (``None`` is the anonymous principal)."""
    return [row for row in rows if principal is ANY_PRINCIPAL or row.principal == principal]


def notified_sessions(moved: Iterable[ElicitationRecord]) -> list[str]:
    """The sessions a completion that moved these rows notifies: each once, in one order (so
    that two completions take their streams' turns in the same order)."""
    return sorted({row.session_id for row in moved if row.session_id})


def complete_rows(store: SessionStore, rows: Sequence[ElicitationRecord], now: float) -> list[ElicitationRecord]:
    """Complete these rows with one guarded update each (of two workers completing one row,
    it moves for exactly one); the rows that moved. An :func:`overdue` row is expired instead,
    and completed only if it was answered meanwhile (its expiry never changes, so the row's
    read tells which update to try)."""
    moved = []
    for row in rows:
        if row.status not in OPEN_STATUSES:
            continue
        from_statuses = OPEN_STATUSES
        if overdue(row.status, row.expires, now):
            if store.update_elicitation(row.id, "expired", now):
                continue
            from_statuses = ANSWERED_OPEN_STATUSES
        if store.update_elicitation(row.id, "completed", now, from_statuses=from_statuses):
            moved.append(replace(row, status="completed", updated=now))
    return moved


# -- a write run again after its connection was lost ------------------------------------------
# The Django and SQLAlchemy stores run a call once more when its connection went bad (a
# database restart). The connection can also die after the database committed the call's
# write and before its acknowledgement arrived: the re-run then meets the write already made.
# These re-runs recognise it; a call that meets no error runs no statement more.

Rerun = Callable[..., Any]
"""How a store method runs the second time: ``rerun(method, store, *args, **kwargs)``, which
calls ``method(store, *args, **kwargs)``."""


def rerun_insert(conflict: type[BaseException], written: Callable[..., bool]) -> Rerun:
    """The re-run of an insert keyed by a random id (:func:`new_row_id`, ``uuid4``): no other
    call writes that key, so a ``conflict`` (the driver's integrity error) on it is the first
    attempt's committed row, and the call a success, when ``written(store, *args, **kwargs)``
    finds that row as this call wrote it. Any other conflict (another row, another
    constraint) is raised."""

    def rerun(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except conflict:
            if written(*args, **kwargs):
                return None
            raise

    return rerun


def rerun_claim(claimed: Callable[..., Any]) -> Rerun:
    """The re-run of a guarded ``UPDATE`` (the first answer wins, a handle is used once): after
    a first attempt that committed, the re-run finds nothing left to claim and returns what a
    refused claim returns (``None``, ``False``). Then ``claimed(store, *args, **kwargs)`` gives
    what the first attempt returned when the row holds exactly what this call wrote, or the
    refusal again."""

    def rerun(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs) or claimed(*args, **kwargs)

    return rerun


def same_row(found: Any, record: Any) -> bool:
    """Whether ``found``, read back, holds what ``record`` wrote (times aside: epoch seconds
    come back from a timestamp column rounded to its precision)."""
    return all(getattr(found, name) == value for name, value in vars(record).items() if name not in TIME_FIELDS)


def session_written(store: SessionStore, record: SessionRecord) -> bool:
    """``create_session(record)`` committed (for :func:`rerun_insert`)."""
    found = store.get_session(record.session_id)
    return found is not None and same_row(found, record)


def pending_written(
    store: SessionStore,
    session_id: str,
    request_id: str,
    method: str,
    params: str,
    elicitation: ElicitationRecord | None = None,
) -> bool:
    """``create_pending(...)`` committed (for :func:`rerun_insert`); its elicitation row, if
    any, was written in the same transaction."""
    found = store.get_pending(session_id, request_id)
    return found is not None and (found.method, found.params) == (method, params)


def answer_recorded(
    store: SessionStore,
    session_id: str,
    request_id: str,
    response: str,
    status: str | None = None,
    answer: str | None = None,
) -> bool:
    """``answer_pending(...)`` won (for :func:`rerun_claim`): the request holds exactly this
    answer. Its elicitation row's outcome was recorded in the same transaction."""
    found = store.get_pending(session_id, request_id)
    return found is not None and found.response == response


def state_saved(store: SessionStore, state: RequestStateRecord, elicitations: list[ElicitationRecord]) -> bool:
    """``save_request_state(...)`` committed (for :func:`rerun_insert`); its elicitation rows
    were written in the same transaction."""
    found = store.get_request_state(state.state_id)
    return found is not None and same_row(found, state)


def state_redeemed(
    store: SessionStore,
    state_id: str,
    server_name: str,
    method: str,
    target: str,
    args_digest: str,
    principal: str | None,
    now: float,
    answers: dict[str, tuple[str, str | None]],
) -> RequestStateRecord | None:
    """What ``consume_request_state(...)`` returned when it committed (for :func:`rerun_claim`),
    else ``None``. The claim marks the state consumed at this call's own moment: bound to this
    request and spent at that moment (to the column's microsecond), it was spent by this call,
    its answers recorded with it."""
    found = store.get_request_state(state_id)
    if (
        found is None
        or found.consumed is None
        or _microseconds(found.consumed) != _microseconds(now)
        or (found.server_name, found.method, found.target, found.args_digest, found.principal)
        != (server_name, method, target, args_digest, principal)
    ):
        return None
    return replace(found, consumed=now)


def _microseconds(moment: float) -> dt.datetime:
    """A moment as a timestamp column keeps it (to the microsecond)."""
    return dt.datetime.fromtimestamp(moment, dt.UTC)


@dataclass(frozen=True)
class ElicitationRecord:
    """One question asked to a user, in either protocol era."""

    id: str
    server_name: str
    tool: str | None
    session_id: str | None
    """The legacy session that asked (``None`` on the 2026-07-28 wire)."""
    state_id: str | None
    """The request-state handle whose round asked (``None`` on the legacy wire)."""
    request_key: str
    """Legacy: the server-to-client request id. 2026-07-28: the ``inputRequests`` key."""
    principal: str | None
    mode: str
    """``form`` or ``url``."""
    message: str
    requested_schema: str | None
    """The form's JSON Schema, as JSON (form mode)."""
    url: str | None
    elicitation_id: str | None
    status: str
    answer: str | None
    """The submitted form content, as JSON (accepted form elicitations)."""
    detail: str | None
    """Why the elicitation ended without a user's answer, or what became of its call."""
    created: float
    updated: float
    expires: float
    owner: str | None = None
    """The worker (``host:pid:nonce``) whose tool call waits for the answer (legacy)."""
    stream_key: str | None = None
    """The SSE stream the question was sent on (legacy)."""
    call_id: str | None = None
    """The JSON-RPC id (as JSON) of the client's call that asked (legacy)."""


@dataclass(frozen=True)
class RequestStateRecord:
    """A 2026-07-28 ``requestState``, kept server-side behind a single-use handle."""

    state_id: str
    server_name: str
    method: str
    target: str
    """The tool name (``resources/read``: the URI) the state is bound to."""
    args_digest: str
    principal: str | None
    sealed: str
    """The SDK's sealed token, returned to the SDK when the handle is redeemed."""
    created: float
    expires: float
    consumed: float | None = None


class SessionStore(Protocol):
    """Legacy-era sessions, their SSE event log and their pending server-to-client requests;
    elicitations of both eras; 2026-07-28 request states; worker heartbeats."""

    def create_session(self, record: SessionRecord) -> None: ...

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    def touch_session(self, session_id: str, now: float) -> None: ...

    def delete_session(self, session_id: str) -> bool:
        """Forget the session, its events and its pending requests; whether it existed."""
        ...

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        """Append to the session's event log and return the event id.

        The events of one stream become visible in the order of their ids, whatever worker
        appends them: a reader that has seen id ``n`` never finds a new event of that stream
        below ``n`` later (see :func:`stream_lock_key`)."""
        ...

    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        """The stream's events with ids greater than ``after``, oldest first."""
        ...

    def has_stream(self, session_id: str, stream_key: str) -> bool: ...

    def get_cursor(self, session_id: str) -> int:
        """The last event id a GET stream delivered for the session (0 for none)."""
        ...

    def set_cursor(self, session_id: str, event_id: int) -> None: ...

    def create_pending(
        self,
        session_id: str,
        request_id: str,
        method: str,
        params: str,
        elicitation: ElicitationRecord | None = None,
    ) -> None:
        """Record a server-to-client request (and, for ``elicitation/create``, its
        elicitation row) in one transaction."""
        ...

    def answer_pending(
        self,
        session_id: str,
        request_id: str,
        response: str,
        status: str | None = None,
        answer: str | None = None,
    ) -> bool:
        """Record the client's answer; ``False`` when no such request is waiting (unknown, or
        already answered: the first answer wins). ``status``/``answer`` update the request's
        elicitation row, if it has one, in the same transaction."""
        ...

    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None: ...

    def answered_since(self, since: float) -> list[tuple[str, str, str]]:
        """``(session_id, request_id, response)`` of the pending requests answered at or after
        ``since``: one query per poll serves every tool of a process that waits for an answer
        another worker may have received."""
        ...

    def pending_keys(self, session_ids: Sequence[str]) -> set[tuple[str, str]]:
        """``(session_id, request_id)`` of the pending requests of these sessions, for the
        sessions that still exist. A row whose session is gone does not count: a DELETE takes
        the session's rows with it, but a row written while the DELETE's transaction was open
        (after its DELETE of pending rows, before its commit) escapes it, and its worker, which
        read the session before that commit, learns of the end only here."""
        ...

    def delete_pending(self, session_id: str, request_id: str) -> None: ...

    def purge_expired(self, older_than: float) -> int:
        """Delete sessions idle since before ``older_than``; how many. Events written before it
        for a session that no longer exists (a completion's notification to a session that
        ended meanwhile) go too."""
        ...

    # -- elicitations ------------------------------------------------------------------------

    def get_elicitation(self, record_id: str) -> ElicitationRecord | None: ...

    def find_elicitations(self, elicitation_id: str, server_name: str | None = None) -> list[ElicitationRecord]:
        """Rows asked with this URL-mode ``elicitationId``, oldest first."""
        ...

    def update_elicitation(
        self,
        record_id: str,
        status: str,
        now: float,
        *,
        detail: str | None = None,
        from_statuses: tuple[str, ...] = ("pending",),
        without_detail: bool = False,
    ) -> bool:
        """Move a row to ``status`` if it is in one of ``from_statuses`` (and, with
        ``without_detail``, has no detail yet: of several workers claiming it, one wins);
        whether it moved."""
        ...

    def complete_elicitations(
        self,
        elicitation_id: str,
        now: float,
        server_name: str | None = None,
        *,
        principal: Any = ANY_PRINCIPAL,
        notification: str | None = None,
    ) -> list[ElicitationRecord]:
        """Mark the open rows with this ``elicitationId`` (that ``principal`` asked) completed;
        the rows that moved. An :func:`overdue` one is marked expired instead (and is not among
        them). ``notification``: appended to the GET stream of each session whose row moved
        (:func:`notified_sessions`), in the same transaction as the rows' updates. A completion
        recorded without its notification would be lost for good: its retry (Celery's
        redelivery, a webhook sent again) finds nothing open, and tells nobody."""
        ...

    def expire_elicitations(self, now: float) -> int:
        """Mark pending rows whose expiry has passed as expired; how many."""
        ...

    # -- 2026-07-28 request state ------------------------------------------------------------

    def save_request_state(self, state: RequestStateRecord, elicitations: list[ElicitationRecord]) -> None:
        """Store a state and the elicitations its round asked, in one transaction."""
        ...

    def consume_request_state(
        self,
        state_id: str,
        server_name: str,
        method: str,
        target: str,
        args_digest: str,
        principal: str | None,
        now: float,
        answers: dict[str, tuple[str, str | None]],
    ) -> RequestStateRecord | None:
        """Redeem a handle once: mark it consumed if it is unconsumed, unexpired and bound to
        exactly this request and principal, record ``answers`` (``{request_key: (status,
        answer)}``) on the elicitations it asked, and mark those it asked that are still
        pending ``expired`` (:data:`UNANSWERED_DETAIL`). ``None`` (and nothing written)
        otherwise."""
        ...

    def get_request_state(self, state_id: str) -> RequestStateRecord | None:
        """The state as stored, consumed or not (the re-run of a lost redemption reads it)."""
        ...

    def elicitations_for_state(self, state_id: str) -> list[ElicitationRecord]: ...

    def stream_elicitations(self, session_id: str, stream_key: str) -> list[ElicitationRecord]:
        """Elicitations asked on one legacy call stream, oldest first."""
        ...

    def call_elicitations(self, session_id: str, call_id: str) -> list[ElicitationRecord]:
        """Elicitations asked by one legacy call (``call_id``: its JSON-RPC id as JSON)."""
        ...

    def purge_elicitations(self, older_than: float) -> int:
        """Delete answered or ended elicitation rows last updated before ``older_than``; how many.
        Pending rows are never purged."""
        ...

    # -- workers -----------------------------------------------------------------------------

    def beat_worker(self, worker_id: str, now: float) -> None:
        """Record that the worker is alive."""
        ...

    def worker_seen(self, worker_id: str) -> float | None:
        """When the worker last beat (``None``: never, or forgotten)."""
        ...

    def close_thread_connections(self) -> None:
        """Close the database connections the calling thread holds (called on each of the
        endpoint's database threads once it has been idle); the next call opens them again."""
        ...

    def release_thread_connections(self) -> None:
        """After each store call on one of the endpoint's database threads: give back what the
        thread need not keep between calls (Django: a connection of its connection pool, which
        the other threads of the process need; a persistent connection stays)."""
        ...

    def pool_exhausted(self, error: BaseException) -> bool:
        """Whether ``error`` (raised while a request was served) says that the connection pool
        had no connection free within its timeout: the request is answered 503, to be retried,
        rather than 500."""
        ...

    def process_private(self) -> bool:
        """Whether the database lives in this process only (in memory), so that no other worker
        reads this one's heartbeat: the endpoint then does not write it.

        Such a database (Django's test database on SQLite) shares one cache between its
        threads' connections, and there a write does not wait for another one but fails
        ("database table is locked"): a timed write of nobody's concern would make the
        application's own writes fail at random in its tests.
        """
        ...


class MemoryStore:
    """In-process :class:`SessionStore` for unit tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionRecord] = {}
        self._events: list[EventRecord] = []
        self._pending: dict[tuple[str, str], PendingRequestRecord] = {}
        self._answered: dict[tuple[str, str], float] = {}
        self._ids = itertools.count(1)
        self._cursors: dict[str, int] = {}
        self._elicitations: dict[str, ElicitationRecord] = {}
        self._states: dict[str, RequestStateRecord] = {}
        self._workers: dict[str, float] = {}

    def create_session(self, record: SessionRecord) -> None:
        with self._lock:
            self._sessions[record.session_id] = record

    def get_session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    def touch_session(self, session_id: str, now: float) -> None:
        with self._lock:
            if (record := self._sessions.get(session_id)) is not None:
                self._sessions[session_id] = replace(record, last_seen=now)

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            existed = self._sessions.pop(session_id, None) is not None
            self._events = [e for e in self._events if e.session_id != session_id]
            for key in [k for k in self._pending if k[0] == session_id]:
                del self._pending[key]
                self._answered.pop(key, None)
            return existed

    def append_event(self, session_id: str, stream_key: str, message: str, final: bool = False) -> int:
        with self._lock:
            event = EventRecord(next(self._ids), session_id, stream_key, message, final)
            self._events.append(event)
            return event.event_id

    def events_after(self, session_id: str, stream_key: str, after: int) -> list[EventRecord]:
        return [
            e for e in self._events if e.session_id == session_id and e.stream_key == stream_key and e.event_id > after
        ]

    def has_stream(self, session_id: str, stream_key: str) -> bool:
        return any(e.session_id == session_id and e.stream_key == stream_key for e in self._events)

    def get_cursor(self, session_id: str) -> int:
        return self._cursors.get(session_id, 0)

    def set_cursor(self, session_id: str, event_id: int) -> None:
        with self._lock:
            self._cursors[session_id] = max(event_id, self._cursors.get(session_id, 0))

    def create_pending(
        self,
        session_id: str,
        request_id: str,
        method: str,
        params: str,
        elicitation: ElicitationRecord | None = None,
    ) -> None:
        with self._lock:
            self._pending[(session_id, request_id)] = PendingRequestRecord(
                session_id, request_id, method, params, None, time.time()
            )
            if elicitation is not None:
                self._elicitations[elicitation.id] = elicitation

    def answer_pending(
        self,
        session_id: str,
        request_id: str,
        response: str,
        status: str | None = None,
        answer: str | None = None,
    ) -> bool:
        with self._lock:
            record = self._pending.get((session_id, request_id))
            if record is None or record.response is not None:
                return False
            self._pending[(session_id, request_id)] = replace(record, response=response)
            self._answered[(session_id, request_id)] = time.time()
            if status is not None:
                now = time.time()
                for row in list(self._elicitations.values()):
                    if row.session_id == session_id and row.request_key == request_id and row.status == "pending":
                        self._elicitations[row.id] = replace(row, status=status, answer=answer, updated=now)
            return True

    def get_pending(self, session_id: str, request_id: str) -> PendingRequestRecord | None:
        return self._pending.get((session_id, request_id))

    def answered_since(self, since: float) -> list[tuple[str, str, str]]:
        with self._lock:
            return [
                (key[0], key[1], record.response)
                for key, record in self._pending.items()
                if record.response is not None and self._answered.get(key, 0.0) >= since
            ]

    def pending_keys(self, session_ids: Sequence[str]) -> set[tuple[str, str]]:
        wanted = set(session_ids)
        with self._lock:
            return {key for key in self._pending if key[0] in wanted and key[0] in self._sessions}

    def delete_pending(self, session_id: str, request_id: str) -> None:
        with self._lock:
            self._pending.pop((session_id, request_id), None)
            self._answered.pop((session_id, request_id), None)

    def purge_expired(self, older_than: float) -> int:
        stale = [s.session_id for s in self._sessions.values() if s.last_seen < older_than]
        for session_id in stale:
            self.delete_session(session_id)
        with self._lock:  # its events carry no time: every one of a session that is gone
            self._events = [e for e in self._events if e.session_id in self._sessions]
            # A question's row written while its session's DELETE committed: nothing else takes it.
            for key, row in list(self._pending.items()):
                if row.session_id not in self._sessions and row.created < older_than:
                    del self._pending[key]
        return len(stale)

    # -- elicitations ------------------------------------------------------------------------

    def get_elicitation(self, record_id: str) -> ElicitationRecord | None:
        return self._elicitations.get(record_id)

    def find_elicitations(self, elicitation_id: str, server_name: str | None = None) -> list[ElicitationRecord]:
        rows = [
            r
            for r in self._elicitations.values()
            if r.elicitation_id == elicitation_id and (server_name is None or r.server_name == server_name)
        ]
        return sorted(rows, key=lambda r: r.created)

    def update_elicitation(
        self,
        record_id: str,
        status: str,
        now: float,
        *,
        detail: str | None = None,
        from_statuses: tuple[str, ...] = ("pending",),
        without_detail: bool = False,
    ) -> bool:
        with self._lock:
            row = self._elicitations.get(record_id)
            if row is None or row.status not in from_statuses or (without_detail and row.detail is not None):
                return False
            self._elicitations[record_id] = replace(row, status=status, detail=detail or row.detail, updated=now)
            return True

    def complete_elicitations(
        self,
        elicitation_id: str,
        now: float,
        server_name: str | None = None,
        *,
        principal: Any = ANY_PRINCIPAL,
        notification: str | None = None,
    ) -> list[ElicitationRecord]:
        moved = []
        with self._lock:
            for row in asked_by(self.find_elicitations(elicitation_id, server_name), principal):
                if overdue(row.status, row.expires, now):
                    self._elicitations[row.id] = replace(row, status="expired", updated=now)
                elif row.status in OPEN_STATUSES:
                    self._elicitations[row.id] = new = replace(row, status="completed", updated=now)
                    moved.append(new)
            if notification is not None:
                for session_id in notified_sessions(moved):
                    self._events.append(EventRecord(next(self._ids), session_id, GET_STREAM, notification, False))
        return moved

    def expire_elicitations(self, now: float) -> int:
        with self._lock:
            stale = [r for r in self._elicitations.values() if overdue(r.status, r.expires, now)]
            for row in stale:
                self._elicitations[row.id] = replace(row, status="expired", updated=now)
            return len(stale)

    # -- 2026-07-28 request state ------------------------------------------------------------

    def save_request_state(self, state: RequestStateRecord, elicitations: list[ElicitationRecord]) -> None:
        with self._lock:
            self._states[state.state_id] = state
            for row in elicitations:
                self._elicitations[row.id] = row

    def consume_request_state(
        self,
        state_id: str,
        server_name: str,
        method: str,
        target: str,
        args_digest: str,
        principal: str | None,
        now: float,
        answers: dict[str, tuple[str, str | None]],
    ) -> RequestStateRecord | None:
        with self._lock:
            state = self._states.get(state_id)
            if (
                state is None
                or state.consumed is not None
                or state.expires <= now
                or (state.server_name, state.method, state.target, state.args_digest, state.principal)
                != (server_name, method, target, args_digest, principal)
            ):
                return None
            self._states[state_id] = state = replace(state, consumed=now)
            for row in list(self._elicitations.values()):
                if row.state_id == state_id and row.status == "pending":
                    if row.request_key in answers:
                        status, answer = answers[row.request_key]
                        self._elicitations[row.id] = replace(row, status=status, answer=answer, updated=now)
                    else:
                        self._elicitations[row.id] = replace(
                            row, status="expired", detail=UNANSWERED_DETAIL, updated=now
                        )
            return state

    def get_request_state(self, state_id: str) -> RequestStateRecord | None:
        with self._lock:
            return self._states.get(state_id)

    def elicitations_for_state(self, state_id: str) -> list[ElicitationRecord]:
        return sorted((r for r in self._elicitations.values() if r.state_id == state_id), key=lambda r: r.created)

    def stream_elicitations(self, session_id: str, stream_key: str) -> list[ElicitationRecord]:
        rows = (r for r in self._elicitations.values() if r.session_id == session_id and r.stream_key == stream_key)
        return sorted(rows, key=lambda r: r.created)

    def call_elicitations(self, session_id: str, call_id: str) -> list[ElicitationRecord]:
        rows = (r for r in self._elicitations.values() if r.session_id == session_id and r.call_id == call_id)
        return sorted(rows, key=lambda r: r.created)

    def purge_elicitations(self, older_than: float) -> int:
        with self._lock:
            old = [k for k, r in self._elicitations.items() if r.status != "pending" and r.updated < older_than]
            for key in old:
                del self._elicitations[key]
            return len(old)

    # -- workers -----------------------------------------------------------------------------

    def beat_worker(self, worker_id: str, now: float) -> None:
        self._workers[worker_id] = now

    def worker_seen(self, worker_id: str) -> float | None:
        return self._workers.get(worker_id)

    def close_thread_connections(self) -> None:
        pass  # no connections

    def release_thread_connections(self) -> None:
        pass

    def pool_exhausted(self, error: BaseException) -> bool:
        return False

    def process_private(self) -> bool:
        return True
