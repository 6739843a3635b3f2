"""Calibration of estimators on our own outcomes: split conformal, per estimator and device type.

An *outcome* is a prediction made before a probe set against what the probe then measured (the
evidence record's resident slowdown). Its nonconformity score is how far the measurement fell
outside the predicted interval in units of the interval's width, ``s = max(lo − y, y − hi) / w`` with
``w = max(hi − lo, MIN_WIDTH_PCT)`` (negative inside): an estimator that says how unsure it is gets
narrow calibrated intervals where it is sure and wide ones where it is not (normalised conformal
scores; the width is fixed before the outcome, so validity is unchanged). With ``n`` outcomes and
miscoverage ``α = 1 − required_confidence``, ``q`` is the ``⌈(n + 1)(1 − α)⌉``-th smallest score, and
``[lo − max(q, 0)·w, hi + max(q, 0)·w]`` covers a new, exchangeable outcome with probability ≥ 1 − α
(split conformal; Romano, Patterson & Candès 2019 for interval scores). Calibration only ever widens:
a negative ``q`` (the outcomes fell well inside the raw intervals) leaves the estimator's own interval
as it is — the measurements the outcomes are scored against are themselves estimates, and a handful
of them landing near the middle is no licence to claim more than the estimator did.

An estimator is *calibrated* for a device type — its intervals may decide, where a policy trusts
it — only when all of these hold; otherwise it is *uncalibrated* and may order work, never decide:

- at least ``min_outcomes`` outcomes (and enough that ``q`` is finite: ``n ≥ 1/α − 1``);
- its *measured coverage* reaches ``1 − α``: in time order, each outcome is checked against the
  interval calibrated on the outcomes before it (from the first that has a finite quantile on), and the
  covered fraction is not below ``1 − α`` by more than two standard errors (``2·√(α(1−α)/m)`` over
  ``m`` checked: an exchangeable stream hovers around the level) — coverage as the store would have
  delivered it, on data each quantile did not see. Drift (the workloads or the estimator's errors changing over time) shows here
  as misses, where a quantile fitted on everything would quietly widen;
- that check has teeth: at least ``min_checks(α) = ⌈4(1 − α)/α⌉`` outcomes were checked, the
  number at which the two-standard-error tolerance is at most ``α`` itself, so a miss rate of twice
  the allowed one (coverage ``1 − 2α``) can no longer pass (36 checks at 0.9, 76 at 0.95). With fewer
  the guard passes anything — 0.5 over 2 checks at 0.9 — and the estimator stays uncalibrated.

Pure functions; the outcomes come from :mod:`canary.estimate.store`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MIN_OUTCOMES = 30
#: The narrowest width a score is measured in (percentage points): a point prediction still has a scale.
MIN_WIDTH_PCT = 1.0


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
    group: str = ""

    @property
    def score(self) -> float:
        return max(self.lo_pct - self.measured_pct, self.measured_pct - self.hi_pct) / width(self.lo_pct, self.hi_pct)


def min_checks(alpha: float) -> int:
    """The held-out checks measured coverage needs before it may let an estimator decide at
    miscoverage ``alpha``: the least ``m`` with ``2·√(α(1−α)/m) ≤ α``, i.e. ``⌈4(1 − α)/α⌉``."""
    return math.ceil(4 * (1.0 - alpha) / alpha - 1e-9)


def width(lo_pct: float, hi_pct: float) -> float:
    """The scale of an interval's scores: its width, at least ``MIN_WIDTH_PCT``."""
    return max(hi_pct - lo_pct, MIN_WIDTH_PCT)


@dataclass(frozen=True)
class Calibration:
    """What the outcomes say about one estimator on one device type at confidence ``1 − alpha``.

    ``q``: the conformal quantile in widths of the raw interval (``None`` when the outcomes are too
    few for a finite one; the widening applied is ``max(q, 0)``); ``coverage``: the coverage measured
    in time order (``None`` when too few) over ``checked`` held-out outcomes of the ``outcomes``;
    ``calibrated``: may its intervals decide; ``reason``: why not, or what the numbers are."""

    estimator: str
    device_type: str
    alpha: float
    outcomes: int
    q: float | None
    coverage: float | None
    calibrated: bool
    reason: str
    checked: int = 0

    def interval(self, lo_pct: float, hi_pct: float) -> tuple[float, float] | None:
        """The calibrated interval of a raw one, never narrower than it; ``None`` without a finite ``q``."""
        if self.q is None:
            return None
        w = width(lo_pct, hi_pct) * widening(self.q)
        return lo_pct - w, hi_pct + w


def widening(q: float) -> float:
    """The widening a conformal quantile ``q`` applies, in widths: never negative (calibration does
    not narrow an estimator's own interval)."""
    return max(q, 0.0)


def conformal_q(scores: Sequence[float], alpha: float) -> float | None:
    """The split-conformal quantile of ``scores`` at miscoverage ``alpha``; ``None`` when
    ``⌈(n + 1)(1 − alpha)⌉ > n`` (too few scores for a finite one)."""
    n = len(scores)
    k = math.ceil((n + 1) * (1.0 - alpha) - 1e-12)
    if n == 0 or k > n:
        return None
    return sorted(scores)[k - 1]


def calibrate(estimator: str, device_type: str, outcomes: Sequence[Outcome], *, alpha: float,
              min_outcomes: int = DEFAULT_MIN_OUTCOMES, group: str = "") -> Calibration:
    """Calibrate ``estimator`` on ``device_type`` from ``outcomes`` of the same ``group`` (the
    estimator's kind of prediction: ``Estimate.group``); others are ignored."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must lie in (0, 1)")
    mine = sorted((o for o in outcomes if o.estimator == estimator and o.device_type == device_type
                   and o.group == group),
                  key=lambda o: (o.at, o.evidence_id))
    n = len(mine)
    scores = [o.score for o in mine]
    q = conformal_q(scores, alpha)
    covered, held = 0, 0
    for i, o in enumerate(mine):
        q_i = conformal_q(scores[:i], alpha)
        if q_i is None:
            continue
        held += 1
        covered += int(o.score <= widening(q_i))  # the interval that would have been delivered
    coverage = covered / held if held else None
    level = 1.0 - alpha

    def result(ok: bool, reason: str) -> Calibration:
        return Calibration(estimator, device_type, alpha, n, q, coverage, ok, reason, held)

    if n < min_outcomes:
        what = f" of kind {group}" if group else ""
        return result(False, f"{n} outcome(s){what} on {device_type}, fewer than the {min_outcomes} calibration needs")
    if q is None or coverage is None:
        return result(False, f"{n} outcome(s) are too few for a finite conformal quantile at {level:g}")
    measured = f"measured coverage {coverage:.3f} over {held} checked of {n} outcomes"
    if coverage < level - 2 * math.sqrt(alpha * level / held):
        return result(False, f"{measured} (in time order) is below {level:g} by more than two standard errors: "
                      "the estimator's errors are not exchangeable (drift, or outcomes far off)")
    needed = min_checks(alpha)
    if held < needed:
        return result(False, f"{measured}: coverage checked on {held} outcome(s); deciding needs {needed} at "
                      f"{level:g} (where two standard errors are at most {alpha:g})")
    clamp = f" (quantile {q:+.2f}: never narrower than the estimator's own)" if q < 0 else ""
    return result(True, f"{measured} (in time order); conformal widening {widening(q):+.2f} interval widths{clamp}")
