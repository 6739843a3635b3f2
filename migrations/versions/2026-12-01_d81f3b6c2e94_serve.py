"""serve: profile/snapshot registry, the service's probe queue, API tokens

Revision ID: d81f3b6c2e94
Revises: c3e8d1f07a52
Create Date: 2026-12-01 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d81f3b6c2e94"
down_revision: str | Sequence[str] | None = "c3e8d1f07a52"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "registry_entries",
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.String(200), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("document_json", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", "version", name="pk_registry_entries"),
        sa.CheckConstraint("kind IN ('profile', 'snapshot')", name="ck_registry_entries_kind"),
    )
    op.create_table(
        "serve_probes",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("pair_digest", sa.String(64), nullable=False),
        sa.Column("active_pair", sa.String(64), nullable=True),
        sa.Column("device_id", sa.String(200), nullable=False),
        sa.Column("active_device", sa.String(200), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("request_json", sa.JSON(), nullable=False),
        sa.Column("waiters", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("certificate_json", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_serve_probes"),
        sa.UniqueConstraint("active_pair", name="uq_serve_probes_active_pair"),
        sa.UniqueConstraint("active_device", name="uq_serve_probes_active_device"),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'cancelled', 'aborted')", name="ck_serve_probes_state"
        ),
        sa.CheckConstraint("waiters >= 1", name="ck_serve_probes_waiters_positive"),
    )
    op.create_index("ix_serve_probes_state_created", "serve_probes", ["state", "created_at"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("scopes", sa.String(200), nullable=False),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("secret_hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
    op.drop_index("ix_serve_probes_state_created", table_name="serve_probes")
    op.drop_table("serve_probes")
    op.drop_table("registry_entries")
