"""Index elicitations by (state_id, request_key), the two columns a redemption names.

With only single-column indexes, SQLite's planner (no statistics) answered a 2026-07-28
redemption through the status index, walking every pending row: 5.8 ms per redemption with
50,000 pending questions. The composite index also serves lookups by state_id alone.

Revision ID: mcp_0004
Revises: mcp_0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision: str = "mcp_0004"
down_revision: str | None = "mcp_0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_mcp_elicitation_state", "mcp_elicitation", ["state_id", "request_key"])
    op.drop_index("ix_mcp_elicitation_state_id", table_name="mcp_elicitation")


def downgrade() -> None:
    op.create_index("ix_mcp_elicitation_state_id", "mcp_elicitation", ["state_id"])
    op.drop_index("ix_mcp_elicitation_state", table_name="mcp_elicitation")
