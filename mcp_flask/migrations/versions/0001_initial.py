"""The three tables of a legacy MCP conversation: sessions, events, pending requests.

Revision ID: mcp_0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "mcp_0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

# SQLite only auto-increments an INTEGER PRIMARY KEY; the models say the same.
_big_auto_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "mcp_session",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("server_name", sa.String(200), nullable=False),
        sa.Column("protocol_version", sa.String(32), nullable=False),
        sa.Column("client_params", sa.Text(), nullable=False),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("get_cursor", sa.BigInteger(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_mcp_session"),
    )
    op.create_index("ix_mcp_session_last_seen", "mcp_session", ["last_seen"])
    op.create_table(
        "mcp_event",
        sa.Column("id", _big_auto_id, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("stream_key", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mcp_event"),
    )
    op.create_index("ix_mcp_event_stream", "mcp_event", ["session_id", "stream_key", "id"])
    op.create_table(
        "mcp_pending_request",
        sa.Column("id", _big_auto_id, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_mcp_pending_request"),
        sa.UniqueConstraint("session_id", "request_id", name="uq_mcp_pending_request"),
    )


def downgrade() -> None:
    op.drop_table("mcp_pending_request")
    op.drop_index("ix_mcp_event_stream", table_name="mcp_event")
    op.drop_table("mcp_event")
    op.drop_index("ix_mcp_session_last_seen", table_name="mcp_session")
    op.drop_table("mcp_session")
