"""Driver drift events: a driver change an agent (or ``canary revalidate``) saw, what it marked stale and
the revalidation probes it queued; ``drift_report`` compares each pair's outcome before and after.

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.fleet_models import DriftEvent
from evidence_store.models import Evidence
from evidence_store.schemas import to_utc
from evidence_store.service.models import ServeProbe


def record_drift(session: Session, *, device_id: str, node: str, device_type: str, old_driver: str | None,
                 new_driver: str | None, stale_marked: int, budget: int, probes: list[dict[str, Any]],
                 now: datetime, note: str | None = None) -> str:
    event_id = str(uuid.uuid4())
    session.add(DriftEvent(id=event_id, device_id=device_id, node=node, device_type=device_type,
                           old_driver=old_driver, new_driver=new_driver, detected_at=to_utc(now),
                           stale_marked=stale_marked, budget=budget, probes_json=list(probes), note=note))
    session.flush()
    return event_id


def list_drift(session: Session, *, limit: int = 50) -> list[DriftEvent]:
    return list(session.scalars(select(DriftEvent).order_by(DriftEvent.detected_at.desc()).limit(limit)).all())


def get_drift(session: Session, event_id: str) -> DriftEvent | None:
    return session.get(DriftEvent, event_id)


def _newest(session: Session, key_digest: str, device_type: str, driver: str | None) -> Evidence | None:
    query = select(Evidence).where(Evidence.key_digest == key_digest, Evidence.device_type == device_type,
                                   Evidence.status.in_(("current", "stale", "superseded")))
    query = query.where(Evidence.driver_version.is_(None) if driver is None else Evidence.driver_version == driver)
    return session.scalars(query.order_by(Evidence.created_at.desc()).limit(1)).first()


def drift_report(session: Session, event_id: str) -> dict[str, Any]:
    """Old vs new outcome and resident slowdown, per revalidated pair key, with the probe's state."""
    event = session.get(DriftEvent, event_id)
    if event is None:
        raise InputError(f"no drift event {event_id!r}", field="id")
    rows: list[dict[str, Any]] = []
    for entry in event.probes_json:
        probe = session.get(ServeProbe, entry["probe_id"])
        for key in entry["key_digests"]:
            old = _newest(session, key, event.device_type, event.old_driver)
            new = _newest(session, key, event.device_type, event.new_driver)
            rows.append({
                "label": entry["label"], "key_digest": key, "probe_id": entry["probe_id"],
                "probe_state": None if probe is None else probe.state,
                "old_outcome": None if old is None else old.outcome,
                "old_slowdown_pct": None if old is None else old.resident_slowdown_pct,
                "old_status": None if old is None else old.status,
                "new_outcome": None if new is None else new.outcome,
                "new_slowdown_pct": None if new is None else new.resident_slowdown_pct,
                "change_pct": None if old is None or new is None or old.resident_slowdown_pct is None
                or new.resident_slowdown_pct is None else new.resident_slowdown_pct - old.resident_slowdown_pct,
            })
    return {"id": event.id, "device_id": event.device_id, "node": event.node, "device_type": event.device_type,
            "old_driver": event.old_driver, "new_driver": event.new_driver,
            "detected_at": event.detected_at.isoformat(), "stale_marked": event.stale_marked,
            "budget": event.budget, "note": event.note, "pairs": rows}
