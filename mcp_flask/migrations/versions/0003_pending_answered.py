"""Index pending requests by answer time: waiting tools poll for new answers once per process.

Revision ID: mcp_0003
Revises: mcp_0002
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision: str = "mcp_0003"
down_revision: str | None = "mcp_0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_mcp_pending_request_answered", "mcp_pending_request", ["answered"])


def downgrade() -> None:
    op.drop_index("ix_mcp_pending_request_answered", table_name="mcp_pending_request")
