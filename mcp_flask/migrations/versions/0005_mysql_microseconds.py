"""MySQL and MariaDB: every timestamp column keeps its microseconds (``DATETIME(6)``).

The earlier revisions created ``DateTime`` columns, which MySQL and MariaDB make a plain
``DATETIME``: whole seconds. Events, answers and heartbeats written within one second then
shared a timestamp, and an instant read back was not the one written. Other databases already
kept microseconds; this revision changes nothing there.

Revision ID: mcp_0005
Revises: mcp_0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision: str = "mcp_0005"
down_revision: str | None = "mcp_0004"
branch_labels: str | None = None
depends_on: str | None = None

# (table, column, nullable) of every timestamp column.
_COLUMNS = (
    ("mcp_session", "created", False),
    ("mcp_session", "last_seen", False),
    ("mcp_event", "created", False),
    ("mcp_pending_request", "created", False),
    ("mcp_pending_request", "answered", True),
    ("mcp_elicitation", "created", False),
    ("mcp_elicitation", "updated", False),
    ("mcp_elicitation", "expires", False),
    ("mcp_request_state", "created", False),
    ("mcp_request_state", "expires", False),
    ("mcp_request_state", "consumed", True),
    ("mcp_worker", "last_beat", False),
)


def _alter(to: sa.types.TypeEngine, from_: sa.types.TypeEngine) -> None:
    if op.get_bind().dialect.name not in ("mysql", "mariadb"):
        return
    for table, column, nullable in _COLUMNS:
        op.alter_column(table, column, type_=to, existing_type=from_, existing_nullable=nullable)


def upgrade() -> None:
    _alter(DATETIME(fsp=6), sa.DateTime(timezone=True))


def downgrade() -> None:
    _alter(sa.DateTime(timezone=True), DATETIME(fsp=6))
