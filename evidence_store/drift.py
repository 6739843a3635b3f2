"""Driver drift events: a driver change an agent (or ``canary revalidate``) saw, what it marked stale and
the revalidation probes it queued; ``drift_report`` compares each pair's outcome before and after.

An event is a record of its moment: ``record_drift`` pins, per pair key, the newest record under the old
driver as it stood when the change was detected, and ``record_reprobes`` (revalidate) pins the records
its own re-probes wrote. A later warm run that writes records under either driver changes neither side
of an event already recorded (it used to: the report looked up the newest records when it was shown).

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from canary.errors import InputError
from evidence_store.fleet_models import DriftEvent
from evidence_store.models import Evidence
from evidence_store.schemas import to_utc
from evidence_store.service.models import ServeProbe


def record_drift(session: Session, *, device_id: str, node: str, device_type: str, old_driver: str | None,
                 new_driver: str | None, stale_marked: int, budget: int, probes: list[dict[str, Any]],
                 now: datetime, note: str | None = None) -> str:
    """Record a driver change seen at ``now``; each entry of ``probes`` gets ``old``: per key digest, the
    newest record under ``old_driver`` created up to ``now`` (id, outcome, slowdown, status then), or
    ``None`` where there was none."""
    event_id = str(uuid.uuid4())
    now = to_utc(now)
    pinned = [{**entry, "old": {key: _snapshot(_pick(session, key, device_type, old_driver, until=now))
                                for key in entry["key_digests"]}} for entry in probes]
    session.add(DriftEvent(id=event_id, device_id=device_id, node=node, device_type=device_type,
                           old_driver=old_driver, new_driver=new_driver, detected_at=now,
                           stale_marked=stale_marked, budget=budget, probes_json=pinned, note=note))
    session.flush()
    return event_id


def record_reprobes(session: Session, event_id: str, statuses: dict[int, str]) -> None:
    """Pin what the event's own re-probes found (``canary revalidate --plan``): for each entry whose plan
    index is in ``statuses``, its status in that run and, per key digest, the newest record under the
    new driver created since the event (the one the re-probe wrote), or ``None``."""
    event = session.get(DriftEvent, event_id)
    if event is None:
        raise InputError(f"no drift event {event_id!r}", field="id")
    entries = []
    for entry in event.probes_json:
        index = entry.get("index")
        if isinstance(index, int) and index in statuses:
            entry = {**entry, "status": statuses[index],
                     "new": {key: _snapshot(_pick(session, key, event.device_type, event.new_driver,
                                                  since=event.detected_at, newest=True))
                             for key in entry["key_digests"]}}
        entries.append(entry)
    event.probes_json = entries
    flag_modified(event, "probes_json")
    session.flush()


def list_drift(session: Session, *, limit: int = 50) -> list[DriftEvent]:
    return list(session.scalars(select(DriftEvent).order_by(DriftEvent.detected_at.desc()).limit(limit)).all())


def get_drift(session: Session, event_id: str) -> DriftEvent | None:
    return session.get(DriftEvent, event_id)


def resolve_drift(session: Session, text: str) -> DriftEvent:
    """The event whose id is ``text`` or starts with it (as evidence and reservation ids are taken).
    ``InputError`` (field ``ID``) when none matches, or when the prefix matches several (named)."""
    event = session.get(DriftEvent, text)
    if event is not None:
        return event
    matches = list(session.scalars(select(DriftEvent).where(DriftEvent.id.startswith(text, autoescape=True))
                                   .order_by(DriftEvent.id).limit(11)).all()) if text else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InputError(f"no drift event {text!r} (canary drift lists them)", field="ID")
    names = ", ".join(m.id for m in matches[:10]) + (", …" if len(matches) > 10 else "")
    raise InputError(f"{text!r} is the start of {len(matches) if len(matches) <= 10 else 'more than 10'} drift "
                     f"event ids ({names}): give more of it", field="ID")


def probed_count(session: Session, event: DriftEvent) -> int:
    """How many of the event's pairs were probed again: a revalidation's entries say so (their status
    in its run); an agent's queued probe counts once a record under the new driver exists since the
    event. A pair that did not fit, was fresh or was skipped is not counted."""
    count = 0
    for entry in event.probes_json:
        if "status" in entry:
            count += entry["status"] == "probed"
        elif any(_pick(session, key, event.device_type, event.new_driver, since=event.detected_at) is not None
                 for key in entry["key_digests"]):
            count += 1
    return count


def _pick(session: Session, key_digest: str, device_type: str, driver: str | None, *,
          until: datetime | None = None, since: datetime | None = None, newest: bool = False) -> Evidence | None:
    """A record of the pair key under ``driver``: the newest created up to ``until``, or (``since``) the
    first created from then on (``newest``: the last)."""
    query = select(Evidence).where(Evidence.key_digest == key_digest, Evidence.device_type == device_type,
                                   Evidence.status.in_(("current", "stale", "superseded")))
    query = query.where(Evidence.driver_version.is_(None) if driver is None else Evidence.driver_version == driver)
    if until is not None:
        query = query.where(Evidence.created_at <= to_utc(until)).order_by(Evidence.created_at.desc())
    elif since is not None:
        query = query.where(Evidence.created_at >= to_utc(since))
        query = query.order_by(Evidence.created_at.desc() if newest else Evidence.created_at.asc())
    return session.scalars(query.limit(1)).first()


def _snapshot(record: Evidence | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"evidence_id": record.id, "outcome": record.outcome, "slowdown_pct": record.resident_slowdown_pct,
            "status": record.status, "created_at": to_utc(record.created_at).isoformat()}


def _side(entry: dict[str, Any], side: str, key: str, fallback: Any) -> dict[str, Any] | None:
    """What the event pinned for ``side`` of ``key``; events recorded before pinning: ``fallback()``."""
    pinned = entry.get(side)
    if isinstance(pinned, dict):
        value = pinned.get(key)
        return value if isinstance(value, dict) else None
    return _snapshot(fallback())


def drift_report(session: Session, event_id: str) -> dict[str, Any]:
    """Old vs new outcome and resident slowdown, per revalidated pair key, with the probe's state: old is
    the record the event pinned when it was detected, new the one its re-probe wrote (events recorded
    before pinning: the newest old-driver record created up to the event, the first new-driver record
    created since). ``event_id`` may be a unique prefix."""
    event = resolve_drift(session, event_id)
    rows: list[dict[str, Any]] = []
    for entry in event.probes_json:
        probe = session.get(ServeProbe, entry["probe_id"])
        for key in entry["key_digests"]:
            old = _side(entry, "old", key, lambda k=key: _pick(session, k, event.device_type, event.old_driver,
                                                                until=event.detected_at))
            new = _side(entry, "new", key, lambda k=key: _pick(session, k, event.device_type, event.new_driver,
                                                                since=event.detected_at))
            old_pct = None if old is None else old["slowdown_pct"]
            new_pct = None if new is None else new["slowdown_pct"]
            rows.append({
                "label": entry["label"], "key_digest": key, "probe_id": entry["probe_id"],
                "probe_state": entry.get("status") or (None if probe is None else probe.state),
                "old_evidence_id": None if old is None else old["evidence_id"],
                "old_outcome": None if old is None else old["outcome"],
                "old_slowdown_pct": old_pct,
                "old_status": None if old is None else old["status"],
                "new_evidence_id": None if new is None else new["evidence_id"],
                "new_outcome": None if new is None else new["outcome"],
                "new_slowdown_pct": new_pct,
                "change_pct": None if old_pct is None or new_pct is None else new_pct - old_pct,
            })
    return {"id": event.id, "device_id": event.device_id, "node": event.node, "device_type": event.device_type,
            "old_driver": event.old_driver, "new_driver": event.new_driver,
            "detected_at": event.detected_at.isoformat(), "stale_marked": event.stale_marked,
            "budget": event.budget, "note": event.note, "pairs": rows}
