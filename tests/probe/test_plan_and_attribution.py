"""The probe's window plan and the attribution test of an SLO or guard rollback, as tables of cases.

Expected values are derived by hand from the rules in the modules' docstrings (and, for the exact tests,
from the hypergeometric distribution written out), never read back from the code."""

from __future__ import annotations

import math

import pytest

from canary.policy import RiskBudget
from canary.probe.attribution import attribute, hypergeometric_sf, top_run_p
from canary.probe.plan import TimeStructure, Unmeasurable, WindowPlan, declared_cycle_s, plan_windows
from canary.profile import load_profile
from tests.support.paths import EXAMPLES


def budget(**kw: object) -> RiskBudget:
    base: dict[str, object] = dict(max_probe_time_s=240, max_requests_exposed=2000, max_resident_slowdown_pct=10,
                                   required_confidence=0.95, baseline_window_s=2, sampling_window_s=1, min_windows=3)
    base.update(kw)
    return RiskBudget(**base)  # type: ignore[arg-type]


def plan(b: RiskBudget, *, events: float, baseline_s: float = 2.0, throughput: bool = False,
         structure: TimeStructure | None = None, left: float | None = None) -> WindowPlan | Unmeasurable:
    return plan_windows(b, events=events, baseline_s=baseline_s, throughput=throughput, min_samples_per_window=3,
                        burst_pairs=59, structure=structure, time_left_s=b.max_probe_time_s if left is None else left)


STEADY = TimeStructure(0.0, 0.0)


@pytest.mark.parametrize(
    ("events", "baseline_s", "throughput", "window_s"),
    [
        # 100 requests/s: 12 requests take 0.12 s, below the 0.5 s floor
        pytest.param(200, 2.0, False, 0.5, id="busy server: the floor"),
        # 20 requests/s: 12 take 0.6 s
        pytest.param(40, 2.0, False, 0.6, id="20 rps: 0.6 s holds 12"),
        # 4.5 requests/s: 12 take 2.67 s, longer than the policy's 1 s window: lengthened
        pytest.param(9, 2.0, False, 12 / 4.5, id="4.5 rps: lengthened past sampling_window_s"),
        # one step a second alone: two steps take 2 s (longer than the 1 s window)
        pytest.param(5, 5.0, True, 2.0, id="batch, 1 s steps: two steps"),
        # four steps a second: two take 0.5 s
        pytest.param(20, 5.0, True, 0.5, id="batch, 0.25 s steps"),
    ],
)
def test_windows_hold_enough_of_the_residents_events(events: float, baseline_s: float, throughput: bool,
                                                      window_s: float) -> None:
    got = plan(budget(), events=events, baseline_s=baseline_s, throughput=throughput, structure=STEADY)
    assert isinstance(got, WindowPlan)
    assert got.window_s == pytest.approx(window_s)
    assert got.throughput is throughput


def test_a_resident_that_does_nothing_is_unmeasurable_before_the_candidate_starts() -> None:
    got = plan(budget(), events=0, structure=STEADY)
    assert isinstance(got, Unmeasurable)
    assert "no usable requests in 2 s alone" in got.reason


def test_a_window_the_budget_cannot_repeat_min_windows_times_is_unmeasurable() -> None:
    # 0.05 requests/s: 12 requests need 240 s a window; 3 pairs of 2 × 1.25 × 240 s cannot fit in 240 s
    got = plan(budget(), events=0.1, structure=STEADY)
    assert isinstance(got, Unmeasurable)
    assert "fewer than min_windows 3" in got.reason and "max_probe_time_s of at least" in got.reason


@pytest.mark.parametrize(
    ("structure", "coverage_pairs"),
    [
        # steady on both sides: nothing to cover beyond the burst rule
        pytest.param(STEADY, 0, id="steady"),
        # the candidate repeats every 30 s: 2 cycles = 60 s = 60 pairs of 2 × 0.5 s
        pytest.param(TimeStructure(30.0, 0.0), 60, id="candidate 30 s cycle"),
        pytest.param(TimeStructure(5.0, 20.0), 40, id="resident's cycle is the longer"),
        # unknown: the policy's 59 pairs of its 1 s windows = 118 s = 118 pairs of 2 × 0.5 s
        pytest.param(TimeStructure(None, 0.0), 118, id="candidate unknown: the policy's horizon"),
        pytest.param(None, 118, id="no structure given"),
    ],
)
def test_the_coverage_horizon_follows_the_declared_cycles(structure: TimeStructure | None,
                                                           coverage_pairs: int) -> None:
    got = plan(budget(), events=200, structure=structure)
    assert isinstance(got, WindowPlan) and got.window_s == 0.5
    assert got.coverage_pairs == coverage_pairs


def test_a_horizon_beyond_the_budget_says_no_safe_verdict_can_be_reached() -> None:
    got = plan(budget(), events=200, structure=TimeStructure(600.0, 0.0))
    assert isinstance(got, WindowPlan)
    assert "no safe verdict can be reached" in got.why


def test_declared_cycles_of_the_example_profiles() -> None:
    etl = load_profile(EXAMPLES / "profiles" / "etl-transcode.yaml")  # duty cycle, no phases
    assert declared_cycle_s(etl) == 0.0
    training = load_profile(EXAMPLES / "profiles" / "resnet50-training.yaml")
    expected = math.fsum(p.duration_s for p in training.phases) if training.phases else (
        0.0 if training.duty_cycle is not None else None)
    assert declared_cycle_s(training) == expected


@pytest.mark.parametrize(
    ("at_least", "draws", "successes", "population", "p"),
    [
        pytest.param(1, 1, 1, 20, 1 / 20, id="one window over, it carried the candidate"),
        # P(X >= 2), N=10, K=3, n=4: [C(3,2)C(7,2) + C(3,3)C(7,1)] / C(10,4) = (63 + 7) / 210
        pytest.param(2, 4, 3, 10, 70 / 210, id="written out"),
        pytest.param(0, 4, 3, 10, 1.0, id="nothing asked"),
        pytest.param(4, 4, 3, 10, 0.0, id="impossible"),
    ],
)
def test_hypergeometric_tail(at_least: int, draws: int, successes: int, population: int, p: float) -> None:
    assert hypergeometric_sf(at_least, draws, successes, population) == pytest.approx(p)


def test_top_run() -> None:
    # two of three on-windows above all four off-windows: C(3,2)/C(7,2) = 3/21
    assert top_run_p([9.0, 8.0, 1.0], [5.0, 4.0, 3.0, 2.0]) == (2, pytest.approx(3 / 21))


@pytest.mark.parametrize(
    ("on", "off", "threshold", "level", "allowed", "attributed", "worth"),
    [
        # one breach with the candidate, none in 80 windows alone: top run p = 1/81 and over p = 1/81,
        # Bonferroni 2/81 = 0.0247 <= 0.025
        pytest.param([30.0], [10.0] * 80, 20.0, 0.05, 0, True, False, id="lone breach, many clean windows"),
        # the same breach with 3 windows alone: p = 1/4 > 0.025; 77 more clean windows could attribute it
        pytest.param([30.0], [10.0] * 3, 20.0, 0.05, 77, False, True, id="worth measuring"),
        pytest.param([30.0], [10.0] * 3, 20.0, 0.05, 10, False, False, id="not worth it within the share"),
        # the resident breaches alone as often: never attributable
        pytest.param([30.0, 10.0], [30.0, 10.0] * 40, 20.0, 0.05, 1000, False, False, id="the resident's own"),
    ],
)
def test_attribution(on: list[float], off: list[float], threshold: float, level: float, allowed: int,
                     attributed: bool, worth: bool) -> None:
    got = attribute(on, off, threshold, level=level, more_windows_allowed=allowed)
    assert got.attributed is attributed
    assert got.worth_measuring is worth
    assert ("attributed to the candidate" if attributed else "not attributable") in got.describe()


def test_attribution_keeps_its_level_under_the_null() -> None:
    """Windows exchangeable (the candidate changes nothing): the tests attribute at most at their level."""
    import random

    rng = random.Random(7)
    trials, hits, level = 4000, 0, 0.05
    for _ in range(trials):
        values = [rng.lognormvariate(0, 0.5) for _ in range(30)]
        on, off = values[:6], values[6:]
        if attribute(on, off, threshold=1.5, level=level, more_windows_allowed=0).attributed:
            hits += 1
    rate = hits / trials
    assert rate <= level + 2 * math.sqrt(level * (1 - level) / trials)
