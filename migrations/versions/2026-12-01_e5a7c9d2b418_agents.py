"""agents: published device snapshots, admission history, drift events, warm plans from history

Revision ID: e5a7c9d2b418
Revises: d4a7e2b91c06
Create Date: 2026-12-01 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e5a7c9d2b418"
down_revision: str | Sequence[str] | None = "d4a7e2b91c06"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "published_snapshots",
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("ref", sa.String(200), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("device_type", sa.String(100), nullable=False),
        sa.Column("driver_version", sa.String(100), nullable=True),
        sa.Column("snapshot_json", sa.JSON(), nullable=False),
        sa.Column("taken_at", TS, nullable=False),
        sa.Column("published_at", TS, nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("device_id", name="pk_published_snapshots"),
        sa.UniqueConstraint("ref", name="uq_published_snapshots_ref"),
    )
    op.create_index("ix_published_snapshots_node", "published_snapshots", ["node"])
    op.create_table(
        "admission_log",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("pair_digest", sa.String(64), nullable=False),
        sa.Column("key_digests", sa.JSON(), nullable=False),
        sa.Column("device_type", sa.String(100), nullable=False),
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("label", sa.String(600), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("request_json", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_admission_log"),
    )
    op.create_index("ix_admission_log_at", "admission_log", ["at"])
    op.create_index("ix_admission_log_device_type", "admission_log", ["device_type"])
    op.create_table(
        "drift_events",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("device_type", sa.String(100), nullable=False),
        sa.Column("old_driver", sa.String(100), nullable=True),
        sa.Column("new_driver", sa.String(100), nullable=True),
        sa.Column("detected_at", TS, nullable=False),
        sa.Column("stale_marked", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("probes_json", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_drift_events"),
    )
    op.create_index("ix_drift_events_detected", "drift_events", ["detected_at"])
    op.create_table(
        "warm_plans",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("params_json", sa.JSON(), nullable=False),
        sa.Column("plan_json", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_warm_plans"),
    )


def downgrade() -> None:
    op.drop_table("warm_plans")
    op.drop_index("ix_drift_events_detected", table_name="drift_events")
    op.drop_table("drift_events")
    op.drop_index("ix_admission_log_device_type", table_name="admission_log")
    op.drop_index("ix_admission_log_at", table_name="admission_log")
    op.drop_table("admission_log")
    op.drop_index("ix_published_snapshots_node", table_name="published_snapshots")
    op.drop_table("published_snapshots")
