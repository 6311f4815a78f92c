"""The extension's own Alembic history, applied with :func:`migrate` or ``flask mcp migrate``.

It keeps its place in its own version table (``mcp_alembic_version``), so it never collides
with the application's Flask-Migrate history in the same database.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

if TYPE_CHECKING:
    from flask import Flask

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)

# Any constant: concurrent migrators on one PostgreSQL database take turns on this lock.
_PG_LOCK_KEY = 0x6D63705F666C61  # "mcp_fla"


def migrate(target: Engine | Flask | None = None, revision: str = "head") -> None:
    """Create or upgrade the extension's tables (idempotent).

    ``target`` is an engine, or an application set up with ``MCP`` (its ``MCP_DATABASE_URI``);
    default: the current application. Safe to call at every start-up; on PostgreSQL several
    processes may call it at once.
    """
    from alembic import command
    from alembic.config import Config

    if isinstance(target, Engine):
        engine = target
    else:
        from mcp_flask.extension import get_state

        engine = get_state(target).engine

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        # The documented way to run Alembic on a connection the caller owns.
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` before the first migration)."""
    from alembic.migration import MigrationContext

    from mcp_flask.models import VERSION_TABLE

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()
