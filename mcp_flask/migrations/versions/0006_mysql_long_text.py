"""MySQL and MariaDB: every text column holds any length (``LONGTEXT``).

The earlier revisions created ``Text`` columns, which MySQL and MariaDB make a ``TEXT``: 64 kB.
An answer a user pasted into a form, a tool's result in the event log, a sealed request state
or a question's message longer than that failed its write ("Data too long"), and with it the
request. Other databases' text columns have no such limit; this revision changes nothing there.

Revision ID: mcp_0006
Revises: mcp_0005
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from alembic.util import CommandError
from sqlalchemy.dialects.mysql import LONGTEXT

revision: str = "mcp_0006"
down_revision: str | None = "mcp_0005"
branch_labels: str | None = None
depends_on: str | None = None

_TEXT_BYTES = 65_535
"""The most a MySQL/MariaDB ``TEXT`` column holds."""

# (table, column, nullable) of every text column.
_COLUMNS = (
    ("mcp_session", "client_params", False),
    ("mcp_event", "message", False),
    ("mcp_pending_request", "params", False),
    ("mcp_pending_request", "response", True),
    ("mcp_elicitation", "message", False),
    ("mcp_elicitation", "requested_schema", True),
    ("mcp_elicitation", "url", True),
    ("mcp_elicitation", "answer", True),
    ("mcp_elicitation", "detail", True),
    ("mcp_request_state", "target", False),
    ("mcp_request_state", "sealed", False),
)


def _alter(to: sa.types.TypeEngine, from_: sa.types.TypeEngine) -> None:
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for table, column, nullable in _COLUMNS:
        op.alter_column(table, column, type_=to, existing_type=from_, existing_nullable=nullable)


def upgrade() -> None:
    _alter(LONGTEXT(), sa.Text())


def downgrade() -> None:
    # MySQL and MariaDB commit each ALTER: a value TEXT cannot hold would fail its own column
    # with the earlier ones already altered, the revision still mcp_0006 (so a later upgrade
    # never restores them), or, without strict mode, be cut short. Refuse before the first.
    bind = op.get_bind()
    if bind.dialect.name in ("mysql", "mariadb"):
        longer = [
            f"{table}.{column}"
            for table, column, _ in _COLUMNS
            if bind.execute(sa.text(f"SELECT 1 FROM {table} WHERE LENGTH({column}) > {_TEXT_BYTES} LIMIT 1")).first()
        ]
        if longer:
            raise CommandError(
                "Cannot downgrade below mcp_0006: values longer than the 64 kB a TEXT column keeps are in "
                f"{', '.join(longer)}. Delete those rows first ('flask mcp purge' removes ended ones); nothing "
                "was changed."
            )
    _alter(sa.Text(), LONGTEXT())
