"""Complete URL-mode elicitations from anywhere in a Flask app: a view, a payment webhook, a
Celery task, ``flask shell``."""

from __future__ import annotations

from flask import Flask

from mcp_common.elicitation import (
    ElicitUrl,
    UrlConsent,
    caller_elicitation_id,
    check_completion,
    complete_in_store,
    elicitation_completed,
)

__all__ = ["ElicitUrl", "UrlConsent", "caller_elicitation_id", "complete_elicitation", "elicitation_completed"]


def complete_elicitation(elicitation_id: str, server: str | None = None, *, app: Flask | None = None) -> int:
    """Mark the URL-mode elicitation ``elicitation_id`` completed; how many rows moved.

    Legacy clients receive ``notifications/elicitation/complete`` on their session's GET stream,
    from whichever worker holds it, or when they next open one. The 2026-07-28 wire has no such
    notification: there a tool's resolver observes it with ``elicitation_completed``, and the
    review panel shows it. Calling it again changes nothing and sends nothing. An id that is not a
    ``str`` raises ``TypeError``, an empty one ``ValueError``. Needs the app (or its
    context); ``server`` (a server name) limits it to one server's elicitations.
    """
    from mcp_flask.extension import get_state

    check_completion(elicitation_id, server)
    moved, _ = complete_in_store(get_state(app).store, elicitation_id, server)
    return len(moved)
