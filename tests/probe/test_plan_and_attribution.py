"""The probe's window plan and the attribution test of an SLO or guard rollback, as tables of cases.

Expected values are derived by hand from the rules in the modules' docstrings (and, for the exact tests,
from the hypergeometric distribution written out), never read back from the code."""

from __future__ import annotations

import math

import pytest

from canary.policy import RiskBudget
from canary.probe.attribution import ExceedanceTally, attribute
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


def _tally(rule: str, pairs: list[tuple[bool, bool]]) -> ExceedanceTally:
    t = ExceedanceTally(rule)  # type: ignore[arg-type]
    for on_over, off_over in pairs:
        t = t.add(on_over=on_over, off_over=off_over)
    return t


def test_a_tally_bets_only_on_discordant_pairs() -> None:
    t = _tally("slo", [(True, False), (False, False), (True, True), (False, True), (True, False)])
    assert (t.pairs, t.on_only, t.off_only, t.both) == (5, 2, 1, 1)
    # 1.9 × 1.9 × 0.1: the concordant pairs leave the wealth alone
    assert t.wealth == pytest.approx(1.9 * 1.9 * 0.1)
    assert "2 of 5 pairs over it only with the candidate, 1 only without it, 1 both" in t.describe()


@pytest.mark.parametrize(
    ("slo", "guard", "attributed", "evidence"),
    [
        # both rules see five pairs over only with the candidate: 1.9^5 = 24.8 >= 1/0.05
        pytest.param(5, 5, True, 1.9**5, id="five breaches, both rules"),
        pytest.param(4, 4, False, 1.9**4, id="four are not enough"),
        # one rule of two: the mean of 1.9^5 and 1 is 12.9 < 20; six give (47.0 + 1) / 2 = 24.0
        pytest.param(5, 0, False, (1.9**5 + 1) / 2, id="five, one rule"),
        pytest.param(6, 0, True, (1.9**6 + 1) / 2, id="six, one rule"),
    ],
)
def test_attribution_needs_repeated_breaches(slo: int, guard: int, attributed: bool, evidence: float) -> None:
    got = attribute([_tally("slo", [(True, False)] * slo), _tally("guard", [(True, False)] * guard)], level=0.05)
    assert got.attributed is attributed
    assert got.evidence == pytest.approx(evidence)
    assert got.describe().startswith("attributed to the candidate" if attributed else "not attributable")


def test_one_breach_by_the_resident_alone_outweighs_one_with_the_candidate() -> None:
    # 1.9^6 × 0.1 = 4.7: six breaches with the candidate after one without are not attributed
    got = attribute([_tally("guard", [(False, True)] + [(True, False)] * 6)], level=0.05)
    assert not got.attributed and got.evidence == pytest.approx(1.9**6 * 0.1)


def test_attribution_refuses_a_bad_level_or_no_rule() -> None:
    with pytest.raises(ValueError, match="level"):
        attribute([ExceedanceTally("slo")], level=1.5)
    with pytest.raises(ValueError, match="no rule"):
        attribute([], level=0.05)


def test_attribution_keeps_its_level_under_the_null_however_often_it_is_looked_at() -> None:
    """Windows exchangeable (the candidate changes nothing), a resident over its threshold in one window
    in five: the evidence is checked after *every* pair — the most a probe could look — and still
    crosses 1/α in at most α of the probes (Ville's inequality)."""
    import random

    rng = random.Random(7)
    trials, hits, level = 2000, 0, 0.05
    for _ in range(trials):
        slo, guard = ExceedanceTally("slo"), ExceedanceTally("guard")
        for _pair in range(60):
            off, on = rng.lognormvariate(0, 0.5), rng.lognormvariate(0, 0.5)
            slo = slo.add(on_over=on > 1.5, off_over=off > 1.5)
            guard = guard.add(on_over=on > 1.9, off_over=off > 1.9)
            if attribute([slo, guard], level=level).attributed:
                hits += 1
                break
    rate = hits / trials
    assert rate <= level + 2 * math.sqrt(level * (1 - level) / trials)
