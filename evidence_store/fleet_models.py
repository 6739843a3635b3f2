"""ORM models of the node agents' tables: published device snapshots, admission history, driver
drift events and the warm plans built from history.

Kept apart from the evidence (``models.py``); ``evidence_store.metadata`` imports both, so its
``METADATA`` is complete for Alembic and the schema test. The migration
``2026-12-01_e5a7c9d2b418_agents`` builds these tables; their functions are ``published``,
``admission_log``, ``drift`` and ``warm_plans``.

* ``published_snapshots``: one row per device a node agent owns — the device's current snapshot by
  value, its driver version and when it was taken. ``device_id`` is what probes and reservations are
  keyed by (``Request.device_id``); ``ref`` is how a request names the device (``agent:NODE/NAME``).
  A probe queued for ``device_id`` is claimed only by the agent whose row this is. ``agent`` holds the
  device (node + name) until ``claim_expires_at``, renewed on every heartbeat: a second agent for the
  same device is refused while the claim is live, and a dead agent's claim lapses (migration
  ``2026-12-01_40fac08a1a46_agent_claims``).
* ``admission_log``: the admissions the service answered, one row per pair, device, verdict and label
  for each window of the service's history writer, with how many admissions it stands for and the
  newest one's request (documents by value); the source of the hot pairs a driver change revalidates
  and of ``canary warm --from-history``.
* ``drift_events``: a driver change an agent saw, what it marked stale and the probes it queued.
* ``warm_plans``: the plan ``canary warm --from-history`` built, stored with its run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from evidence_store.models import Base, UTCDateTime


class PublishedSnapshot(Base):
    __tablename__ = "published_snapshots"
    __table_args__ = (Index("ix_published_snapshots_node", "node"),)

    device_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    ref: Mapped[str] = mapped_column(String(200), unique=True)
    node: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(100))
    agent: Mapped[str] = mapped_column(String(200))
    device_type: Mapped[str] = mapped_column(String(100))
    driver_version: Mapped[str | None] = mapped_column(String(100))
    snapshot_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    taken_at: Mapped[datetime] = mapped_column(UTCDateTime())
    published_at: Mapped[datetime] = mapped_column(UTCDateTime())
    draining: Mapped[bool] = mapped_column(Boolean)
    claim_expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    """Until when ``agent`` holds the device; renewed by its heartbeat, set to the stop time when it stops."""


class AdmissionLog(Base):
    __tablename__ = "admission_log"
    __table_args__ = (Index("ix_admission_log_at", "at"), Index("ix_admission_log_device_type", "device_type"))

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    pair_digest: Mapped[str] = mapped_column(String(64))
    key_digests: Mapped[list[str]] = mapped_column(JSON)
    device_type: Mapped[str] = mapped_column(String(100))
    device_id: Mapped[str] = mapped_column(String(200))
    label: Mapped[str] = mapped_column(String(600))
    verdict: Mapped[str] = mapped_column(String(16))
    request_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The newest request of the row's admissions, documents by value."""
    requests: Mapped[int] = mapped_column(Integer, server_default="1")
    """How many admissions the row stands for: the service writes one row per pair, device, verdict and
    label for each window of its history writer (``admission_log.log_admissions``); ``at`` is the newest."""


class DriftEvent(Base):
    __tablename__ = "drift_events"
    __table_args__ = (Index("ix_drift_events_detected", "detected_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(200))
    node: Mapped[str] = mapped_column(String(200))
    device_type: Mapped[str] = mapped_column(String(100))
    old_driver: Mapped[str | None] = mapped_column(String(100))
    new_driver: Mapped[str | None] = mapped_column(String(100))
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    stale_marked: Mapped[int] = mapped_column(Integer)
    budget: Mapped[int] = mapped_column(Integer)
    probes_json: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    """One entry per queued revalidation probe: probe id, pair digest, key digests, label."""
    note: Mapped[str | None] = mapped_column(Text)


class WarmPlanRecord(Base):
    __tablename__ = "warm_plans"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    params_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    plan_json: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
