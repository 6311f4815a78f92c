"""Complete URL-mode elicitations from anywhere in a Flask app: a view, a payment webhook, a
Celery task, ``flask shell``."""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, current_app, has_app_context
from sqlalchemy import Engine

from mcp_common.elicitation import (
    ElicitUrl,
    UrlConsent,
    caller_elicitation_id,
    check_completion,
    complete_for_application,
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
    state = get_state(app)
    refuse_if_the_app_holds_the_write_lock(state.engine, "complete_elicitation", "complete_elicitation")
    return complete_for_application(state.store, elicitation_id, server)


def refuse_if_the_app_holds_the_write_lock(engine: Engine, action: str, then: str) -> None:
    """``action`` (a completion, a tool's question to its client) commits on the extension's
    own connection. On SQLite a file has one writer: a write of the app's own session
    (Flask-SQLAlchemy's ``db.session``, flushed but not committed) to the same file would make
    it wait, then fail with "database is locked". Refused at once instead, saying what to do.
    (Elsewhere a completion stands even if the app's transaction rolls back: the README says
    to complete after the commit.)"""
    if engine.dialect.name != "sqlite" or not has_app_context():
        return
    extension = current_app.extensions.get("sqlalchemy")
    scoped = getattr(extension, "session", None)
    registry = getattr(scoped, "registry", None)
    if registry is None or not registry.has():
        return  # no session in this context: nothing of the app's is open
    session = scoped()
    if not session.in_transaction():
        return
    if engine.url.database in (None, "", ":memory:"):
        return  # a database in memory is private to its connection: no other writes to it
    ours = os.path.realpath(engine.url.database)
    # Every database the app's models are on (its binds too: a model with a ``__bind_key__``
    # whose file holds the MCP tables), not only the default one, which an app may not have.
    engines = getattr(extension, "engines", None) or {}
    for theirs in {id(each): each for each in engines.values()}.values():
        database = getattr(getattr(theirs, "url", None), "database", None)
        if theirs.dialect.name != "sqlite" or database in (None, "", ":memory:") or os.path.realpath(database) != ours:
            continue  # another database, or another file
        # The transaction's own connection to that file (opened without a write if it had none).
        connection = session.connection(bind_arguments={"bind": theirs})
        if _wrote(connection.connection.dbapi_connection):
            raise RuntimeError(
                f"{action}: the app's database session has uncommitted writes to the SQLite file "
                "the MCP tables are in, and SQLite lets one connection write at a time: call "
                f"db.session.commit() first, then {then}"
            )


def _wrote(dbapi_connection: Any) -> bool:
    """Whether a pysqlite connection holds uncommitted writes. Under its default (legacy)
    transaction control it begins a transaction only before a write, so an open one is a
    write. A connection that begins its own (``isolation_level=None`` with a ``BEGIN`` emitted
    on SQLAlchemy's begin event, SQLAlchemy's recipe for SAVEPOINTs; Python 3.12's
    ``autocommit=False``) is in one after a mere read, which blocks no writer: not refused."""
    if getattr(dbapi_connection, "isolation_level", None) is None:
        return False
    if getattr(dbapi_connection, "autocommit", -1) != -1:  # -1: sqlite3.LEGACY_TRANSACTION_CONTROL
        return False
    return bool(getattr(dbapi_connection, "in_transaction", False))
