"""evidence status time: when a record became stale or revoked

Revision ID: fa1f2187b9d5
Revises: a3e8c1f5d207
Create Date: 2026-12-03 10:40:00

Records whose status changed before this revision keep NULL: that time was never kept, and is not
guessed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "fa1f2187b9d5"
down_revision: str | Sequence[str] | None = "a3e8c1f5d207"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.add_column(sa.Column("status_changed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.drop_column("status_changed_at")
