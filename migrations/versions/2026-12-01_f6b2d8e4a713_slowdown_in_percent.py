"""slowdown in percent: the store keeps the unit the probe, the judge and the certificate use

The evidence table kept slowdowns as fractions (0.12) while everything above it spoke percent (12.0),
and six places converted. The columns are renamed with a ``_pct`` suffix and their values multiplied
by 100, so a stored number means what it means everywhere else.

Revision ID: f6b2d8e4a713
Revises: e5a7c9d2b418
Create Date: 2026-12-01 17:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f6b2d8e4a713"
down_revision: str | Sequence[str] | None = "e5a7c9d2b418"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("resident_slowdown", "resident_slowdown_low", "resident_slowdown_high", "candidate_slowdown")


def upgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        for name in COLUMNS:
            batch.alter_column(name, new_column_name=f"{name}_pct", existing_type=sa.Float())
    op.execute(
        "UPDATE evidence SET " + ", ".join(f"{name}_pct = {name}_pct * 100" for name in COLUMNS)
    )


def downgrade() -> None:
    op.execute(
        "UPDATE evidence SET " + ", ".join(f"{name}_pct = {name}_pct / 100" for name in COLUMNS)
    )
    with op.batch_alter_table("evidence") as batch:
        for name in COLUMNS:
            batch.alter_column(f"{name}_pct", new_column_name=name, existing_type=sa.Float())
