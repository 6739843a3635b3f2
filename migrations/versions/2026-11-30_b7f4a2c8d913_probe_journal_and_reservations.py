"""probe journal, devices and reservations; evidence.stale_reason

Revision ID: b7f4a2c8d913
Revises: 5e1d0c3a9b21
Create Date: 2026-11-30 06:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7f4a2c8d913"
down_revision: str | Sequence[str] | None = "5e1d0c3a9b21"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Batch mode: on SQLite this is an ALTER where it can be and a table rebuild where it cannot.
    with op.batch_alter_table("evidence") as batch:
        batch.add_column(sa.Column("stale_reason", sa.Text(), nullable=True))

    op.create_table(
        "probe_journal",
        sa.Column("probe_id", sa.String(200), nullable=False),
        sa.Column("key_digest", sa.String(64), nullable=False),
        sa.Column("key_json", sa.JSON(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pgid", sa.Integer(), nullable=False),
        sa.Column("budget_json", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("result_json", sa.JSON(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("probe_id", name="pk_probe_journal"),
        sa.CheckConstraint(
            "state IN ('running', 'decided', 'aborted', 'rolled_back', 'recorded', 'failed')",
            name="ck_probe_journal_state",
        ),
    )
    op.create_index("ix_probe_journal_state_lease", "probe_journal", ["state", "lease_expires_at"])

    op.create_table(
        "devices",
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("first_reserved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("device_id", name="pk_devices"),
    )

    op.create_table(
        "reservations",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("mps_pct", sa.Float(), nullable=True),
        sa.Column("mig_instance", sa.String(100), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_reservations"),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name="fk_reservations_device_id_devices"
        ),
        sa.CheckConstraint("memory_bytes >= 0", name="ck_reservations_memory_non_negative"),
        sa.CheckConstraint(
            "mps_pct IS NULL OR (mps_pct > 0 AND mps_pct <= 100)", name="ck_reservations_mps_pct"
        ),
    )
    op.create_index("ix_reservations_device_expiry", "reservations", ["device_id", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_reservations_device_expiry", table_name="reservations")
    op.drop_table("reservations")
    op.drop_table("devices")
    op.drop_index("ix_probe_journal_state_lease", table_name="probe_journal")
    op.drop_table("probe_journal")
    with op.batch_alter_table("evidence") as batch:
        batch.drop_column("stale_reason")
