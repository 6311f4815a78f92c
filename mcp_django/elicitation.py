"""Complete URL-mode elicitations from anywhere in a Django project: a view, a payment
webhook, a Celery task, ``manage.py shell``."""

from __future__ import annotations

from mcp_common.elicitation import (
    ElicitUrl,
    UrlConsent,
    caller_elicitation_id,
    check_completion,
    complete_for_application,
    elicitation_completed,
)

__all__ = [
    "ElicitUrl",
    "UrlConsent",
    "acomplete_elicitation",
    "caller_elicitation_id",
    "complete_elicitation",
    "elicitation_completed",
]


def complete_elicitation(elicitation_id: str, server: str | None = None) -> int:
    """Mark the URL-mode elicitation ``elicitation_id`` completed; how many rows moved.

    Legacy clients receive ``notifications/elicitation/complete`` on their session's GET stream,
    from whichever worker holds it, or when they next open one. The 2026-07-28 wire has no such
    notification: there a tool's resolver observes it with ``elicitation_completed``, and the
    admin shows it.
    Calling it again changes nothing and sends nothing. An id that is not a ``str``
    raises ``TypeError``, an empty one ``ValueError``.
    ``server`` (a server name) limits it to one server's elicitations.
    """
    from mcp_django.store import DjangoStore

    check_completion(elicitation_id, server)
    return complete_for_application(DjangoStore(), elicitation_id, server)


async def acomplete_elicitation(elicitation_id: str, server: str | None = None) -> int:
    """:func:`complete_elicitation` for async code (an async view, an async test)."""
    from asgiref.sync import sync_to_async

    # Thread-sensitive, as Django's own async ORM: on the thread of the caller's other sync
    # database work, so it sees the caller's transaction, and on the connection Django closes
    # when the request ends (an executor thread's connection would stay open for good).
    return await sync_to_async(complete_elicitation)(elicitation_id, server)
