"""``flask mcp ...``: the extension's commands, added to the app's CLI by ``init_app``."""

from __future__ import annotations

import time

import click
from flask.cli import AppGroup

from mcp_common.store import purge_store
from mcp_flask.extension import get_state

mcp_cli = AppGroup("mcp", help="MCP for Flask: database tables and housekeeping.")


@mcp_cli.command("migrate")
@click.option(
    "--revision",
    default="head",
    show_default=True,
    help="Alembic revision to bring the MCP tables to: an earlier one downgrades, 'base' drops them.",
)
def migrate_command(revision: str) -> None:
    """Create, upgrade or downgrade the MCP tables in MCP_DATABASE_URI."""
    from mcp_flask.migrations import current_revision, is_older, migrate

    state = get_state()
    url = state.engine.url.render_as_string(hide_password=True)
    before = current_revision(state.engine)
    # Imported here, as in migrate(): loading Alembic logs its plugins at INFO.
    from alembic.util import CommandError

    try:
        migrate(state.engine, revision)
    except CommandError as exc:  # an unknown --revision: the user's mistake, said in one line
        raise click.BadParameter(str(exc), param_hint="'--revision'") from exc
    after = current_revision(state.engine)
    if before == after:
        if after is None:
            click.echo(f"There are no MCP tables in {url}: nothing to do.")
        else:
            click.echo(f"The MCP tables in {url} are already at revision {after}: nothing to do.")
    elif after is None:
        click.echo(f"Dropped the MCP tables from {url} (they were at revision {before}).")
    elif before is None:
        click.echo(f"Created the MCP tables (revision {after}) in {url}.")
    elif is_older(after, before):
        click.echo(f"Downgraded the MCP tables in {url} from revision {before} to {after}.")
    else:
        click.echo(f"Upgraded the MCP tables in {url} from revision {before} to {after}.")


@mcp_cli.command("purge")
@click.option(
    "--elicitation-days",
    type=float,
    default=30.0,
    show_default=True,
    help="Keep answered, expired and completed elicitation rows this many days (pending ones are kept).",
)
def purge_command(elicitation_days: float) -> None:
    """Delete legacy sessions idle for longer than MCP_SESSION_TTL, expired request states, and
    old answered elicitations."""
    state = get_state()
    now = time.time()
    try:
        done = purge_store(state.store, state.config.session_ttl, elicitation_days, now)
    except ValueError as exc:  # the user's mistake, said in one line
        raise click.BadParameter(str(exc), param_hint="'--elicitation-days'") from None
    click.echo(
        f"Deleted {done['sessions']} expired MCP session(s) and {done['elicitations']} old elicitation(s); "
        f"marked {done['expired']} overdue elicitation(s) expired."
    )
