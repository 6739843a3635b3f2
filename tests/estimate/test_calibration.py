"""Split-conformal calibration: the quantile's rule, the coverage it promises on exchangeable
outcomes, and the refusals (too few outcomes, drift)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import random

import pytest

from canary.estimate.calibration import Outcome, calibrate, conformal_q, min_checks

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _outcomes(n: int, *, seed: int, noise: float = 3.0, bias: float = 0.0, estimator: str = "e",
              device: str = "h100-sxm", start: int = 0) -> list[Outcome]:
    """Predictions point ± 2 of a slowdown measured as point + bias + N(0, noise)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        point = rng.uniform(0, 30)
        y = point + bias + rng.gauss(0, noise)
        out.append(Outcome(estimator, device, point - 2, point + 2, point, y, T0 + dt.timedelta(minutes=start + i),
                           f"ev-{seed}-{start + i}"))
    return out


@pytest.mark.parametrize(("scores", "alpha", "expected"), [
    pytest.param([0.1] * 18, 0.05, None, id="18-scores-are-too-few-at-95"),
    pytest.param([float(i) for i in range(19)], 0.05, 18.0, id="19-scores-the-largest-at-95"),
    pytest.param([float(i) for i in range(99)], 0.1, 89.0, id="99-scores-the-90th-at-90"),
    pytest.param([], 0.1, None, id="no-scores"),
])
def test_conformal_quantile(scores: list[float], alpha: float, expected: float | None) -> None:
    assert conformal_q(scores, alpha) == expected


def test_too_few_outcomes_are_uncalibrated_and_say_so() -> None:
    cal = calibrate("e", "h100-sxm", _outcomes(12, seed=1), alpha=0.05, min_outcomes=30)
    assert not cal.calibrated and cal.outcomes == 12
    assert "12 outcome(s) on h100-sxm, fewer than the 30" in cal.reason


def test_outcomes_of_other_estimators_and_devices_do_not_count() -> None:
    mixed = _outcomes(40, seed=2, estimator="other") + _outcomes(40, seed=3, device="a100-80gb")
    cal = calibrate("e", "h100-sxm", mixed, alpha=0.05, min_outcomes=30)
    assert cal.outcomes == 0 and not cal.calibrated


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_calibrated_intervals_cover_new_outcomes_at_the_level(alpha: float) -> None:
    """An estimator whose raw intervals are far too narrow (noise 6 against ±2) and biased by +5:
    calibrated on 1,000 outcomes, its intervals cover 4,000 new ones at the level, within three
    standard deviations of a 1,000-outcome quantile's coverage (about 0.01 at 0.9)."""
    train = _outcomes(1000, seed=11, noise=6.0, bias=5.0)
    cal = calibrate("e", "h100-sxm", train, alpha=alpha, min_outcomes=30)
    assert cal.calibrated, cal.reason
    assert cal.coverage is not None and cal.coverage >= 1 - alpha - 0.02
    test = _outcomes(4000, seed=12, noise=6.0, bias=5.0, start=10000)
    covered = 0
    for o in test:
        interval = cal.interval(o.lo_pct, o.hi_pct)
        assert interval is not None
        covered += interval[0] <= o.measured_pct <= interval[1]
    rate = covered / len(test)
    assert 1 - alpha - 0.03 <= rate <= 1 - alpha + 0.03


def test_raw_intervals_that_miss_are_not_trusted_as_they_are() -> None:
    train = _outcomes(100, seed=5, noise=6.0, bias=5.0)
    raw = sum(o.lo_pct <= o.measured_pct <= o.hi_pct for o in train) / len(train)
    cal = calibrate("e", "h100-sxm", train, alpha=0.05, min_outcomes=30)
    assert raw < 0.5 and cal.q is not None and cal.q > 0  # calibration widens them


def test_drift_makes_an_estimator_uncalibrated() -> None:
    """Sixty good outcomes, then twenty ever further off: checked in time order, coverage falls below
    the level (a quantile fitted on all eighty would simply widen and hide it)."""
    good = _outcomes(60, seed=7, noise=0.5)
    bad = [o for i in range(20) for o in _outcomes(1, seed=100 + i, noise=0.5, bias=40.0 + 5 * i, start=100 + i)]
    cal = calibrate("e", "h100-sxm", good + bad, alpha=0.05, min_outcomes=30)
    assert not cal.calibrated
    assert cal.coverage is not None and cal.coverage < 0.95
    assert "in time order" in cal.reason


def test_a_narrow_honest_estimator_keeps_narrow_intervals() -> None:
    cal = calibrate("e", "h100-sxm", _outcomes(100, seed=9, noise=0.3), alpha=0.05, min_outcomes=30)
    assert cal.calibrated, cal.reason
    lo, hi = cal.interval(8.0, 12.0) or (None, None)
    assert lo is not None and hi is not None and hi - lo < 8.0


def test_each_group_is_calibrated_on_its_own_outcomes() -> None:
    """A hundred outcomes of one kind of prediction (a transfer from an earlier version) calibrate that
    kind; another kind (a transfer from another regime) has none of its own and stays uncalibrated."""
    versions = [dataclasses.replace(o, group="other-version") for o in _outcomes(100, seed=13, noise=0.3)]
    assert calibrate("e", "h100-sxm", versions, alpha=0.05, min_outcomes=30, group="other-version").calibrated
    other = calibrate("e", "h100-sxm", versions, alpha=0.05, min_outcomes=30, group="other-regime")
    assert not other.calibrated and other.outcomes == 0 and "of kind other-regime" in other.reason


@pytest.mark.parametrize(("alpha", "needed"), [
    pytest.param(0.1, 36, id="36-checks-at-0.9"),
    pytest.param(0.05, 76, id="76-checks-at-0.95"),
    pytest.param(0.01, 396, id="396-checks-at-0.99"),
])
def test_deciding_needs_enough_checks_for_the_guard_to_have_teeth(alpha: float, needed: int) -> None:
    """The least number of checks at which two standard errors of the measured coverage are at most α."""
    assert min_checks(alpha) == needed
    level = 1 - alpha
    assert 2 * math.sqrt(alpha * level / needed) <= alpha < 2 * math.sqrt(alpha * level / (needed - 1))


def test_coverage_half_over_two_checks_never_calibrates() -> None:
    """The reported case in miniature: 11 outcomes at 0.9 with a policy minimum of 10. A finite 90%
    quantile needs 9 scores, so only outcomes 10 and 11 are checked; one of them misses (coverage
    0.5), which the two-standard-error guard alone lets pass on 2 checks. It must not decide."""
    out = _outcomes(11, seed=21, noise=0.3)
    last = out[-1]
    out[-1] = dataclasses.replace(last, measured_pct=last.hi_pct + 50.0)
    cal = calibrate("e", "h100-sxm", out, alpha=0.1, min_outcomes=10)
    assert cal.checked == 2 and cal.coverage == 0.5 and cal.outcomes == 11
    assert not cal.calibrated
    assert "measured coverage 0.500 over 2 checked of 11 outcomes" in cal.reason
    assert "coverage checked on 2 outcome(s); deciding needs 36 at 0.9" in cal.reason


def test_calibration_never_narrows_the_estimators_own_interval() -> None:
    """Outcomes that all land at the middle of their intervals give a negative quantile; the
    calibrated interval is still the raw one, and the measured coverage is that interval's."""
    out = [dataclasses.replace(o, measured_pct=o.point_pct) for o in _outcomes(100, seed=22)]
    cal = calibrate("e", "h100-sxm", out, alpha=0.1, min_outcomes=30)
    assert cal.q is not None and cal.q < 0 and cal.calibrated, cal.reason
    assert cal.interval(10.5, 21.9) == (10.5, 21.9)
    assert "never narrower than the estimator's own" in cal.reason
