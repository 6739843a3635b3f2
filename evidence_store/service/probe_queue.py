"""The service's probe queue: single flight per pair key, one running probe per device.

Every server process (and, later, every node agent) coordinates through these rows only:

* ``submit`` joins the live probe of the same pair digest or queues a new one. The unique constraint
  on ``active_pair`` makes the choice race-free across processes: a second insert for the same pair
  fails inside a savepoint and the caller joins the row that won. A caller that looked the evidence up
  before deciding to probe passes ``since`` (when it looked): a probe of the same pair that ended
  ``done`` after that moment already answered its question — its evidence committed after the caller
  looked — so the caller joins that finished probe instead of running the pair a second time.
* ``claim_next`` leases the oldest queued probe whose device runs no probe, skipping rows another
  claimer holds locked (``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's writing
  transactions are ``BEGIN IMMEDIATE`` and serialise claims). The unique constraint on
  ``active_device`` is the last word: two claimers that both saw a device idle cannot both set it.
  ``devices`` restricts a claim to some devices (a node agent claims only its own).
* The owner renews its lease with ``heartbeat``; ``recover_abandoned`` aborts running rows whose lease
  expired or whose owner is known dead, so their pair and device become free again.
* A cancel (``cancel``) of a running probe sets its ``cancel_requested`` flag. Its owner polls the flag
  (``cancel_requested``, a one-column read) and, in the transaction that records the probe's evidence,
  re-reads it under the row's lock (``may_record``) and closes the row ``done`` in that same transaction:
  a cancel either comes first and nothing is recorded, or finds the probe ``done``. ``finish`` never
  closes a row ``done`` whose cancel was requested.
* A probe for a device a node agent publishes is claimed only by that agent (``claim_next(devices=…)``);
  server processes leave it alone (``claim_next(exclude=…)``). ``submit_and_notify`` announces it to the
  agents at commit (PostgreSQL ``NOTIFY``); ``abort_orphaned_queued`` answers the waiters of probes
  queued for a device whose agent stopped publishing or drains.

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import exc, func, select, text
from sqlalchemy.orm import Session

from canary._model import PairKey
from canary.errors import InputError
from evidence_store.certificates import certificate_document
from evidence_store.errors import LeaseLost
from evidence_store.fleet_models import PublishedSnapshot
from evidence_store.schemas import to_utc
from evidence_store.service.models import ServeProbe

TERMINAL_STATES = frozenset({"done", "failed", "cancelled", "aborted"})
LIVE_STATES = ("queued", "running")


@dataclass(frozen=True, slots=True)
class ProbeTicket:
    """A probe row as callers see it."""

    id: str
    pair_digest: str
    device_id: str
    state: str
    waiters: int
    cancel_requested: bool
    owner: str | None
    lease_expires_at: datetime | None
    certificate_json: dict[str, Any] | None
    error: str | None
    request_json: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def _ticket(row: ServeProbe) -> ProbeTicket:
    return ProbeTicket(
        id=row.id, pair_digest=row.pair_digest, device_id=row.device_id, state=row.state, waiters=row.waiters,
        cancel_requested=row.cancel_requested, owner=row.owner, lease_expires_at=row.lease_expires_at,
        certificate_json=None if row.certificate_json is None else dict(row.certificate_json), error=row.error,
        request_json=dict(row.request_json), created_at=row.created_at, started_at=row.started_at,
        finished_at=row.finished_at, updated_at=row.updated_at,
    )


def pair_digest(keys: Sequence[PairKey]) -> str:
    """One digest for the set of pair keys a probe settles (order does not matter)."""
    if not keys:
        raise InputError("a probe needs at least one pair key", field="keys")
    joined = "\n".join(sorted(k.digest() for k in keys))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def _live_for_pair(session: Session, digest: str) -> ServeProbe | None:
    return session.scalars(
        select(ServeProbe).where(ServeProbe.active_pair == digest).with_for_update()
    ).first()


def _done_since(session: Session, digest: str, since: datetime) -> ServeProbe | None:
    """The newest probe of ``digest`` that ended ``done`` at or after ``since`` (locked), if any."""
    return session.scalars(
        select(ServeProbe)
        .where(ServeProbe.pair_digest == digest, ServeProbe.state == "done", ServeProbe.finished_at >= since)
        .order_by(ServeProbe.finished_at.desc(), ServeProbe.id)
        .limit(1)
        .with_for_update()
    ).first()


def submit(
    session: Session,
    *,
    digest: str,
    device_id: str,
    request_json: dict[str, Any],
    now: datetime,
    since: datetime | None = None,
) -> tuple[ProbeTicket, bool]:
    """Join the live probe for ``digest`` or queue a new one. Returns the ticket and whether it was joined.

    ``since``: when the caller read the evidence that made it probe. A probe of this pair that finished
    ``done`` at or after then is joined (the ticket is final, with its certificate): its evidence was not
    yet committed when the caller looked, and probing the pair again would be a second probe for one
    question. Without ``since`` (a revalidation that just marked evidence stale) only live probes join."""
    now = to_utc(now)
    since = None if since is None else to_utc(since)
    for _ in range(3):
        live = _live_for_pair(session, digest)
        if live is None and since is not None:
            live = _done_since(session, digest, since)
        if live is not None:
            live.waiters += 1
            live.updated_at = now
            session.flush()
            return _ticket(live), True
        row = ServeProbe(
            id=str(uuid.uuid4()), pair_digest=digest, active_pair=digest, device_id=device_id, active_device=None,
            state="queued", request_json=dict(request_json), waiters=1, cancel_requested=False, owner=None,
            lease_expires_at=None, certificate_json=None, error=None, created_at=now, started_at=None,
            finished_at=None, updated_at=now,
        )
        try:
            with session.begin_nested():
                session.add(row)
        except exc.IntegrityError:
            continue  # another process queued this pair between our look and our insert: join it
        if since is not None:
            # A probe of this pair may have been queued, run and finished between our look and our
            # insert; once our row holds the pair, every such probe is committed and visible here.
            done = _done_since(session, digest, since)
            if done is not None:
                session.delete(row)
                done.waiters += 1
                done.updated_at = now
                session.flush()
                return _ticket(done), True
        return _ticket(row), False
    raise LeaseLost(f"could not queue or join the probe for pair {digest[:12]} (it kept changing)")


def _busy_devices(session: Session) -> set[str]:
    rows = session.scalars(select(ServeProbe.active_device).where(ServeProbe.active_device.is_not(None)))
    return {d for d in rows if d is not None}


_ANY_QUEUED = select(ServeProbe.id).where(ServeProbe.state == "queued").limit(1)


def any_queued(session: Session) -> bool:
    """Whether any probe waits: one indexed read (``ix_serve_probes_state_created``) that a poller runs
    before ``claim_next``'s write transaction (its busy-device read and its row locks), which an idle
    queue does not need."""
    return session.execute(_ANY_QUEUED).first() is not None


def claim_next(
    session: Session,
    *,
    owner: str,
    lease_s: float,
    now: datetime,
    devices: Collection[str] | None = None,
    exclude: Collection[str] | None = None,
    scan: int = 32,
    clock: Callable[[], datetime] | None = None,
) -> ProbeTicket | None:
    """Lease the oldest queued probe whose device is idle; ``None`` when there is none.

    With ``clock``, the start time is read from it after the busy devices were read — that is, after
    the probe that last held the device committed its end — so recorded runs of one device never
    appear to overlap (``now`` read before waiting for the store's lock could be earlier)."""
    if not lease_s > 0:
        raise InputError(f"must be positive, got {lease_s}", field="lease_s")
    query = select(ServeProbe).where(ServeProbe.state == "queued")
    if devices is not None:
        query = query.where(ServeProbe.device_id.in_(list(devices)))
    if exclude:  # devices a node agent owns: only that agent runs their probes
        query = query.where(ServeProbe.device_id.not_in(list(exclude)))
    query = query.order_by(ServeProbe.created_at, ServeProbe.id).limit(scan).with_for_update(skip_locked=True)
    busy = _busy_devices(session)
    now = to_utc(clock() if clock is not None else now)
    for row in session.scalars(query).all():
        if row.device_id in busy:
            continue
        try:
            with session.begin_nested():
                row.state = "running"
                row.active_device = row.device_id
                row.owner = owner
                row.started_at = now
                row.updated_at = now
                row.lease_expires_at = now + timedelta(seconds=lease_s)
                session.flush()
        except exc.IntegrityError:
            # Another claimer started a probe on this device since we looked; leave the row queued.
            session.refresh(row)
            busy.add(row.device_id)
            continue
        return _ticket(row)
    return None


def _owned_running(session: Session, probe_id: str, owner: str) -> ServeProbe:
    row = session.get(ServeProbe, probe_id, with_for_update=True)
    if row is None:
        raise InputError(f"no probe {probe_id!r}", field="id")
    if row.state != "running" or row.owner != owner:
        raise LeaseLost(f"probe {probe_id} is {row.state} (owner {row.owner}), no longer run by {owner}")
    return row


def heartbeat(session: Session, probe_id: str, *, owner: str, lease_s: float, now: datetime) -> bool:
    """Renew the lease; returns whether a caller asked to cancel. ``LeaseLost`` when no longer ours."""
    now = to_utc(now)
    row = _owned_running(session, probe_id, owner)
    row.lease_expires_at = now + timedelta(seconds=lease_s)
    row.updated_at = now
    session.flush()
    return bool(row.cancel_requested)


def cancel_requested(session: Session, probe_id: str) -> bool:
    """Whether a caller asked to cancel the probe: one primary-key read of one column, no lock (what a
    runner polls while the probe runs; ``may_record`` is the locked read that decides)."""
    flag = session.execute(select(ServeProbe.cancel_requested).where(ServeProbe.id == probe_id)).scalar_one_or_none()
    return bool(flag)


def may_record(session: Session, probe_id: str, *, owner: str) -> bool:
    """In the transaction that would record the probe's evidence: lock the probe's row (``SELECT … FOR
    UPDATE`` on PostgreSQL; SQLite's writing transaction holds the database) and say whether it may record —
    not when a caller asked to cancel it. A ``cancel`` waits for this transaction, so it either came first
    (``False``: record nothing) or sees the probe this transaction closes. ``LeaseLost`` when the probe is no
    longer this owner's (recovery aborted it: it must not record either)."""
    row = _owned_running(session, probe_id, owner)
    return not row.cancel_requested


CANCELLED_BEFORE_RECORDING = ("cancelled by a caller before the probe's result was recorded: the candidate was "
                              "rolled back and nothing was recorded")


def finish(
    session: Session,
    probe_id: str,
    *,
    owner: str,
    state: str,
    now: datetime,
    certificate_json: BaseModel | Mapping[str, Any] | None = None,
    error: str | None = None,
) -> ProbeTicket:
    """Close a running probe: its pair and device become free. ``LeaseLost`` when no longer ours.
    ``certificate_json``: the certificate (a model, kept as its ``model_dump(mode="json")``, or that
    JSON value itself). A probe whose cancel was requested is never closed ``done``: it ends ``cancelled``
    without a certificate (the caller records evidence only after ``may_record`` in the same transaction,
    so nothing of it was recorded)."""
    if state not in TERMINAL_STATES:
        raise InputError(f"not a final state: {state!r}", field="state")
    now = to_utc(now)
    row = _owned_running(session, probe_id, owner)
    if state == "done" and row.cancel_requested:
        state, certificate_json, error = "cancelled", None, CANCELLED_BEFORE_RECORDING
    _close(row, state, now, error=error,
           certificate_json=None if certificate_json is None else certificate_document(certificate_json))
    session.flush()
    return _ticket(row)


def _close(row: ServeProbe, state: str, now: datetime, *, certificate_json: dict[str, Any] | None = None,
           error: str | None = None) -> None:
    row.state = state
    row.active_pair = None
    row.active_device = None
    row.lease_expires_at = None
    row.certificate_json = certificate_json
    row.error = error
    row.finished_at = now
    row.updated_at = now


def cancel(session: Session, probe_id: str, *, now: datetime) -> ProbeTicket | None:
    """Cancel a probe: a queued one ends at once; a running one is flagged, and its owner rolls it back
    (it polls the flag, and checks it under lock before recording: ``may_record``). A finished one is
    left as it is. ``None`` when there is no such probe."""
    now = to_utc(now)
    row = session.get(ServeProbe, probe_id, with_for_update=True)
    if row is None:
        return None
    if row.state == "queued":
        _close(row, "cancelled", now, error="cancelled before it started")
    elif row.state == "running":
        row.cancel_requested = True
        row.updated_at = now
    session.flush()
    return _ticket(row)


def get(session: Session, probe_id: str) -> ProbeTicket | None:
    row = session.get(ServeProbe, probe_id)
    return None if row is None else _ticket(row)


def recover_abandoned(
    session: Session, *, now: datetime, owner_is_dead: Callable[[str], bool] | None = None
) -> list[ProbeTicket]:
    """Abort running probes whose lease expired, or whose owner ``owner_is_dead`` says is gone; their
    pair and device become free. Returns the probes it aborted."""
    now = to_utc(now)
    rows = session.scalars(
        select(ServeProbe).where(ServeProbe.state == "running").with_for_update(skip_locked=True)
    ).all()
    aborted: list[ProbeTicket] = []
    for row in rows:
        expired = row.lease_expires_at is not None and row.lease_expires_at < now
        dead = owner_is_dead is not None and row.owner is not None and owner_is_dead(row.owner)
        if not (expired or dead):
            continue
        why = "its server stopped while it ran" if dead else f"its lease expired at {row.lease_expires_at}"
        _close(row, "aborted", now, error=f"probe aborted: {why} (owner {row.owner}); the candidate was rolled "
               "back by recovery and no evidence was recorded — submit the admission again")
        aborted.append(_ticket(row))
    session.flush()
    return aborted


def count_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(ServeProbe.state, func.count()).group_by(ServeProbe.state)).all()
    return {str(state): int(n) for state, n in rows}


def list_probes(session: Session, *, states: Collection[str] | None = None, limit: int = 100) -> list[ProbeTicket]:
    query = select(ServeProbe).order_by(ServeProbe.created_at.desc()).limit(limit)
    if states is not None:
        query = query.where(ServeProbe.state.in_(list(states)))
    return [_ticket(r) for r in session.scalars(query).all()]


# --------------------------------------------------------------------------- node agents' probes

NOTIFY_CHANNEL = "canary_probe_queued"
"""PostgreSQL channel: a new probe's ``device_id`` is announced on it when its transaction commits, so the
agent that owns the device claims it at once instead of at its next poll (SQLite: agents poll)."""


def notify_queued(session: Session, device_id: str) -> None:
    """Announce a queued probe of ``device_id`` on ``NOTIFY_CHANNEL`` when the transaction commits
    (PostgreSQL; nothing on SQLite, where agents poll)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :device)"), {"channel": NOTIFY_CHANNEL, "device": device_id})


def submit_and_notify(session: Session, **kwargs: Any) -> tuple[ProbeTicket, bool]:
    """``submit`` that announces a newly queued probe to the agents."""
    ticket, joined = submit(session, **kwargs)
    if not joined:
        notify_queued(session, ticket.device_id)
    return ticket, joined


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
