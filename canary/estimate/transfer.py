"""The transfer estimator: evidence recorded for a neighbouring pair key.

The pair key (``canary._model.PairKey``) has six parts; evidence never *decides* across any of
them. As a *prediction* a record of a key that differs in one part says something, less the further
the neighbour. Neighbours, with their stated similarity (1 is the pair itself):

==================  ======================================================================  ==========
kind                the record's key differs from the pair's in                              similarity
==================  ======================================================================  ==========
``same-key``        nothing (stale or lower-confidence records of the pair itself)          0.9
``other-device``    the device type only                                                    0.6
``other-regime``    the resource regime only                                                0.5
``other-version``   one workload's version (same shape family, device type and regime)      0.7
``other-shape``     one workload's shape family (same versions, device type and regime)     0.6
==================  ======================================================================  ==========

From the most similar kind that has records with a measured slowdown, the estimate is the mean of
their point slowdowns; the interval is that mean ± (the standard deviation of the points + the median
half-width of their recorded intervals), widened by ``(1/similarity − 1) · max(WIDEN_FLOOR_PCT, |point|)``
points each side: the further the neighbour, the wider the interval. Each kind is calibrated on its
own outcomes (``Estimate.group``). A record without a measured slowdown (a rollback on the SLO, an aborted
probe) contributes nothing; no neighbour at all is :class:`~canary.estimate.base.NoEstimate`.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from canary.estimate.base import Estimate, EstimateQuery, NoEstimate

if TYPE_CHECKING:
    from canary._model import PairKey
    from evidence_store.schemas import EvidenceOut

NAME = "transfer"
WIDEN_FLOOR_PCT = 5.0
SIMILARITY: dict[str, float] = {
    "same-key": 0.9,
    "other-version": 0.7,
    "other-device": 0.6,
    "other-shape": 0.6,
    "other-regime": 0.5,
}


def neighbour_kind(key: PairKey, other: PairKey) -> str | None:
    """How ``other`` neighbours ``key`` (a kind of ``SIMILARITY``), or ``None`` when it differs in more
    than one part (or in a way none of the kinds names)."""
    a, b = key.as_dict(), other.as_dict()
    differ = {k for k in a if a[k] != b[k]}
    if not differ:
        return "same-key"
    if differ == {"device_type"}:
        return "other-device"
    if differ == {"regime"}:
        return "other-regime"
    if differ in ({"resident_version"}, {"candidate_version"}):
        return "other-version"
    if differ in ({"resident_shape_family"}, {"candidate_shape_family"}):
        return "other-shape"
    return None


def _measured(rec: EvidenceOut) -> bool:
    return rec.resident_slowdown_pct is not None and rec.outcome in ("safe", "unsafe")


def transfer_estimate(key: PairKey, records: Sequence[EvidenceOut], *,
                      keep: Callable[[EvidenceOut], bool] | None = None) -> Estimate | NoEstimate:
    """The transfer estimate of ``key`` from ``records`` (those ``keep`` accepts)."""
    by_kind: dict[str, list[EvidenceOut]] = {}
    for rec in records:
        if not _measured(rec) or (keep is not None and not keep(rec)):
            continue
        kind = neighbour_kind(key, rec.key)
        if kind is not None:
            by_kind.setdefault(kind, []).append(rec)
    if not by_kind:
        return NoEstimate(NAME, "no measured evidence on a neighbouring pair key (other device type, regime, "
                          "version or shape family)")
    kind = max(by_kind, key=lambda k: SIMILARITY[k])
    sim = SIMILARITY[kind]
    recs = by_kind[kind]
    points = [float(r.resident_slowdown_pct) for r in recs if r.resident_slowdown_pct is not None]
    point = sum(points) / len(points)
    spread = statistics.stdev(points) if len(points) > 1 else 0.0
    halves = [(r.resident_slowdown_high_pct - r.resident_slowdown_low_pct) / 2 for r in recs
              if r.resident_slowdown_high_pct is not None and r.resident_slowdown_low_pct is not None]
    half = spread + (statistics.median(halves) if halves else 0.0)
    widen = (1.0 / sim - 1.0) * max(WIDEN_FLOOR_PCT, abs(point))
    lo, hi = point - half - widen, point + half + widen
    inputs = tuple(f"evidence {r.id} ({kind}: {r.key.describe()})" for r in recs[:5])
    if len(recs) > 5:
        inputs += (f"and {len(recs) - 5} more {kind} record(s)",)
    return Estimate(NAME, lo, hi, point, inputs,
                    f"{len(recs)} {kind} record(s), similarity {sim:g}: mean {point:.1f}%, widened by {widen:.1f} points",
                    group=kind)


class TransferEstimator:
    """Evidence transfer from neighbouring keys (module docstring)."""

    name = NAME

    def estimate(self, query: EstimateQuery) -> Estimate | NoEstimate:
        key = query_key(query)
        if key is None:
            return NoEstimate(NAME, f"resident {query.resident.name} has no profile: nothing keys its evidence")
        return transfer_estimate(key, query.reader.records())


def query_key(query: EstimateQuery) -> PairKey | None:
    """The pair key of the query (as ``canary.admission.pair_key`` builds it); ``None`` for an
    unprofiled resident."""
    from canary._model import PairKey

    resident = query.resident.profile
    if resident is None:
        return None
    return PairKey(resident_version=resident.version, resident_shape_family=resident.shape_family,
                   candidate_version=query.candidate.version, candidate_shape_family=query.candidate.shape_family,
                   device_type=query.spec.name, regime=str(query.regime))


def before(when: dt.datetime) -> Callable[[EvidenceOut], bool]:
    """A ``keep`` filter: records created strictly before ``when`` (what a prediction made then saw)."""
    return lambda rec: rec.created_at < when
