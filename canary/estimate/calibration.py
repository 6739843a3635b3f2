"""Calibration of estimators on our own outcomes: split conformal, per estimator and device type.

An *outcome* is a prediction made before a probe set against what the probe then measured (the
evidence record's resident slowdown). Its nonconformity score is how far the measurement fell
outside the predicted interval, ``s = max(lo − y, y − hi)`` (negative inside). With ``n`` outcomes
and miscoverage ``α = 1 − required_confidence``, ``q`` is the ``⌈(n + 1)(1 − α)⌉``-th smallest
score, and ``[lo − q, hi + q]`` covers a new, exchangeable outcome with probability ≥ 1 − α
(split conformal; Romano, Patterson & Candès 2019 for interval scores).

An estimator is *calibrated* for a device type — its intervals may decide, where a policy trusts
it — only when all of these hold; otherwise it is *uncalibrated* and may order work, never decide:

- at least ``min_outcomes`` outcomes (and enough that ``q`` is finite: ``n ≥ 1/α − 1``);
- its *measured coverage* reaches ``1 − α``: ``q`` fitted on the older half of the outcomes covers
  at least that fraction of the newer half (an honest, held-out check that the guarantee's
  exchangeability holds in practice, e.g. that the workloads did not drift).

Pure functions; the outcomes come from :mod:`canary.estimate.store`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MIN_OUTCOMES = 30


@dataclass(frozen=True)
class Outcome:
    """One prediction (``lo_pct``, ``hi_pct``, ``point_pct`` of ``estimator`` on ``device_type``) and the
    resident slowdown a probe then measured (``measured_pct``) at ``at``; ``evidence_id``: the record."""

    estimator: str
    device_type: str
    lo_pct: float
    hi_pct: float
    point_pct: float
    measured_pct: float
    at: dt.datetime
    evidence_id: str

    @property
    def score(self) -> float:
        return max(self.lo_pct - self.measured_pct, self.measured_pct - self.hi_pct)


@dataclass(frozen=True)
class Calibration:
    """What the outcomes say about one estimator on one device type at confidence ``1 − alpha``.

    ``q_pct``: the conformal widening (``None`` when the outcomes are too few for a finite one);
    ``coverage``: the measured held-out coverage (``None`` when either half is too small);
    ``calibrated``: may its intervals decide; ``reason``: why not, or what the numbers are."""

    estimator: str
    device_type: str
    alpha: float
    outcomes: int
    q_pct: float | None
    coverage: float | None
    held_out: int
    calibrated: bool
    reason: str

    def interval(self, lo_pct: float, hi_pct: float) -> tuple[float, float] | None:
        """The calibrated interval of a raw one; ``None`` without a finite ``q``."""
        if self.q_pct is None:
            return None
        lo, hi = lo_pct - self.q_pct, hi_pct + self.q_pct
        if lo > hi:  # a negative q narrower than the interval: the middle point
            lo = hi = (lo + hi) / 2
        return lo, hi


def conformal_q(scores: Sequence[float], alpha: float) -> float | None:
    """The split-conformal quantile of ``scores`` at miscoverage ``alpha``; ``None`` when
    ``⌈(n + 1)(1 − alpha)⌉ > n`` (too few scores for a finite one)."""
    n = len(scores)
    k = math.ceil((n + 1) * (1.0 - alpha) - 1e-12)
    if n == 0 or k > n:
        return None
    return sorted(scores)[k - 1]


def calibrate(estimator: str, device_type: str, outcomes: Sequence[Outcome], *, alpha: float,
              min_outcomes: int = DEFAULT_MIN_OUTCOMES) -> Calibration:
    """Calibrate ``estimator`` on ``device_type`` from ``outcomes`` (others are ignored)."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must lie in (0, 1)")
    mine = sorted((o for o in outcomes if o.estimator == estimator and o.device_type == device_type),
                  key=lambda o: (o.at, o.evidence_id))
    n = len(mine)
    q = conformal_q([o.score for o in mine], alpha)
    half = n // 2
    older, newer = mine[:half], mine[half:]
    q_old = conformal_q([o.score for o in older], alpha)
    coverage = None
    if q_old is not None and newer:
        covered = sum(1 for o in newer if o.lo_pct - q_old <= o.measured_pct <= o.hi_pct + q_old)
        coverage = covered / len(newer)
    level = 1.0 - alpha

    def result(ok: bool, reason: str) -> Calibration:
        return Calibration(estimator, device_type, alpha, n, q, coverage, len(newer) if coverage is not None else 0,
                           ok, reason)

    if n < min_outcomes:
        return result(False, f"{n} outcome(s) on {device_type}, fewer than the {min_outcomes} calibration needs")
    if q is None:
        return result(False, f"{n} outcome(s) are too few for a finite conformal quantile at {level:g}")
    if coverage is None:
        return result(False, f"{n} outcome(s): the older half is too small to measure coverage on the newer half")
    if coverage < level:
        return result(False, f"measured coverage {coverage:.3f} on the newer {len(newer)} outcome(s) is below "
                      f"{level:g}: the estimator's errors are not exchangeable over time (drift)")
    return result(True, f"{n} outcome(s); conformal widening {q:+.1f} points; measured coverage {coverage:.3f} "
                  f"on the newer {len(newer)}")
