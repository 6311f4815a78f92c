"""Celery tasks (``pip install mcp-django-flask[celery]``): complete a URL-mode elicitation from a
worker, and the purge for Celery beat (``mcp_django.purge``, below).

from mcp_django.tasks import complete_elicitation_task
complete_elicitation_task.delay("deposit-42")

A database that is briefly unreachable or locked (``OperationalError``, ``InterfaceError``)
does not lose the completion: the task retries with exponential backoff (1 s, 2 s, 4 s, ...
capped at 10 minutes, with jitter), up to ``MAX_RETRIES`` times. Completion is idempotent, so a
retry after a commit whose acknowledgement was lost changes nothing. Other errors (a missing
table, a bad id) fail at once: retrying would not mend them. (SQLite reports a missing table or
column with an ``OperationalError`` too: that one is raised as the ``ProgrammingError`` the other
databases raise.)

The message is acknowledged once the task has run, not when a worker takes it: a worker process
killed mid-task (out of memory, SIGKILL, a lost machine) leaves it to be delivered again, which
idempotence makes safe. (Celery's default, acknowledging first, would lose the completion.)
"""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError, ProgrammingError

from mcp_django.elicitation import complete_elicitation
from mcp_django.store import purge

MAX_RETRIES = 12
"""Retries before the task fails: at most about 40 minutes of waits in all (jitter shortens them)."""

_SQLITE_SCHEMA_ERRORS = ("no such table:", "no such column:")
"""SQLite's messages for a schema that lacks what the store uses (``migrate`` not run)."""


@shared_task(
    name="mcp_django.complete_elicitation",
    ignore_result=False,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=MAX_RETRIES,
)
def complete_elicitation_task(elicitation_id: str, server: str | None = None) -> int:
    try:
        return complete_elicitation(elicitation_id, server)
    except OperationalError as exc:
        if str(exc).startswith(_SQLITE_SCHEMA_ERRORS):
            raise ProgrammingError(str(exc)) from exc
        raise


@shared_task(name="mcp_django.purge", ignore_result=False)
def purge_task(elicitation_days: float = 30.0) -> dict[str, int]:
    """``manage.py mcp_purge`` for Celery beat, which schedules tasks, not commands: what it
    deleted, ``{"sessions": ..., "elicitations": ..., "expired": ...}``. Not retried: the next
    scheduled run does the same work. ``ValueError`` for a number of days that is negative or
    not finite, before anything is deleted."""
    try:
        return purge(elicitation_days)
    except ValueError as exc:
        raise ValueError(f"elicitation_days {exc}") from None
