"""The evidence lookup on an admission's hot path: select a pair key's candidate records and pool them.

Takes the caller's ``Session`` and never commits; reads no clock (callers pass ``now``). The rule that
combines the records is ``evidence_store.pooling``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, bindparam, func, select, true
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.keys import PairKey
from evidence_store.models import Evidence, Reservation
from evidence_store.pooling import pool
from evidence_store.schemas import LookupResult, to_utc

_LOOKUP_COLUMNS = (
    Evidence.id,
    Evidence.driver_version,
    Evidence.source,
    Evidence.outcome,
    Evidence.resident_slowdown_pct,
    Evidence.resident_slowdown_low_pct,
    Evidence.resident_slowdown_high_pct,
    Evidence.samples,
    Evidence.confidence,
    Evidence.created_at,
)


# Built once: a lookup sits on the admission's hot path, and constructing the statement costs more
# than running it.
_LOOKUP_STATEMENT = (
    select(*_LOOKUP_COLUMNS)
    .where(
        Evidence.key_digest == bindparam("key_digest"),
        Evidence.status == "current",
        Evidence.expires_at > bindparam("now"),
        Evidence.created_at > bindparam("oldest"),
    )
    .order_by(Evidence.created_at.desc(), Evidence.id.desc())
)


@lru_cache(maxsize=4096)
def key_digest(key: PairKey) -> str:
    """``key.digest()``, computed once per key: a key is immutable (a frozen dataclass of six strings)
    and its digest a pure function of them, while the JSON and hash cost more than the lookup's row."""
    return key.digest()


def _lookup_params(key: PairKey, now: datetime, ttl_s: float) -> dict[str, Any]:
    now = to_utc(now)
    return {"key_digest": key_digest(key), "now": now, "oldest": now - timedelta(seconds=ttl_s)}


def lookup_query(key: PairKey, *, now: datetime, ttl_s: float) -> Select[*tuple[Any, ...]]:
    """The candidate rows of a lookup, with its parameters bound (for ``EXPLAIN``): current,
    unexpired, within the TTL, newest first; only the columns pooling reads.

    Served by the composite index ``ix_evidence_lookup (key_digest, status, expires_at)``.
    """
    return _LOOKUP_STATEMENT.params(**_lookup_params(key, now, ttl_s))


def lookup(
    session: Session | Connection,
    key: PairKey,
    *,
    driver_version: str | None,
    now: datetime,
    ttl_s: float,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float = 0.5,
) -> LookupResult:
    """Pool the usable evidence for ``key`` at ``now``. ``session`` may be a ``Session`` or a Core
    ``Connection`` (the admission's read-only transaction: plain rows, no ORM bookkeeping).

    Candidates: status ``current``, ``expires_at > now``, created within ``ttl_s``. They are combined
    by ``evidence_store.pooling.pool`` (conclusive records only, the current driver's unless
    ``allow_cross_driver``, local before imported, production violations outweigh earlier records);
    the rule is documented there.

    Returns ``outcome=None`` (and ``reason`` saying why) when no usable evidence exists;
    ``confidence`` is ``None`` when none of the deciding records carried one.
    """
    _check_pooling(ttl_s, cross_driver_confidence_factor)
    rows: Sequence[Any] = session.execute(_LOOKUP_STATEMENT, _lookup_params(key, now, ttl_s)).all()
    return pool_candidates(rows, ttl_s=ttl_s, driver_version=driver_version, allow_cross_driver=allow_cross_driver,
                           cross_driver_confidence_factor=cross_driver_confidence_factor)


def _check_pooling(ttl_s: float, cross_driver_confidence_factor: float) -> None:
    if not ttl_s > 0:
        raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
    if not 0.0 <= cross_driver_confidence_factor <= 1.0:
        raise InputError(
            f"must be within 0..1, got {cross_driver_confidence_factor}",
            field="cross_driver_confidence_factor",
        )


def pool_candidates(
    rows: Sequence[Any],
    *,
    ttl_s: float,
    driver_version: str | None,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float,
) -> LookupResult:
    """One key's candidate rows (as ``lookup`` or ``decision_read`` selected them) pooled into one answer."""
    _check_pooling(ttl_s, cross_driver_confidence_factor)
    if not rows:
        return LookupResult(
            outcome=None, reason=f"no current evidence within the last {ttl_s:g} s for this pair"
        )
    return pool(
        rows,
        driver_version=driver_version,
        allow_cross_driver=allow_cross_driver,
        cross_driver_confidence_factor=cross_driver_confidence_factor,
    )


# One statement for everything a decision reads: the memory booked on the device (one row, always) left
# joined to the candidate evidence rows of every pair key of the request (none, one or many). Built once,
# like the statements above.
_BOOKED = select(func.coalesce(func.sum(Reservation.memory_bytes), 0).label("booked")).where(
    Reservation.device_id == bindparam("device_id"),
    Reservation.released_at.is_(None),
    Reservation.expires_at > bindparam("booked_at"),
).subquery("booked")
_CANDIDATES = select(Evidence.key_digest, *_LOOKUP_COLUMNS).where(
    Evidence.key_digest.in_(bindparam("key_digests", expanding=True)),
    Evidence.status == "current",
    Evidence.expires_at > bindparam("evidence_at"),
    Evidence.created_at > bindparam("oldest"),
).subquery("candidates")
_DECISION_STATEMENT = (
    select(_BOOKED.c.booked, *_CANDIDATES.c)
    .select_from(_BOOKED.outerjoin(_CANDIDATES, true()))
    .order_by(_CANDIDATES.c.key_digest, _CANDIDATES.c.created_at.desc(), _CANDIDATES.c.id.desc())
)


def decision_read(
    connection: Session | Connection,
    *,
    device_id: str,
    keys: Sequence[PairKey],
    booked_at: datetime,
    evidence_at: datetime,
    ttl_s: float,
) -> tuple[int, dict[str, list[Any]]]:
    """What one admission reads, in one statement: the memory booked on ``device_id`` at ``booked_at``
    (``reservations.reserved_bytes``'s sum) and, for each of ``keys``, its candidate evidence rows at
    ``evidence_at`` (``lookup``'s selection: current, unexpired, within ``ttl_s``), by key digest.

    One statement is one snapshot of the store on PostgreSQL and SQLite alike, so the bookings and the
    evidence are of the same instant without a transaction around them, and one round trip instead of
    BEGIN, one statement per read and COMMIT. Pool each key's rows with ``pool_candidates``."""
    if not ttl_s > 0:
        raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
    at = to_utc(evidence_at)
    rows = connection.execute(_DECISION_STATEMENT, {
        "device_id": device_id, "booked_at": to_utc(booked_at), "key_digests": [key_digest(k) for k in keys],
        "evidence_at": at, "oldest": at - timedelta(seconds=ttl_s)}).all()
    booked = int(rows[0].booked or 0)
    by_key: dict[str, list[Any]] = {}
    for row in rows:
        if row.id is not None:
            by_key.setdefault(row.key_digest, []).append(row)
    return booked, by_key
