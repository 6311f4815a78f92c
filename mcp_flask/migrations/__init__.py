"""The extension's own Alembic history, applied with :func:`migrate` or ``flask mcp migrate``.

It keeps its place in its own version table (``mcp_alembic_version``), so it never collides
with the application's Flask-Migrate history in the same database.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text

if TYPE_CHECKING:
    from flask import Flask

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)

# Any constant: concurrent migrators on one PostgreSQL database take turns on this lock.
_PG_LOCK_KEY = 0x6D63705F666C61  # "mcp_fla"


@contextlib.contextmanager
def _quiet_alembic() -> Iterator[None]:
    """Alembic's INFO lines ("Context impl SQLiteImpl.", "Running upgrade ...") off for the run.

    The SDK's ``MCPServer()`` sets the root logger to INFO with a stderr handler, so they would
    reach the terminal of every ``flask mcp migrate`` and the log of every start-up that migrates.
    Warnings still pass; an application that set the ``alembic`` logger's level keeps its choice.
    """
    logger = logging.getLogger("alembic")
    if logger.level != logging.NOTSET:
        yield
        return
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(logging.NOTSET)


def migrate(target: Engine | Flask | None = None, revision: str = "head") -> None:
    """Bring the extension's tables to ``revision`` (idempotent): create or upgrade them, or,
    for a revision older than the database's, downgrade them, as Django's ``migrate mcp_django
    <migration>`` does. ``"base"`` drops every MCP table (to remove the extension); the
    application's own tables are never touched.

    ``target`` is an engine, or an application set up with ``MCP`` (its ``MCP_DATABASE_URI``);
    default: the current application. Safe to call at every start-up; on PostgreSQL several
    processes may call it at once.
    """
    if isinstance(target, Engine):
        engine = target
    else:
        from mcp_flask.extension import get_state

        engine = get_state(target).engine

    with _quiet_alembic(), engine.begin() as connection:
        # Imported here: loading Alembic logs its plugins at INFO.
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", SCRIPT_LOCATION)
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        # The documented way to run Alembic on a connection the caller owns.
        config.attributes["connection"] = connection
        current = _current(connection)
        if current is not None and is_older(revision, current):
            command.downgrade(config, revision)
            if revision == "base":
                # Nothing of the extension is left, not even where its history was kept.
                from mcp_flask.models import VERSION_TABLE

                connection.execute(text(f"DROP TABLE {connection.dialect.identifier_preparer.quote(VERSION_TABLE)}"))
        else:
            command.upgrade(config, revision)


def is_older(revision: str, current: str) -> bool:
    """Whether ``revision`` (``"base"`` included) comes before ``current`` in the history; an
    unknown revision raises Alembic's ``CommandError``, as ``upgrade`` would."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    script = ScriptDirectory.from_config(config)
    if revision == "base":
        return True
    target = script.get_revision(revision)
    if target is None or target.revision == current:
        return False
    return any(step.revision == target.revision for step in script.iterate_revisions(current, "base"))


def _current(connection: Connection) -> str | None:
    from alembic.migration import MigrationContext

    from mcp_flask.models import VERSION_TABLE

    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before the first migration)."""
    with _quiet_alembic(), engine.connect() as connection:
        return _current(connection)
