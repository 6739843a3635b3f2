"""serve probes by pair and end time: a request that looked before a probe of its pair finished joins it

Revision ID: 9c2d4e6f8a10
Revises: 40fac08a1a46
Create Date: 2026-12-01 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "9c2d4e6f8a10"
down_revision: str | Sequence[str] | None = "40fac08a1a46"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_serve_probes_pair_finished", "serve_probes", ["pair_digest", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_serve_probes_pair_finished", table_name="serve_probes")
