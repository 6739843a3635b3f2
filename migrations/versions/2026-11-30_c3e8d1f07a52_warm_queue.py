"""warm queue: fleet warm runs lease their pairs

Revision ID: c3e8d1f07a52
Revises: b7f4a2c8d913
Create Date: 2026-11-30 07:55:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c3e8d1f07a52"
down_revision: str | Sequence[str] | None = "b7f4a2c8d913"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "warm_queue",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("pair_json", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result_json", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_warm_queue"),
        sa.CheckConstraint("state IN ('queued', 'leased', 'done', 'failed')", name="ck_warm_queue_state"),
        sa.CheckConstraint("attempts >= 0", name="ck_warm_queue_attempts_non_negative"),
    )
    op.create_index("ix_warm_queue_run_state_lease", "warm_queue", ["run_id", "state", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_warm_queue_run_state_lease", table_name="warm_queue")
    op.drop_table("warm_queue")
