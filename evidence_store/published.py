"""Devices node agents publish: each device's snapshot by value, and the agent's claim on it.

One live agent per device: the agent that publishes a device (node + name, or its UUID) holds it until
``claim_expires_at``, which every heartbeat renews; another agent that tries to publish it meanwhile gets
``DeviceClaimed`` naming the holder. A stopped agent releases its claims; a dead one's lapse. Probes for
an agent's devices are claimed from the probe queue only by that agent (``service.probe_queue``).

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from canary.errors import InputError, OperationalError
from evidence_store.fleet_models import PublishedSnapshot
from evidence_store.schemas import to_utc

AGENT_REF_PREFIX = "agent:"


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
