"""evidence and certificates

Revision ID: 5e1d0c3a9b21
Revises:
Create Date: 2026-11-30 06:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5e1d0c3a9b21"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evidence",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("key_digest", sa.String(64), nullable=False),
        sa.Column("resident_version", sa.String(200), nullable=False),
        sa.Column("resident_shape_family", sa.String(200), nullable=False),
        sa.Column("candidate_version", sa.String(200), nullable=False),
        sa.Column("candidate_shape_family", sa.String(200), nullable=False),
        sa.Column("device_type", sa.String(100), nullable=False),
        sa.Column("regime", sa.String(100), nullable=False),
        sa.Column("driver_version", sa.String(100), nullable=True),
        sa.Column("cuda_version", sa.String(100), nullable=True),
        sa.Column("device_uuid", sa.String(200), nullable=True),
        sa.Column("probe_id", sa.String(200), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("resident_slowdown", sa.Float(), nullable=True),
        sa.Column("resident_slowdown_low", sa.Float(), nullable=True),
        sa.Column("resident_slowdown_high", sa.Float(), nullable=True),
        sa.Column("candidate_slowdown", sa.Float(), nullable=True),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("exposure_used", sa.BigInteger(), nullable=False),
        sa.Column("time_used_s", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("superseded_by", sa.String(36), nullable=True),
        sa.Column("revoked_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_evidence"),
        sa.UniqueConstraint("probe_id", name="uq_evidence_probe_id"),
        sa.ForeignKeyConstraint(
            ["superseded_by"], ["evidence.id"], name="fk_evidence_superseded_by_evidence"
        ),
        sa.CheckConstraint("source IN ('canary', 'production', 'import')", name="ck_evidence_source"),
        sa.CheckConstraint(
            "outcome IN ('safe', 'unsafe', 'inconclusive', 'aborted')", name="ck_evidence_outcome"
        ),
        sa.CheckConstraint("status IN ('current', 'stale', 'revoked')", name="ck_evidence_status"),
        sa.CheckConstraint(
            "samples >= 0 AND exposure_used >= 0 AND time_used_s >= 0", name="ck_evidence_non_negative"
        ),
        sa.CheckConstraint(
            "confidence IS NULL OR (confidence >= 0 AND confidence <= 1)", name="ck_evidence_confidence"
        ),
    )
    op.create_index("ix_evidence_lookup", "evidence", ["key_digest", "status", "expires_at"])
    op.create_index("ix_evidence_created_at", "evidence", ["created_at"])

    op.create_table(
        "certificates",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("certificate_json", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_certificates"),
    )
    op.create_index("ix_certificates_digest", "certificates", ["digest"])

    op.create_table(
        "certificate_evidence",
        sa.Column("certificate_id", sa.String(36), nullable=False),
        sa.Column("evidence_id", sa.String(36), nullable=False),
        sa.PrimaryKeyConstraint("certificate_id", "evidence_id", name="pk_certificate_evidence"),
        sa.ForeignKeyConstraint(
            ["certificate_id"],
            ["certificates.id"],
            name="fk_certificate_evidence_certificate_id_certificates",
        ),
        sa.ForeignKeyConstraint(
            ["evidence_id"], ["evidence.id"], name="fk_certificate_evidence_evidence_id_evidence"
        ),
    )
    op.create_index("ix_certificate_evidence_evidence_id", "certificate_evidence", ["evidence_id"])


def downgrade() -> None:
    op.drop_index("ix_certificate_evidence_evidence_id", table_name="certificate_evidence")
    op.drop_table("certificate_evidence")
    op.drop_index("ix_certificates_digest", table_name="certificates")
    op.drop_table("certificates")
    op.drop_index("ix_evidence_created_at", table_name="evidence")
    op.drop_index("ix_evidence_lookup", table_name="evidence")
    op.drop_table("evidence")
