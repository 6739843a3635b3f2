"""Node agents in the store: published snapshots, admission history, drift events, warm plans.

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
Probes for an agent's devices go through the service's probe queue (``evidence_store.probe_queue``):
a probe is queued for a ``device_id`` and claimed — ``SELECT … FOR UPDATE SKIP LOCKED`` — only by the
agent that publishes that device (``claim_next(devices=…)``), so a probe never runs on another node's
GPU. Server processes leave those probes alone (``claim_next(exclude=…)``).

One live agent per device: the agent that publishes a device (node + name, or its UUID) holds it until
``claim_expires_at``, which every heartbeat renews; another agent that tries to publish it meanwhile gets
``DeviceClaimed`` naming the holder. A stopped agent releases its claims; a dead one's lapse.

The admission history is kept for ``ADMISSION_LOG_RETENTION_DAYS`` unless the operator says otherwise
(``prune_admission_log``: ``canary db prune``, and every agent's loop).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select, text
from sqlalchemy.orm import Session

from canary.errors import InputError, OperationalError
from evidence_store.fleet_models import AdmissionLog, DriftEvent, PublishedSnapshot, WarmPlanRecord
from evidence_store.models import Evidence
from evidence_store.probe_queue import ProbeTicket, _close, _ticket
from evidence_store.schemas import to_utc
from evidence_store.serve_models import ServeProbe

AGENT_REF_PREFIX = "agent:"
ADMISSION_LOG_RETENTION_DAYS = 30.0
"""How long the admission history is kept by default: longer than any ``--since`` window the nightly
warm job or revalidation ranks from (7 days by default), short enough that the table stays small."""
PRUNE_BATCH = 5000
NOTIFY_CHANNEL = "canary_probe_queued"
"""PostgreSQL channel: a new probe's ``device_id`` is announced on it when its transaction commits, so the
agent that owns the device claims it at once instead of at its next poll (SQLite: agents poll)."""


def notify_queued(session: Session, device_id: str) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :device)"), {"channel": NOTIFY_CHANNEL, "device": device_id})


def submit_and_notify(session: Session, **kwargs: Any) -> tuple[ProbeTicket, bool]:
    """``probe_queue.submit`` that announces a newly queued probe to the agents."""
    from evidence_store import probe_queue

    ticket, joined = probe_queue.submit(session, **kwargs)
    if not joined:
        notify_queued(session, ticket.device_id)
    return ticket, joined


def agent_ref(node: str, name: str) -> str:
    """How a request names an agent's device: ``agent:NODE/NAME``."""
    for what, value in (("node", node), ("device name", name)):
        if not value or "/" in value or any(c.isspace() for c in value):
            raise InputError(f"{value!r}: a {what} is non-empty, without '/' or spaces", field=what)
    return f"{AGENT_REF_PREFIX}{node}/{name}"


def agent_device_id(ref: str, device_uuid: str | None) -> str:
    """What probes and reservations of the device are keyed by; equals ``Request.device_id`` of a
    request resolved from the published snapshot (kind ``published``)."""
    return device_uuid or f"snapshot:{ref}"


class DeviceClaimed(OperationalError):
    """Another agent that is still alive (its claim not expired) publishes the device: two agents must
    never run probes for one GPU. ``holders`` maps each refused device ref to the holder's description."""

    def __init__(self, holders: dict[str, str]) -> None:
        self.holders = dict(holders)
        held = "; ".join(f"{ref} is held by {who}" for ref, who in sorted(holders.items()))
        super().__init__(f"{held}: one agent per device — stop that agent (its claim is released when it stops; "
                         "a dead agent's claim lapses after its claim time) or give this agent other devices")


def _holder(row: PublishedSnapshot, now: datetime) -> str:
    beat = (now - row.published_at).total_seconds()
    left = (row.claim_expires_at - now).total_seconds()
    return (f"agent {row.agent} (last heartbeat {beat:.0f} s ago, claim expires in {left:.0f} s "
            f"at {row.claim_expires_at.isoformat(timespec='seconds')})")


def _held_by_other(row: PublishedSnapshot | None, agent: str, now: datetime) -> bool:
    return row is not None and row.agent != agent and to_utc(row.claim_expires_at) > now


def claim_conflicts(session: Session, *, node: str, names: Sequence[str], agent: str, now: datetime) -> dict[str, str]:
    """The devices among ``node``/``names`` that another live agent holds, ref → the holder (an agent's
    check before its first heartbeat; ``publish`` checks again under the row lock)."""
    now = to_utc(now)
    refs = [agent_ref(node, n) for n in names]
    rows = session.scalars(select(PublishedSnapshot).where(PublishedSnapshot.ref.in_(refs))).all()
    return {r.ref: _holder(r, now) for r in rows if _held_by_other(r, agent, now)}


def renew_claim(session: Session, *, node: str, name: str, agent: str, now: datetime, claim_s: float) -> bool:
    """Keep ``agent``'s claim on a device it could not read this heartbeat, without refreshing the
    snapshot (which goes stale, so decisions on it answer unknown). Raises ``DeviceClaimed`` when
    another live agent holds it; returns whether a claim of ``agent``'s was renewed."""
    now = to_utc(now)
    row = session.scalars(select(PublishedSnapshot).where(PublishedSnapshot.ref == agent_ref(node, name))
                          .with_for_update()).first()
    if row is None:
        return False
    if _held_by_other(row, agent, now):
        raise DeviceClaimed({row.ref: _holder(row, now)})
    if row.agent != agent:
        return False
    row.claim_expires_at = now + timedelta(seconds=claim_s)
    session.flush()
    return True


def release_claims(session: Session, *, agent: str, now: datetime) -> int:
    """A stopping agent gives its devices up at once (their snapshots stay, and go stale)."""
    rows = session.scalars(select(PublishedSnapshot).where(PublishedSnapshot.agent == agent)).all()
    for row in rows:
        row.claim_expires_at = min(to_utc(row.claim_expires_at), to_utc(now))
    session.flush()
    return len(rows)


@dataclass(frozen=True, slots=True)
class Published:
    device_id: str
    ref: str
    node: str
    name: str
    agent: str
    device_type: str
    driver_version: str | None
    snapshot_json: dict[str, Any]
    taken_at: datetime
    published_at: datetime
    draining: bool
    claim_expires_at: datetime

    def age_s(self, now: datetime) -> float:
        return (to_utc(now) - self.taken_at).total_seconds()


def _published(row: PublishedSnapshot) -> Published:
    return Published(row.device_id, row.ref, row.node, row.name, row.agent, row.device_type, row.driver_version,
                     dict(row.snapshot_json), row.taken_at, row.published_at, row.draining,
                     row.claim_expires_at)


@dataclass(frozen=True, slots=True)
class PublishResult:
    published: Published
    previous_driver: str | None
    driver_changed: bool
    """True when the device was published before under another driver version."""


def publish(session: Session, *, node: str, name: str, agent: str, snapshot_json: dict[str, Any],
            device_type: str, driver_version: str | None, device_uuid: str | None, taken_at: datetime,
            now: datetime, claim_s: float, draining: bool | None = None) -> PublishResult:
    """Insert or refresh the device's row (the agent's heartbeat) and renew ``agent``'s claim on it for
    ``claim_s``. Raises ``DeviceClaimed`` when another agent's claim on the name or on the device (its
    UUID) is still live. ``draining=None`` keeps what the row says (``canary agent drain`` sets it while
    the agent runs)."""
    if not claim_s > 0:
        raise InputError(f"must be positive, got {claim_s}", field="claim_s")
    ref = agent_ref(node, name)
    device_id = agent_device_id(ref, device_uuid)
    now, taken_at = to_utc(now), to_utc(taken_at)
    claim_until = now + timedelta(seconds=claim_s)
    row = session.get(PublishedSnapshot, device_id, with_for_update=True)
    by_ref = row if row is not None and row.ref == ref else session.scalars(
        select(PublishedSnapshot).where(PublishedSnapshot.ref == ref).with_for_update()).first()
    held: dict[str, str] = {}
    if by_ref is not None and _held_by_other(by_ref, agent, now):
        held[ref] = _holder(by_ref, now)
    if row is not None and row is not by_ref and _held_by_other(row, agent, now):  # the same GPU, another name
        held[f"{ref} (device {device_id}, published as {row.ref})"] = _holder(row, now)
    if held:
        raise DeviceClaimed(held)
    if row is None:
        if by_ref is not None:  # the device behind this name changed (another UUID): replace the row
            session.delete(by_ref)
            session.flush()
        row = PublishedSnapshot(device_id=device_id, ref=ref, node=node, name=name, agent=agent,
                                device_type=device_type, driver_version=driver_version, snapshot_json=snapshot_json,
                                taken_at=taken_at, published_at=now, draining=bool(draining),
                                claim_expires_at=claim_until)
        session.add(row)
        session.flush()
        return PublishResult(_published(row), None, False)
    if by_ref is not None and by_ref is not row:  # this name pointed at another device: it is this one now
        session.delete(by_ref)
        session.flush()
    previous = row.driver_version
    changed = previous != driver_version and row.device_type == device_type
    row.ref, row.node, row.name = ref, node, name
    row.agent, row.device_type, row.driver_version = agent, device_type, driver_version
    row.snapshot_json, row.taken_at, row.published_at = snapshot_json, taken_at, now
    row.claim_expires_at = claim_until
    if draining is not None:
        row.draining = draining
    session.flush()
    return PublishResult(_published(row), previous, changed)


def get_by_ref(session: Session, ref: str) -> Published | None:
    row = session.scalars(select(PublishedSnapshot).where(PublishedSnapshot.ref == ref)).first()
    return None if row is None else _published(row)


def list_published(session: Session, *, node: str | None = None) -> list[Published]:
    query = select(PublishedSnapshot).order_by(PublishedSnapshot.node, PublishedSnapshot.name)
    if node is not None:
        query = query.where(PublishedSnapshot.node == node)
    return [_published(r) for r in session.scalars(query).all()]


def agent_device_ids(session: Session) -> set[str]:
    """Every device an agent publishes: server processes never claim their probes."""
    return set(session.scalars(select(PublishedSnapshot.device_id)).all())


def set_draining(session: Session, *, node: str, draining: bool) -> int:
    rows = session.scalars(select(PublishedSnapshot).where(PublishedSnapshot.node == node)).all()
    for row in rows:
        row.draining = draining
    session.flush()
    return len(rows)


def forget_node(session: Session, *, node: str) -> int:
    """Remove a decommissioned node's devices (their queued probes are aborted by the next sweep)."""
    result = session.execute(delete(PublishedSnapshot).where(PublishedSnapshot.node == node))
    return int(getattr(result, "rowcount", 0) or 0)


def abort_orphaned_queued(session: Session, *, now: datetime, max_age_s: float) -> list[ProbeTicket]:
    """Queued probes for an agent's device whose agent stopped publishing (snapshot older than
    ``max_age_s``) or that is draining: nobody will claim them, so their waiters get that answer now."""
    now = to_utc(now)
    published = {r.device_id: r for r in session.scalars(select(PublishedSnapshot)).all()}
    if not published:
        return []
    rows = session.scalars(
        select(ServeProbe).where(ServeProbe.state == "queued", ServeProbe.device_id.in_(list(published)))
        .with_for_update(skip_locked=True)
    ).all()
    out: list[ProbeTicket] = []
    for row in rows:
        pub = published[row.device_id]
        age = (now - pub.published_at).total_seconds()
        if pub.draining:
            why = f"node {pub.node} is draining: its agent takes no new probes"
        elif age > max_age_s:
            why = f"the agent of {pub.ref} has not published for {age:.0f} s (limit {max_age_s:g} s)"
        else:
            continue
        _close(row, "aborted", now, error=f"probe aborted before it started: {why}; the probe runs only on "
               "its device's node — submit the admission again when the agent is back")
        out.append(_ticket(row))
    session.flush()
    return out


# --------------------------------------------------------------------------- admission history


def log_admission(session: Session, *, pair_digest: str, key_digests: Sequence[str], device_type: str,
                  device_id: str, label: str, verdict: str, request_json: dict[str, Any], now: datetime) -> None:
    """One row of the admission history."""
    log_admissions(session, [{"pair_digest": pair_digest, "key_digests": key_digests, "device_type": device_type,
                              "device_id": device_id, "label": label, "verdict": verdict,
                              "request_json": request_json, "now": now}])


def log_admissions(session: Session, entries: Sequence[dict[str, Any]]) -> None:
    """The admission history of ``entries`` (each with ``log_admission``'s arguments), written together:
    one row per pair, device, verdict and label among them, with ``requests`` the number of admissions
    it stands for, ``at`` the newest one's time and ``request_json`` the newest one's request (the last
    in ``entries`` among equal times).

    The service's history writer hands over every admission of its window (50 ms by default). A
    scheduler asks about the same pair hundreds of times a second, with the same documents (kilobytes)
    each time: a row and a copy of the request per admission made the table grow by tens of millions of
    rows a day and the writer's transactions, which overlap requests, several times longer. What reads
    the history wants counts, recency and a pair's newest request (``hot_pairs``,
    ``latest_request_for_keys``). One multi-row ``INSERT``, Core: no ORM object per row."""
    if not entries:
        return
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for e in entries:
        label = e["label"][:600]
        at = to_utc(e["now"])
        key = (e["pair_digest"], e["device_id"], e["verdict"], label)
        row = groups.get(key)
        if row is None:
            groups[key] = {"id": str(uuid.uuid4()), "at": at, "pair_digest": e["pair_digest"],
                           "key_digests": sorted(e["key_digests"]), "device_type": e["device_type"],
                           "device_id": e["device_id"], "label": label, "verdict": e["verdict"],
                           "request_json": e["request_json"], "requests": 1}
            continue
        row["requests"] += 1
        if at >= row["at"]:
            row["at"], row["request_json"] = at, e["request_json"]
    rows = [{**row, "request_json": dict(row["request_json"])} for row in groups.values()]
    session.execute(insert(cast(Table, AdmissionLog.__table__)), rows)


def prune_admission_log(session: Session, *, before: datetime, limit: int = PRUNE_BATCH) -> int:
    """Delete at most ``limit`` rows of the admission history older than ``before``; returns how many.
    Callers commit after each call and call again while it returns ``limit``, so a large backlog is
    removed in short transactions that never hold one long lock."""
    ids = list(session.scalars(select(AdmissionLog.id).where(AdmissionLog.at < to_utc(before)).limit(limit)))
    if ids:
        session.execute(delete(AdmissionLog).where(AdmissionLog.id.in_(ids)))
        session.flush()
    return len(ids)


def count_admissions_before(session: Session, before: datetime) -> int:
    return int(session.scalar(select(func.count()).select_from(AdmissionLog).where(AdmissionLog.at < to_utc(before)))
               or 0)


def oldest_admission(session: Session) -> datetime | None:
    value = session.scalar(select(func.min(AdmissionLog.at)))
    return None if value is None else to_utc(value)


@dataclass(frozen=True, slots=True)
class HotPair:
    pair_digest: str
    key_digests: tuple[str, ...]
    device_type: str
    label: str
    requests: int
    last_at: datetime
    request_json: dict[str, Any]


def hot_pairs(session: Session, *, since: datetime, device_type: str | None = None,
              limit: int | None = None) -> list[HotPair]:
    """Pairs asked for since ``since``, most requested first, the most recent first among equals;
    each with its newest request (documents by value)."""
    since = to_utc(since)
    conds = [AdmissionLog.at >= since]
    if device_type is not None:
        conds.append(AdmissionLog.device_type == device_type)
    counts = session.execute(
        select(AdmissionLog.pair_digest, func.sum(AdmissionLog.requests), func.max(AdmissionLog.at))
        .where(*conds).group_by(AdmissionLog.pair_digest)
    ).all()
    ranked = sorted(((str(d), int(n), to_utc(last)) for d, n, last in counts), key=lambda t: (-t[1], -t[2].timestamp(), t[0]))
    if limit is not None:
        ranked = ranked[:limit]
    out: list[HotPair] = []
    for digest, n, last in ranked:
        row = session.scalars(select(AdmissionLog).where(AdmissionLog.pair_digest == digest, *conds)
                              .order_by(AdmissionLog.at.desc()).limit(1)).first()
        assert row is not None
        out.append(HotPair(digest, tuple(row.key_digests), row.device_type, row.label, n, last,
                           dict(row.request_json)))
    return out


def latest_request_for_keys(session: Session, key_digests: set[str]) -> dict[str, AdmissionLog]:
    """For each key digest, the newest logged admission whose pair includes it."""
    found: dict[str, AdmissionLog] = {}
    for row in session.scalars(select(AdmissionLog).order_by(AdmissionLog.at.desc())):
        for k in row.key_digests:
            if k in key_digests and k not in found:
                found[k] = row
        if len(found) == len(key_digests):
            break
    return found


def expiring_evidence(session: Session, *, now: datetime, within_s: float) -> list[Evidence]:
    now = to_utc(now)
    return list(session.scalars(
        select(Evidence).where(Evidence.status == "current", Evidence.expires_at > now,
                               Evidence.expires_at <= now + timedelta(seconds=within_s))
        .order_by(Evidence.expires_at)
    ).all())


# --------------------------------------------------------------------------- drift


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


# --------------------------------------------------------------------------- warm plans


def store_warm_plan(session: Session, *, run_id: str, params: dict[str, Any], plan: list[dict[str, Any]],
                    now: datetime) -> None:
    session.add(WarmPlanRecord(run_id=run_id, created_at=to_utc(now), params_json=dict(params), plan_json=list(plan)))
    session.flush()


def get_warm_plan(session: Session, run_id: str) -> WarmPlanRecord | None:
    return session.get(WarmPlanRecord, run_id)
