"""Elicitations kept in the database: the URL-mode resolver marker, completion from anywhere,
and the bookkeeping both protocol eras share.

URL mode through a resolver
    The SDK's resolver machinery knows one elicitation marker, the form one (``Elicit``).
    :class:`ElicitUrl` is an ``Elicit`` whose stand-in form schema carries the URL; the
    transports of both eras (which this package owns) turn that stand-in into a URL-mode
    ``elicitation/create`` on the way out and the client's content-less ``accept`` into an
    empty form on the way back, so the SDK's own resolver code asks, records and replays the
    question on either wire, and the tool receives ``AcceptedElicitation`` /
    ``DeclinedElicitation`` / ``CancelledElicitation`` exactly as for a form.

Completion from anywhere
    :func:`complete_elicitation` (sync, for views, Celery tasks, shells) and
    :func:`acomplete_elicitation` mark every open row with the ``elicitationId`` completed and,
    for legacy sessions, queue ``notifications/elicitation/complete`` in the session's event log,
    which whichever worker holds the session's GET stream delivers (or its next reconnect).
    Calling it again does nothing. A row still pending after its expiry is not completed but
    expired, as the heartbeat would have left it. ``ctx.session.send_elicit_complete(...)`` in
    a tool goes through the same path, limited to what the calling principal asked of that
    server (its client hears about it, as from the SDK); completing anyone's is for application
    code.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, ClassVar

from mcp.server.mcpserver import Elicit
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, create_model

from mcp_common import _sdk
from mcp_common.jsonrpc import dumps
from mcp_common.store import (
    ANY_PRINCIPAL,
    MAX_ELICITATION_ID,
    MAX_TOOL,
    REFUSED_DETAIL,
    ElicitationRecord,
    SessionStore,
    asked_by,
    new_row_id,
    storable_key,
    storable_text,
)

logger = logging.getLogger("mcp_common.elicitation")

URL_FIELD = "__mcp_url_elicitation__"
"""The stand-in form's one property: its ``title`` is the elicitationId, its ``default`` the URL.
(The wire types keep only spec fields of a requested schema, so the question rides in one.)"""

COMPLETE_METHOD = "notifications/elicitation/complete"


class UrlConsent(BaseModel):
    """What an accepted URL-mode resolver question injects: the user agreed to open the URL.

    ``url`` and ``elicitation_id`` say which question it was; what the user did there arrives
    out of band (see :func:`complete_elicitation`). ``completed`` is true when the resolver
    found it already done (:func:`elicitation_completed`) and answered with
    :meth:`ElicitUrl.completed` instead of asking again.
    """

    url: ClassVar[str] = ""
    elicitation_id: ClassVar[str] = ""
    _completed: bool = PrivateAttr(default=False)

    @property
    def completed(self) -> bool:
        return self._completed


@functools.lru_cache(maxsize=1024)
def check_elicitation_id(elicitation_id: str) -> None:
    """Raise ``ValueError`` for an elicitation id no question's row can keep (the tool's error,
    raised where it asks, the same on every database)."""
    if len(elicitation_id) > MAX_ELICITATION_ID:
        raise ValueError(
            f"elicitation_id is {len(elicitation_id)} characters long, longer than {MAX_ELICITATION_ID} "
            "characters (what the database keeps to complete it by): use a shorter id, e.g. a digest"
        )


def check_text(name: str, value: object, *, optional: bool = False) -> None:
    """Raise ``TypeError`` naming the argument ``name`` unless ``value`` is a ``str`` (or, with
    ``optional``, ``None``): a webhook's payload that lacked the field says so where the
    application called, not deep inside a store."""
    if not isinstance(value, str) and not (optional and value is None):
        raise TypeError(f"{name} must be a str{' or None' if optional else ''}, not {type(value).__name__}")


def check_completion(elicitation_id: object, server: object) -> None:
    """The arguments of ``complete_elicitation`` (Django, Flask, the Celery task): a ``str`` id
    that is not empty (no question is asked under an empty one: it is a field left blank), a
    ``str`` server name or ``None``."""
    check_text("elicitation_id", elicitation_id)
    check_text("server", server, optional=True)
    if not elicitation_id:
        raise ValueError("elicitation_id must not be empty: no question is asked under an empty id")


def _consent_model(url: str, elicitation_id: str) -> type[UrlConsent]:
    return create_model(
        "UrlConsent",
        __base__=UrlConsent,
        __module__=__name__,
        marker=(str, Field(default=url, alias=URL_FIELD, title=elicitation_id, description=url)),
        url=(ClassVar[str], url),
        elicitation_id=(ClassVar[str], elicitation_id),
    )


class ElicitUrl(Elicit[UrlConsent]):
    """A resolver's request to send the user to a URL (URL-mode elicitation), on either wire.

    Return it from a resolver the way you return ``Elicit``::

        async def deposit(booking_id: str) -> UrlConsent | ElicitUrl:
            return ElicitUrl("A 20 EUR deposit confirms your booking.",
                             url=f"https://pay.example.com/deposit/{booking_id}",
                             elicitation_id=f"deposit-{booking_id}")

        @mcp.tool()
        async def pay(booking_id: str,
                      consent: Annotated[ElicitationResult[UrlConsent], Resolve(deposit)]) -> str: ...

    It is asked only of clients that declared URL-mode elicitation; others get the SDK's
    ``-32021`` refusal naming the capability, as a form question does for URL-only clients.
    """

    def __init__(self, message: str, url: str, elicitation_id: str) -> None:
        check_elicitation_id(elicitation_id)
        super().__init__(message, _consent_model(url, elicitation_id))
        self.url = url
        self.elicitation_id = elicitation_id

    def completed(self) -> UrlConsent:
        """The answer to return instead of this question when it was already completed: the
        tool gets an accept whose ``completed`` is true, and the user is not sent again."""
        consent = _consent_model(self.url, self.elicitation_id)()
        consent._completed = True
        return consent


def caller_elicitation_id(base: str) -> str:
    """In a tool or a resolver: ``base`` made the calling user's own elicitation id
    (``"hold-17"`` -> ``"hold-17.<digest>"``, a digest of the caller and ``base`` keyed with
    the application's secret key, the same on every worker: one id tells no other).

    ``complete_elicitation(id)`` (a payment webhook, a task) completes every open question with
    that id, whoever asked it. With an id any caller can ask under (``f"hold-{booking_id}"``),
    a second user who asks the same question has it completed by the first user's payment, and
    ``elicitation_completed`` then answers yes to them too. An id unique to one question (the
    payment provider's checkout session id) needs nothing more; this makes one the caller's,
    so one user's payment never completes another's question. Anonymous callers share one
    identity, and so one id. Put it where the completion will come from (the payment link)."""
    from mcp_common.endpoint import current_request

    check_text("base", base)
    request = current_request.get()
    endpoint = request.endpoint if request is not None else None
    if endpoint is None:
        raise RuntimeError("caller_elicitation_id() is for tools and resolvers, while an MCP request is served")
    elicitation_id = _caller_id(endpoint.handle_keys[0], request.owner, base)  # type: ignore[union-attr]
    check_elicitation_id(elicitation_id)
    return elicitation_id


def _caller_id(key: bytes, principal: str | None, base: str) -> str:
    """``base`` made ``principal``'s own id under one secret key."""
    caller = "" if principal is None else "principal:" + principal
    # The base too: a digest of the caller alone would end all their ids alike, so that one of
    # them (a payment link) gives the others and links the caller's payments to one another.
    # JSON keeps the two apart whatever they hold.
    signed = json.dumps([caller, base], ensure_ascii=False).encode("utf-8", "surrogatepass")
    digest = hmac.new(key, b"elicitation-id\0" + signed, hashlib.sha256).digest()
    return f"{base}.{base64.urlsafe_b64encode(digest[:12]).decode()}"


def _same_question_ids(keys: Sequence[bytes], principal: str | None, elicitation_id: str) -> list[str]:
    """``elicitation_id`` and, when it is the caller's own id (``caller_elicitation_id``) under
    the current key, the ids the same question had under the fallback keys: a payment link made
    before ``SECRET_KEY`` was rotated carries one of those."""
    base, dot, _ = elicitation_id.rpartition(".")
    if not dot or len(keys) < 2 or not hmac.compare_digest(_caller_id(keys[0], principal, base), elicitation_id):
        return [elicitation_id]
    return [elicitation_id, *(_caller_id(key, principal, base) for key in keys[1:])]


async def elicitation_completed(elicitation_id: str) -> bool:
    """In a tool or a resolver: whether the caller's URL-mode elicitation ``elicitation_id`` on
    this server has been completed (``complete_elicitation``: a payment webhook, a task, staff).

    This is how a 2026-07-28 call, which no ``notifications/elicitation/complete`` reaches,
    observes the completion: a resolver asks first and, once it is done, answers itself::

        async def deposit(booking_id: str) -> UrlConsent | ElicitUrl:
            question = ElicitUrl("A 20 EUR deposit holds your table.", url=..., elicitation_id=...)
            if await elicitation_completed(question.elicitation_id):
                return question.completed()
            return question

    Only questions the calling principal asked count (the anonymous callers share one), so one
    user's payment never answers another's question. For an id from ``caller_elicitation_id``,
    the ids it had under the fallback secret keys count too: a link paid before the key was
    rotated is still seen.
    """
    from mcp_common.endpoint import current_request

    check_text("elicitation_id", elicitation_id)
    request = current_request.get()
    endpoint = request.endpoint if request is not None else None
    if endpoint is None:
        raise RuntimeError("elicitation_completed() is for tools and resolvers, while an MCP request is served")
    principal = request.owner  # type: ignore[union-attr]
    for candidate in _same_question_ids(endpoint.handle_keys, principal, elicitation_id):
        rows = await endpoint.db(endpoint.store.find_elicitations, storable_text(candidate), endpoint.name)
        if any(row.status == "completed" and row.principal == principal for row in rows):
            return True
    return False


def is_url_question(marker: Any) -> bool:
    """Whether a resolver's marker is a URL-mode question (the SDK gates it on URL mode)."""
    return isinstance(marker, ElicitUrl)


def to_url_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The URL-mode ``elicitation/create`` params for a stand-in form, else ``None``."""
    if not params:
        return None
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    marker = properties.get(URL_FIELD) if isinstance(properties, Mapping) and len(properties) == 1 else None
    if not isinstance(marker, Mapping):
        return None
    url_params: dict[str, Any] = {
        "mode": "url",
        "message": params.get("message", ""),
        "url": str(marker.get("default", "")),
        "elicitationId": str(marker.get("title", "")),
    }
    if "_meta" in params:
        url_params["_meta"] = params["_meta"]
    return url_params


def fill_url_accept(result: Any) -> Any:
    """A URL-mode ``accept`` carries no content; the stand-in form wants an (empty) one."""
    if isinstance(result, dict) and result.get("action") == "accept" and result.get("content") is None:
        return {**result, "content": {}}
    return result


_STATUS_OF_ACTION = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}


def outcome_of(result: Any) -> tuple[str, str | None]:
    """``(status, answer JSON)`` of an ``ElicitResult`` (as a dict) for the elicitation row."""
    if not isinstance(result, Mapping):
        return "cancelled", None
    status = _STATUS_OF_ACTION.get(str(result.get("action")), "cancelled")
    content = result.get("content")
    return status, (dumps(content) if status == "accepted" and content is not None else None)


def new_record(
    *,
    server_name: str,
    tool: str | None,
    params: Mapping[str, Any],
    request_key: str,
    principal: str | None,
    expires: float,
    session_id: str | None = None,
    state_id: str | None = None,
    owner: str | None = None,
    stream_key: str | None = None,
    call_id: str | None = None,
) -> ElicitationRecord:
    """The row for one ``elicitation/create`` (params already in their wire mode).

    Its text as every database holds it (:func:`~mcp_common.store.storable_text`): a tool may
    build its question, URL or elicitation id from a client's argument, which JSON lets carry
    a NUL or a lone surrogate. The tool's name is the application's, which the SDK lets be
    any length and hold any character: kept as a key is (:func:`~mcp_common.store.storable_key`)."""
    now = time.time()
    url_mode = params.get("mode") == "url"
    schema = params.get("requestedSchema")
    if url_mode and params.get("elicitationId"):
        check_elicitation_id(str(params["elicitationId"]))  # ctx.elicit_url's, or a 2026 answer's
    return ElicitationRecord(
        id=new_row_id(),
        server_name=server_name,
        tool=None if tool is None else storable_key(tool, MAX_TOOL),
        session_id=session_id,
        state_id=state_id,
        request_key=storable_key(request_key),
        principal=principal,
        mode="url" if url_mode else "form",
        message=storable_text(str(params.get("message", ""))),
        requested_schema=None if url_mode or schema is None else dumps(schema),
        url=storable_text(str(params.get("url"))) if url_mode else None,
        elicitation_id=storable_text(str(params["elicitationId"]))
        if url_mode and params.get("elicitationId")
        else None,
        status="pending",
        answer=None,
        detail=None,
        created=now,
        updated=now,
        expires=expires,
        owner=owner,
        stream_key=stream_key,
        call_id=call_id,
    )


# -- answers the SDK refused (legacy wire) ---------------------------------------------------
# The answer to a legacy ``elicitation/create`` is recorded by whichever worker receives it,
# before the SDK's ``ctx.elicit`` (in the asking worker) validates it against the model the
# tool asked with. The asking worker notes which row its answer came from; when the SDK
# refuses that answer, the row is corrected there: one guarded update, only for a refused one.

_answered: ContextVar[list[tuple[Any, str]] | None] = ContextVar("mcp_common_answered", default=None)


def note_answer(endpoint: Any, record_id: str) -> None:
    """In the asking task: the accepted answer about to reach the SDK came from this row."""
    answered = _answered.get()
    if answered is not None:
        answered.append((endpoint, record_id))


def _forget_the_answer(refusal: ValueError) -> None:
    """The SDK's refusal of an answer, without the pydantic error it was raised from: that error
    repeats the answer (its ``input_value``: a form's name, address...), and a tool that lets the
    refusal through has it logged with its causes. The refused fields stay, as a note."""
    cause = refusal.__cause__
    if not isinstance(cause, ValidationError):
        return
    for error in cause.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "the answer"
        refusal.add_note(f"{where}: {error['msg']}")
    refusal.__cause__ = refusal.__context__ = None


@contextlib.asynccontextmanager
async def refusal_verdict() -> AsyncIterator[None]:
    """Around one ``ctx.elicit`` (see :func:`mcp_common._sdk.install_elicit_verdict`): when the
    SDK refuses the accepted answer, its row becomes ``cancelled`` with :data:`REFUSED_DETAIL`
    (status and detail in one update, from ``accepted`` only); ``answer`` keeps what was sent."""
    answered: list[tuple[Any, str]] = []
    token = _answered.set(answered)
    try:
        yield
    except ValueError as exc:
        if type(exc) is not ValueError or str(exc) not in _sdk.ELICIT_REFUSALS:
            raise
        _forget_the_answer(exc)
        if answered:
            endpoint, record_id = answered[-1]
            update = functools.partial(
                endpoint.store.update_elicitation,
                record_id,
                "cancelled",
                time.time(),
                detail=REFUSED_DETAIL,
                from_statuses=("accepted",),
            )
            try:
                await endpoint.db(update)
            except Exception:
                # The tool hears the SDK's refusal all the same; the row keeps the answer.
                logger.exception("The refused answer of elicitation %s could not be recorded", record_id)
        raise
    finally:
        _answered.reset(token)


# -- completion ------------------------------------------------------------------------------


def complete_in_store(
    store: SessionStore, elicitation_id: str, server_name: str | None = None, principal: Any = ANY_PRINCIPAL
) -> tuple[list[ElicitationRecord], bool]:
    """Complete the open rows with ``elicitation_id`` and queue the legacy notifications.

    A row still pending after its expiry is not completed: it is marked expired, as the
    heartbeat would have (see :func:`mcp_common.store.overdue`), and its client hears nothing.

    ``principal`` (``None`` is the anonymous one) limits it to the rows that principal's calls
    asked: what a tool's ``ctx.session.send_elicit_complete`` may complete.

    Returns the rows that moved and whether any row with that id exists at all in that scope
    (a tool may complete an id it never asked through this package: then the caller notifies
    its own session, as the SDK would).
    """
    check_text("elicitation_id", elicitation_id)
    check_text("server_name", server_name, optional=True)
    stored_id = storable_text(elicitation_id)  # as the rows keep it: see new_record
    message = dumps({"jsonrpc": "2.0", "method": COMPLETE_METHOD, "params": {"elicitationId": elicitation_id}})
    # The rows and their sessions' notifications in one transaction: see complete_elicitations.
    moved = store.complete_elicitations(stored_id, time.time(), server_name, principal=principal, notification=message)
    exists = bool(moved) or bool(asked_by(store.find_elicitations(stored_id, server_name), principal))
    return moved, exists


def complete_for_application(store: SessionStore, elicitation_id: str, server_name: str | None) -> int:
    """What ``complete_elicitation`` of either framework (and so the Celery task) does once its
    arguments are checked: :func:`complete_in_store`, the number of rows moved.

    A ``server_name`` under which nothing was ever asked with this id, while another server
    asked it, is most likely mistyped (a payment's question then stays open and nobody hears
    why): that costs one more read, and a WARNING naming the servers that did ask it."""
    moved, exists = complete_in_store(store, elicitation_id, server_name)
    if not exists and server_name is not None:
        askers = sorted({row.server_name for row in store.find_elicitations(storable_text(elicitation_id))})
        if askers:
            logger.warning(
                "complete_elicitation(%r, server=%r) completed nothing: no server of that name asked it, "
                "but %s did; is the server name right?",
                elicitation_id,
                server_name,
                ", ".join(map(repr, askers)),
            )
    return len(moved)


# -- workers ---------------------------------------------------------------------------------

_WORKER: tuple[int, str] | None = None


def _pid_space() -> str:
    """Which processes this one can see by their pid: the kernel's boot and the pid namespace
    (a container's own), as 12 hex digits; empty where the system does not say (not Linux).

    A host name alone does not say it: the containers of a Kubernetes pod, or on Docker's host
    network, share their host's name, and machines cloned from one image can too."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            space = f"{boot.read().strip()}|{os.readlink('/proc/self/ns/pid')}"
    except (OSError, ValueError):
        return ""
    return hashlib.sha256(space.encode()).hexdigest()[:12]


def worker_id() -> str:
    """This process's identity in ``owner`` columns: ``host:pid:nonce:space`` (new after a
    fork), ``space`` from :func:`_pid_space`, left out where it is unknown."""
    global _WORKER
    pid = os.getpid()
    if _WORKER is None or _WORKER[0] != pid:
        space = _pid_space()
        _WORKER = (pid, f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}" + (f":{space}" if space else ""))
    return _WORKER[1]


def owner_alive(store: SessionStore, owner: str, stale_after: float) -> bool:
    """Whether the worker ``owner`` still runs: a process check where its pid means a process
    here (this host, and the same boot and pid namespace where known), else its heartbeat."""
    if owner == worker_id():
        return True
    # host, pid, nonce[, space]: an id written before the space was recorded has none.
    theirs, ours = owner.split(":", 3), worker_id().split(":", 3)
    if len(theirs) >= 3 and theirs[0] == ours[0] and theirs[3:] == ours[3:] and theirs[1].isdigit():
        try:
            os.kill(int(theirs[1]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    seen = store.worker_seen(owner)
    return seen is not None and seen >= time.time() - stale_after


def loads_or_none(text: str | None) -> Any:
    return json.loads(text) if text else None
