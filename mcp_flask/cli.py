"""``flask mcp ...``: the extension's commands, added to the app's CLI by ``init_app``."""

from __future__ import annotations

import time

import click
from flask.cli import AppGroup

from mcp_flask.extension import get_state

mcp_cli = AppGroup("mcp", help="MCP for Flask: database tables and housekeeping.")


@mcp_cli.command("migrate")
@click.option("--revision", default="head", show_default=True, help="Alembic revision to upgrade to.")
def migrate_command(revision: str) -> None:
    """Create or upgrade the MCP tables in MCP_DATABASE_URI."""
    from mcp_flask.migrations import current_revision, migrate

    state = get_state()
    migrate(state.engine, revision)
    url = state.engine.url.render_as_string(hide_password=True)
    click.echo(f"MCP tables at revision {current_revision(state.engine)} in {url}.")


@mcp_cli.command("purge")
def purge_command() -> None:
    """Delete legacy sessions idle for longer than MCP_SESSION_TTL."""
    state = get_state()
    count = state.store.purge_expired(time.time() - state.config.session_ttl)
    click.echo(f"Deleted {count} expired MCP session(s).")
