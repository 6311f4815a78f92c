"""Alembic environment of the extension's tables (see :func:`mcp_flask.migrations.migrate`)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

from mcp_flask.models import VERSION_TABLE, metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite alters tables by copying them; Alembic's batch mode does that.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    config = context.config
    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=metadata,
            version_table=VERSION_TABLE,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    # Run from the ``alembic`` command line with ``sqlalchemy.url`` in its ini file.
    engine = engine_from_config(config.get_section(config.config_ini_section, {}), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _configure(connection)


run()
