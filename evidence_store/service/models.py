"""ORM models of the service's tables: the profile/snapshot registry, the probe queue, API tokens.

Kept apart from the evidence (``evidence_store.models``); ``evidence_store.metadata`` imports both, so its ``METADATA`` is complete for
Alembic and the schema test. The migration ``2026-12-01_d81f3b6c2e94_serve`` builds these tables.

The probe queue carries single flight and device exclusivity in the schema itself:

* ``active_pair`` holds the pair digest while a probe is queued or running and ``NULL`` afterwards; a
  unique constraint on it means at most one live probe per pair key, across every process that shares
  the store (NULLs do not collide on SQLite or PostgreSQL).
* ``active_device`` holds the device id while a probe runs; its unique constraint means never two
  running probes on one device.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, CheckConstraint, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from evidence_store.models import Base, UTCDateTime, _in

SERVE_PROBE_STATES = ("queued", "running", "done", "failed", "cancelled", "aborted")
REGISTRY_KINDS = ("profile", "snapshot")
TOKEN_SCOPES = ("read", "fit", "admit", "feedback", "admin")


class RegistryEntry(Base):
    """A profile or snapshot stored by value under ``name@version``; immutable once written."""

    __tablename__ = "registry_entries"
    __table_args__ = (CheckConstraint(_in("kind", REGISTRY_KINDS), name="kind"),)

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[str] = mapped_column(String(200), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    document_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ServeProbe(Base):
    """One probe the service owes its callers: queued → running → done | failed | cancelled | aborted."""

    __tablename__ = "serve_probes"
    __table_args__ = (
        UniqueConstraint("active_pair", name="uq_serve_probes_active_pair"),
        UniqueConstraint("active_device", name="uq_serve_probes_active_device"),
        Index("ix_serve_probes_state_created", "state", "created_at"),
        Index("ix_serve_probes_pair_finished", "pair_digest", "finished_at"),
        CheckConstraint(_in("state", SERVE_PROBE_STATES), name="state"),
        CheckConstraint("waiters >= 1", name="waiters_positive"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    pair_digest: Mapped[str] = mapped_column(String(64))
    active_pair: Mapped[str | None] = mapped_column(String(64))
    device_id: Mapped[str] = mapped_column(String(200))
    active_device: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16))
    request_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    waiters: Mapped[int] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean)
    owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    certificate_json: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ApiToken(Base):
    """A bearer token: only its scrypt hash is stored; the secret is shown once, when created."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    scopes: Mapped[str] = mapped_column(String(200))
    salt: Mapped[str] = mapped_column(String(64))
    secret_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
