"""evidence origin: where an imported record came from

Revision ID: d4a7e2b91c06
Revises: d81f3b6c2e94
Create Date: 2026-12-01 14:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d4a7e2b91c06"
down_revision: str | Sequence[str] | None = "d81f3b6c2e94"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.add_column(sa.Column("origin", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.drop_column("origin")
