"""ORM models (SQLAlchemy 2.x typed declarative). The migrations in ``migrations/versions`` build exactly
this schema; a test compares the two.

Columns are nullable only where a value can truly be absent (a driver version an import did not know,
an interval a probe could not estimate, a release that has not happened).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from canary._model import PairKey

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones, so the value is stored as naive UTC and
    read back with UTC attached. A naive value is refused rather than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive timestamp {value.isoformat()} given to the evidence store; use UTC")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Evidence(Base):
    __tablename__ = "evidence"
    __table_args__ = (
        Index("ix_evidence_lookup", "key_digest", "status", "expires_at"),
        Index("ix_evidence_created_at", "created_at"),
        CheckConstraint(_in("source", ("canary", "production", "import")), name="source"),
        CheckConstraint(_in("outcome", ("safe", "unsafe", "inconclusive", "aborted")), name="outcome"),
        CheckConstraint(_in("status", ("current", "stale", "revoked")), name="status"),
        CheckConstraint("samples >= 0 AND exposure_used >= 0 AND time_used_s >= 0", name="non_negative"),
        CheckConstraint("confidence IS NULL OR (confidence >= 0 AND confidence <= 1)", name="confidence"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    key_digest: Mapped[str] = mapped_column(String(64))
    resident_version: Mapped[str] = mapped_column(String(200))
    resident_shape_family: Mapped[str] = mapped_column(String(200))
    candidate_version: Mapped[str] = mapped_column(String(200))
    candidate_shape_family: Mapped[str] = mapped_column(String(200))
    device_type: Mapped[str] = mapped_column(String(100))
    regime: Mapped[str] = mapped_column(String(100))
    driver_version: Mapped[str | None] = mapped_column(String(100))
    cuda_version: Mapped[str | None] = mapped_column(String(100))
    device_uuid: Mapped[str | None] = mapped_column(String(200))
    probe_id: Mapped[str] = mapped_column(String(200), unique=True)
    source: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str] = mapped_column(String(16))
    resident_slowdown_pct: Mapped[float | None] = mapped_column(Float)
    resident_slowdown_low_pct: Mapped[float | None] = mapped_column(Float)
    resident_slowdown_high_pct: Mapped[float | None] = mapped_column(Float)
    candidate_slowdown_pct: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(BigInteger)
    exposure_used: Mapped[int] = mapped_column(BigInteger)
    time_used_s: Mapped[float] = mapped_column(Float)
    confidence: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(16))
    superseded_by: Mapped[str | None] = mapped_column(String(36), ForeignKey("evidence.id"))
    revoked_reason: Mapped[str | None] = mapped_column(Text)
    stale_reason: Mapped[str | None] = mapped_column(Text)
    # Imported records only: the file, the source the exporting store gave, and when it was imported.
    origin: Mapped[str | None] = mapped_column(Text)
    # When the record became stale or revoked; NULL while current, and for records whose status changed
    # before the store kept this time (revision fa1f2187b9d5).
    status_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    @property
    def key(self) -> PairKey:
        """The pair key the record is about, assembled from its columns (not a column itself)."""
        return PairKey(
            resident_version=self.resident_version,
            resident_shape_family=self.resident_shape_family,
            candidate_version=self.candidate_version,
            candidate_shape_family=self.candidate_shape_family,
            device_type=self.device_type,
            regime=self.regime,
        )


class Certificate(Base):
    __tablename__ = "certificates"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), index=True)
    certificate_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    recorded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class CertificateEvidence(Base):
    __tablename__ = "certificate_evidence"

    certificate_id: Mapped[str] = mapped_column(String(36), ForeignKey("certificates.id"), primary_key=True)
    evidence_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("evidence.id"), primary_key=True, index=True
    )


class ProbeJournal(Base):
    __tablename__ = "probe_journal"
    __table_args__ = (
        Index("ix_probe_journal_state_lease", "state", "lease_expires_at"),
        CheckConstraint(
            _in("state", ("running", "decided", "aborted", "rolled_back", "recorded", "failed")), name="state"
        ),
    )

    probe_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    key_digest: Mapped[str] = mapped_column(String(64))
    key_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    owner: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    pgid: Mapped[int] = mapped_column(Integer)
    budget_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    result_json: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    lease_expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Device(Base):
    """One row per device that was ever booked: the row reservations lock (``SELECT … FOR UPDATE``)."""

    __tablename__ = "devices"

    device_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    first_reserved_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Reservation(Base):
    __tablename__ = "reservations"
    __table_args__ = (
        Index("ix_reservations_device_expiry", "device_id", "expires_at"),
        CheckConstraint("memory_bytes >= 0", name="memory_non_negative"),
        CheckConstraint("mps_pct IS NULL OR (mps_pct > 0 AND mps_pct <= 100)", name="mps_pct"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(200), ForeignKey("devices.device_id"))
    holder: Mapped[str] = mapped_column(String(200))
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    mps_pct: Mapped[float | None] = mapped_column(Float)
    mig_instance: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class WarmQueue(Base):
    """Work items of a fleet warm run: one row per planned pair; nodes lease them with
    ``SELECT … FOR UPDATE SKIP LOCKED`` so no pair is probed twice in a run."""

    __tablename__ = "warm_queue"
    __table_args__ = (
        Index("ix_warm_queue_run_state_lease", "run_id", "state", "lease_expires_at"),
        CheckConstraint(_in("state", ("queued", "leased", "done", "failed")), name="state"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
    )

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(Integer)
    pair_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    result_json: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
