"""The evidence lookup on an admission's hot path: select a pair key's candidate records and pool them.

Takes the caller's ``Session`` and never commits; reads no clock (callers pass ``now``). The rule that
combines the records is ``evidence_store.pooling``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.keys import PairKey
from evidence_store.models import Evidence
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
    if not ttl_s > 0:
        raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
    if not 0.0 <= cross_driver_confidence_factor <= 1.0:
        raise InputError(
            f"must be within 0..1, got {cross_driver_confidence_factor}",
            field="cross_driver_confidence_factor",
        )
    rows: Sequence[Any] = session.execute(_LOOKUP_STATEMENT, _lookup_params(key, now, ttl_s)).all()
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
