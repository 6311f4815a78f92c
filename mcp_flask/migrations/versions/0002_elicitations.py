"""Elicitations of both protocol eras, 2026-07-28 request states, worker heartbeats.

Revision ID: mcp_0002
Revises: mcp_0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "mcp_0002"
down_revision: str | None = "mcp_0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_request_state",
        sa.Column("state_id", sa.String(32), nullable=False),
        sa.Column("server_name", sa.String(200), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("args_digest", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consumed", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("state_id", name="pk_mcp_request_state"),
    )
    op.create_index("ix_mcp_request_state_expires", "mcp_request_state", ["expires"])
    op.create_table(
        "mcp_worker",
        sa.Column("worker_id", sa.String(255), nullable=False),
        sa.Column("last_beat", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name="pk_mcp_worker"),
    )
    op.create_table(
        "mcp_elicitation",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("server_name", sa.String(200), nullable=False),
        sa.Column("tool", sa.String(200), nullable=True),
        sa.Column("session_id", sa.String(64), nullable=True),
        sa.Column("state_id", sa.String(32), nullable=True),
        sa.Column("request_key", sa.String(200), nullable=False),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("mode", sa.String(8), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("requested_schema", sa.Text(), nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("elicitation_id", sa.String(255), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("stream_key", sa.String(64), nullable=True),
        sa.Column("call_id", sa.String(255), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mcp_elicitation"),
    )
    op.create_index("ix_mcp_elicitation_state_id", "mcp_elicitation", ["state_id"])
    op.create_index("ix_mcp_elicitation_elicitation_id", "mcp_elicitation", ["elicitation_id"])
    op.create_index("ix_mcp_elicitation_status", "mcp_elicitation", ["status"])
    op.create_index("ix_mcp_elicitation_request", "mcp_elicitation", ["session_id", "request_key"])
    op.create_index("ix_mcp_elicitation_stream", "mcp_elicitation", ["session_id", "stream_key"])


def downgrade() -> None:
    op.drop_index("ix_mcp_elicitation_stream", table_name="mcp_elicitation")
    op.drop_index("ix_mcp_elicitation_request", table_name="mcp_elicitation")
    op.drop_index("ix_mcp_elicitation_status", table_name="mcp_elicitation")
    op.drop_index("ix_mcp_elicitation_elicitation_id", table_name="mcp_elicitation")
    op.drop_index("ix_mcp_elicitation_state_id", table_name="mcp_elicitation")
    op.drop_table("mcp_elicitation")
    op.drop_table("mcp_worker")
    op.drop_index("ix_mcp_request_state_expires", table_name="mcp_request_state")
    op.drop_table("mcp_request_state")
