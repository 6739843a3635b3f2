"""The pooling rule: how the usable records of one pair key combine into one answer.

Policy, not persistence: a pure function over plain values (no session, no ORM rows, no clock), so it
can be read and tested as a table. ``evidence_store.lookup`` selects the candidate rows and hands them
here.

The rule, in order:

1. Only conclusive records count: outcome ``safe`` or ``unsafe`` (inconclusive and aborted probes are
   not evidence).
2. Records recorded under the current driver are used. When there are none and cross-driver evidence
   is allowed, every driver's records are used, with the resulting confidence multiplied by the
   cross-driver factor; otherwise there is no answer.
3. Imported records (source ``import``) count only when the store has none of its own in that pool:
   imported evidence never outvotes local evidence.
4. The newest production SLO violation outweighs every record before it.
5. The outcome is ``unsafe`` if any remaining record is unsafe, else ``safe``. Its confidence is the
   highest confidence among the records with that outcome (each is a complete sequential test whose
   error guarantee holds alone; records are not assumed independent, so confidences are not
   multiplied). The slowdown estimate is the sample-weighted mean of those records, the interval their
   envelope.

``outcome=None`` (with a ``reason``) is the answer when nothing usable remains; ``confidence`` is
``None`` when none of the deciding records carried one. Missing numbers never become zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, cast

from evidence_store.schemas import LookupResult, Outcome, PooledOutcome, Source


class PoolRecord(Protocol):
    """What pooling reads of one record (a lookup row, a ``Record``, an ``EvidenceOut``)."""

    @property
    def id(self) -> str: ...
    @property
    def driver_version(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def resident_slowdown_pct(self) -> float | None: ...
    @property
    def resident_slowdown_low_pct(self) -> float | None: ...
    @property
    def resident_slowdown_high_pct(self) -> float | None: ...
    @property
    def samples(self) -> int: ...
    @property
    def confidence(self) -> float | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def expires_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Record:
    """One record as pooling sees it, as plain values."""

    id: str
    driver_version: str | None
    source: Source
    outcome: Outcome
    resident_slowdown_pct: float | None
    resident_slowdown_low_pct: float | None
    resident_slowdown_high_pct: float | None
    samples: int
    confidence: float | None
    created_at: datetime
    expires_at: datetime


def _when(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def _order(record: PoolRecord) -> tuple[datetime, str]:
    return (record.created_at, record.id)


def _weighted_estimate(records: Sequence[PoolRecord]) -> float | None:
    measured = [(float(r.samples), r.resident_slowdown_pct) for r in records if r.resident_slowdown_pct is not None]
    if not measured:
        return None
    weights = [w for w, _ in measured]
    values = [v for _, v in measured]
    if sum(weights) > 0:
        return math.fsum(w * v for w, v in measured) / math.fsum(weights)
    return math.fsum(values) / len(values)


def _envelope(records: Sequence[PoolRecord]) -> tuple[float, float] | None:
    bounded: list[tuple[float, float]] = [
        (r.resident_slowdown_low_pct, r.resident_slowdown_high_pct)
        for r in records
        if r.resident_slowdown_low_pct is not None and r.resident_slowdown_high_pct is not None
    ]
    if not bounded:
        return None
    return (min(lo for lo, _ in bounded), max(hi for _, hi in bounded))


def pool(
    records: Sequence[PoolRecord],
    *,
    driver_version: str | None,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float,
    ttl_s: float | None = None,
) -> LookupResult:
    """Combine the usable records of one pair key into one answer (the rule is in the module text).

    ``records`` are the candidates a lookup found (current, unexpired, within the TTL), in any order;
    ``driver_version`` is the current driver (``None``: unknown, so no record is same-driver).
    ``evidence_expires_at`` is when the answer runs out: the last instant any deciding record is still
    usable — its own ``expires_at`` or its creation plus ``ttl_s`` (the policy's TTL), whichever is first.
    """
    if not 0.0 <= cross_driver_confidence_factor <= 1.0:
        raise ValueError(f"cross_driver_confidence_factor must be within 0..1, got {cross_driver_confidence_factor}")
    if not records:
        return LookupResult(outcome=None, reason="no current evidence for this pair")
    conclusive = sorted((r for r in records if r.outcome in ("safe", "unsafe")), key=_order, reverse=True)
    if not conclusive:
        return LookupResult(
            outcome=None,
            reason=f"the {len(records)} current record(s) for this pair are inconclusive or aborted probes, not evidence",
        )
    same_driver = [r for r in conclusive if driver_version is not None and r.driver_version == driver_version]
    cross_driver = False
    candidates: list[PoolRecord]
    if same_driver:
        candidates = same_driver
    elif allow_cross_driver:
        candidates, cross_driver = conclusive, True
    else:
        drivers = sorted({r.driver_version or "unknown" for r in conclusive})
        current = (
            f"the current driver {driver_version}" if driver_version is not None else "an unknown current driver"
        )
        return LookupResult(
            outcome=None,
            reason=(
                f"evidence exists only under driver(s) {', '.join(drivers)}, not {current}, "
                f"and the policy does not allow evidence across drivers"
            ),
        )

    local = [r for r in candidates if r.source != "import"]
    ignored_imports = len(candidates) - len(local) if local else 0
    if local:  # imported evidence never outweighs this store's own for the same key
        candidates = local
    violations = [r for r in candidates if r.source == "production" and r.outcome == "unsafe"]
    outweighed = 0
    newest_violation: PoolRecord | None = None
    if violations:
        newest_violation = max(violations, key=_order)
        kept = [r for r in candidates if _order(r) >= _order(newest_violation)]
        outweighed = len(candidates) - len(kept)
        candidates = kept
    outcome: PooledOutcome = "unsafe" if any(r.outcome == "unsafe" for r in candidates) else "safe"
    deciding = [r for r in candidates if r.outcome == outcome]
    confidences = [r.confidence for r in deciding if r.confidence is not None]
    confidence = max(confidences) if confidences else None
    if cross_driver and confidence is not None:
        confidence *= cross_driver_confidence_factor
    newest = deciding[0].created_at  # newest first
    ttl = timedelta(seconds=ttl_s) if ttl_s is not None else None
    runs_out = max(min(r.expires_at, r.created_at + ttl) if ttl is not None else r.expires_at for r in deciding)

    if newest_violation is not None:
        reason = (
            f"a production SLO violation recorded at {_when(newest_violation.created_at)} makes this pair unsafe"
        )
        if outweighed:
            reason += f" and outweighs {outweighed} earlier record(s)"
    elif outcome == "unsafe":
        reason = f"{len(deciding)} of {len(candidates)} current record(s) found this pair unsafe (newest {_when(newest)})"
    else:
        reason = f"{len(deciding)} current record(s) found this pair safe (newest {_when(newest)})"
    if ignored_imports:
        reason += f"; {ignored_imports} imported record(s) set aside: this store's own evidence decides"
    if cross_driver:
        drivers = sorted({r.driver_version or "unknown" for r in deciding})
        reason += (
            f"; recorded under driver(s) {', '.join(drivers)}, not "
            f"{driver_version if driver_version is not None else 'the (unknown) current driver'}, "
            f"so confidence is scaled by {cross_driver_confidence_factor:g}"
        )

    return LookupResult(
        outcome=outcome,
        evidence_ids=tuple(r.id for r in deciding),
        evidence_timestamp=newest,
        evidence_expires_at=runs_out,
        confidence=confidence,
        slowdown_estimate_pct=_weighted_estimate(deciding),
        slowdown_interval_pct=_envelope(deciding),
        samples=sum(r.samples for r in deciding),
        sources=tuple(sorted({cast(Source, r.source) for r in deciding})),
        cross_driver=cross_driver,
        reason=reason,
    )
