"""The fleet warm queue: one row per planned pair of a warm run; nodes lease rows with
``SELECT … FOR UPDATE SKIP LOCKED`` (PostgreSQL) so every pair is probed once per run however many
nodes work on it. On SQLite the writing transaction is ``BEGIN IMMEDIATE``, which serialises claims
the same way on one machine.

Functions take the caller's session and never commit; callers pass ``now`` (the repository reads no
clock). A lease that expires (its node died) makes the row claimable again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import and_, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.errors import LeaseLost
from evidence_store.models import WarmQueue
from evidence_store.schemas import to_utc

FinalState = Literal["done", "failed"]


@dataclass(frozen=True, slots=True)
class WarmItem:
    id: str
    run_id: str
    position: int
    pair_json: dict[str, Any]
    owner: str
    attempts: int
    lease_expires_at: datetime


def item_id(run_id: str, position: int) -> str:
    return f"{run_id}/{position}"


def enqueue(session: Session, *, run_id: str, pairs: Sequence[dict[str, Any]], now: datetime) -> int:
    """Add the run's pairs that are not queued yet (idempotent: every node of a run may call it).
    Returns how many rows this call added."""
    if not run_id:
        raise InputError("must not be empty", field="run_id")
    now = to_utc(now)
    rows = [
        {"id": item_id(run_id, i), "run_id": run_id, "position": i, "pair_json": dict(pair), "state": "queued",
         "owner": None, "attempts": 0, "lease_expires_at": None, "result_json": None, "created_at": now,
         "updated_at": now}
        for i, pair in enumerate(pairs)
    ]
    if not rows:
        return 0
    before = session.scalar(select(func.count()).select_from(WarmQueue).where(WarmQueue.run_id == run_id)) or 0
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(WarmQueue).values(rows).on_conflict_do_nothing(index_elements=["id"]))
    after = session.scalar(select(func.count()).select_from(WarmQueue).where(WarmQueue.run_id == run_id)) or 0
    return int(after) - int(before)


def check_same_pairs(session: Session, *, run_id: str, pairs: Sequence[dict[str, Any]]) -> None:
    """Raise ``InputError`` when ``run_id`` was started with other pairs than ``pairs`` (another plan, or
    the same plan edited since): every node of a run must work on one plan. A new run passes."""
    rows = session.execute(
        select(WarmQueue.position, WarmQueue.pair_json).where(WarmQueue.run_id == run_id).order_by(WarmQueue.position)
    ).all()
    if not rows:
        return
    stored = [dict(r.pair_json) for r in rows]
    given = [dict(p) for p in pairs]
    if stored != given:
        first = next((i for i, (a, b) in enumerate(zip(stored, given, strict=False)) if a != b), min(len(stored), len(given)))
        raise InputError(
            f"fleet run {run_id!r} was started with a different plan ({len(stored)} pair(s); this plan has "
            f"{len(given)}, first difference at pair {first + 1}); use the run's plan or another --run-id",
            field="--run-id",
        )


def claim(session: Session, *, run_id: str, owner: str, lease_s: float, now: datetime) -> WarmItem | None:
    """Lease the first queued (or lease-expired) pair of the run, skipping rows another node holds
    locked; ``None`` when nothing is left to do."""
    if not lease_s > 0:
        raise InputError(f"must be positive, got {lease_s}", field="lease_s")
    now = to_utc(now)
    query = (
        select(WarmQueue)
        .where(
            WarmQueue.run_id == run_id,
            or_(WarmQueue.state == "queued",
                and_(WarmQueue.state == "leased", WarmQueue.lease_expires_at < now)),
        )
        .order_by(WarmQueue.position)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    row = session.scalars(query).first()
    if row is None:
        return None
    row.state = "leased"
    row.owner = owner
    row.attempts += 1
    row.lease_expires_at = now + timedelta(seconds=lease_s)
    row.updated_at = now
    session.flush()
    return WarmItem(row.id, row.run_id, row.position, dict(row.pair_json), owner, row.attempts,
                    row.lease_expires_at)


def release(session: Session, item: WarmItem, *, now: datetime) -> bool:
    """Put a leased item back in the queue (``queued``, no owner, no lease) if ``item``'s owner still
    holds it: a node interrupted mid-probe hands its pair back instead of leaving the lease to expire.
    Idempotent; ``False`` when the item is no longer this owner's lease."""
    row = session.get(WarmQueue, item.id, with_for_update=True)
    if row is None or row.state != "leased" or row.owner != item.owner:
        return False
    _requeue(row, now)
    session.flush()
    return True


def _requeue(row: WarmQueue, now: datetime) -> None:
    """A leased row back in the queue: no owner, no lease."""
    row.state = "queued"
    row.owner = None
    row.lease_expires_at = None
    row.updated_at = to_utc(now)


def release_dead_local(session: Session, *, host: str, pid_alive: Callable[[int], bool],
                       now: datetime) -> list[tuple[str, str]]:
    """Put back in the queue every leased item whose holder ran on ``host`` (owner ``host:pid:worker``,
    as fleet warm nodes name themselves) and whose process is gone (``pid_alive`` says no): a node
    killed mid-probe (SIGKILL) hands nothing back, and its lease would hold the pair for up to its full
    length although nobody works on it. Holders on other hosts are left to their leases (their
    processes cannot be seen from here). Returns (item id, owner) for each item released."""
    rows = session.scalars(select(WarmQueue).where(WarmQueue.state == "leased").with_for_update()).all()
    released = []
    for row in rows:
        holder_host, pid = _local_holder(row.owner)
        if holder_host != host or pid is None or pid_alive(pid):
            continue
        released.append((row.id, str(row.owner)))
        _requeue(row, now)
    session.flush()
    return released


def _local_holder(owner: str | None) -> tuple[str | None, int | None]:
    """The host and pid of a fleet warm node's owner name (``host:pid:worker``); (None, None) for any
    other form (a holder this host cannot check)."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None, None
    return parts[0], int(parts[1])


def finish(session: Session, item: WarmItem, *, state: FinalState, result_json: dict[str, Any], now: datetime) -> None:
    """Close a leased item. ``LeaseLost`` when another node took it over after this lease expired."""
    row = session.get(WarmQueue, item.id, with_for_update=True)
    if row is None:
        raise InputError(f"no warm queue item {item.id!r}", field="id")
    if row.state != "leased" or row.owner != item.owner:
        raise LeaseLost(f"warm item {item.id} is {row.state} by {row.owner}, no longer leased by {item.owner}")
    row.state = state
    row.result_json = dict(result_json)
    row.lease_expires_at = None
    row.updated_at = to_utc(now)
    session.flush()


def run_status(session: Session, run_id: str) -> dict[str, int]:
    """Items of the run by state."""
    rows = session.execute(
        select(WarmQueue.state, func.count()).where(WarmQueue.run_id == run_id).group_by(WarmQueue.state)
    ).all()
    return {str(state): int(count) for state, count in rows}
