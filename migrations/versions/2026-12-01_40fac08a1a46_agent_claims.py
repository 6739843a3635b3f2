"""agent claims: until when the publishing agent holds a device (one live agent per node + device name)

Revision ID: 40fac08a1a46
Revises: f6b2d8e4a713
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "40fac08a1a46"
down_revision: str | Sequence[str] | None = "f6b2d8e4a713"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("published_snapshots") as batch:
        batch.add_column(sa.Column("claim_expires_at", sa.DateTime(timezone=True), nullable=True))
    # An existing row's claim lapsed with its last heartbeat: its agent renews it on the next one.
    op.execute("UPDATE published_snapshots SET claim_expires_at = published_at")
    with op.batch_alter_table("published_snapshots") as batch:
        batch.alter_column("claim_expires_at", existing_type=sa.DateTime(timezone=True), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("published_snapshots") as batch:
        batch.drop_column("claim_expires_at")
