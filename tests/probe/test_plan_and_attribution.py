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
         structure: TimeStructure | None = None, left: float | None = None,
         p99_ms: float | None = None) -> WindowPlan | Unmeasurable:
    return plan_windows(b, events=events, baseline_s=baseline_s, throughput=throughput, min_samples_per_window=3,
                        burst_pairs=59, structure=structure, time_left_s=b.max_probe_time_s if left is None else left,
                        latency_p99_ms=p99_ms)


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


def test_a_phased_residents_windows_span_its_cycle_and_a_washout_follows_each_on_window() -> None:
    # 100 requests/s would need only 0.5 s windows, but the resident repeats every 5 s (a 2 s burst, say):
    # a shorter window measures which phase it fell on. Windows of the 5 s cycle; coverage 2 × 20 s =
    # 40 s = 4 pairs of 2 × 5 s; the washout is one cycle (longer than 4 × a 50 ms p99).
    got = plan(budget(), events=200, structure=TimeStructure(20.0, 5.0), p99_ms=50.0)
    assert isinstance(got, WindowPlan)
    assert got.window_s == 5.0 and got.coverage_pairs == 4
    assert got.washout_s == 5.0
    assert got.pair_s == 2 * 1.25 * 5.0 + 5.0
    assert "span the resident's declared 5 s cycle" in got.why and "washout of 5 s" in got.why


@pytest.mark.parametrize(
    ("throughput", "p99_ms", "washout_s"),
    [
        # a steady latency resident: 4 × its p99 alone, 80 ms → 0.32 s
        pytest.param(False, 80.0, 0.32, id="steady latency resident: 4 sojourns"),
        # no baseline p99 to size it from (and no cycle): none
        pytest.param(False, None, 0.0, id="no p99: no washout"),
        # a throughput resident's work has no queue that outlives the window
        pytest.param(True, 80.0, 0.0, id="throughput resident: none"),
    ],
)
def test_the_washout_of_a_steady_resident(throughput: bool, p99_ms: float | None, washout_s: float) -> None:
    got = plan(budget(), events=200, baseline_s=5.0 if throughput else 2.0, throughput=throughput,
               structure=STEADY, p99_ms=p99_ms)
    assert isinstance(got, WindowPlan)
    assert got.washout_s == pytest.approx(washout_s)
    assert ("washout" in got.why) is (washout_s > 0)


def test_washouts_count_against_the_budget_before_the_candidate_starts() -> None:
    # 60 s cycle: windows of 60 s and a 60 s washout, 2 × 1.25 × 60 + 60 = 210 s a pair: one pair fits
    # 240 s, fewer than min_windows 3: unmeasurable, and the budget named is 3 × 210 + 1 s.
    got = plan(budget(), events=200, structure=TimeStructure(0.0, 60.0), p99_ms=50.0)
    assert isinstance(got, Unmeasurable)
    assert "hold 1 pair(s), fewer than min_windows 3" in got.reason
    assert "max_probe_time_s of at least 631 s" in got.reason


def test_a_horizon_beyond_the_budget_says_no_safe_verdict_can_be_reached() -> None:
    got = plan(budget(), events=200, structure=TimeStructure(600.0, 0.0))
    assert isinstance(got, WindowPlan)
    assert "no safe verdict can be reached" in got.why


def test_a_budget_short_of_the_burst_rule_says_so_and_what_budget_would_do() -> None:
    # 25 requests in 6 s alone: 4.17/s, 12 take 2.88 s; the declared 10 s cycle lengthens the window to
    # 10 s, which holds 41.7 requests. Washout: one cycle (10 s > 4 × 400 ms). A pair at most
    # 2 × 1.25 × 10 + 10 = 35 s: 240 s hold 6 pairs, fewer than the 59 the burst rule needs.
    # A safe verdict needs 59 × 35 s + the 6 s baseline = 2071 s.
    got = plan(budget(), events=25, baseline_s=6.0, structure=TimeStructure(0.0, 10.0), p99_ms=400.0)
    assert isinstance(got, WindowPlan)
    assert got.window_s == 10.0 and got.washout_s == 10.0
    assert "hold 41.7 requests on average (4.17 requests/s alone), and span the resident's declared 10 s cycle" in got.why
    assert "the budget holds 6 pairs, fewer than the 59 usable pairs the burst rule needs" in got.why
    assert "only an unsafe one (a safe verdict needs max_probe_time_s of at least 2071 s)" in got.why
    # The same resident with a budget that holds the 59 pairs: nothing said.
    roomy = plan(budget(max_probe_time_s=2100), events=25, baseline_s=6.0, structure=TimeStructure(0.0, 10.0),
                 p99_ms=400.0)
    assert isinstance(roomy, WindowPlan) and "no safe verdict" not in roomy.why


def test_declared_cycles_of_the_example_profiles() -> None:
    etl = load_profile(EXAMPLES / "profiles" / "etl-transcode.yaml")  # duty cycle, no phases
    assert declared_cycle_s(etl) == 0.0
    training = load_profile(EXAMPLES / "profiles" / "resnet50-training.yaml")
    expected = math.fsum(p.duration_s for p in training.phases) if training.phases else (
        0.0 if training.duty_cycle is not None else None)
    assert declared_cycle_s(training) == expected


def test_only_phases_that_differ_make_a_load_cycle() -> None:
    from canary.bench.profiles import bursty_serving, feature_store_serving

    decode = load_profile(EXAMPLES / "profiles" / "llm-decode.yaml")  # 0.6 s decode burst, 0.4 s idle
    steady = feature_store_serving()  # one 1 s phase, repeated: a steady load
    assert TimeStructure.of(steady, decode).resident_load_cycle_s == 1.0
    assert TimeStructure.of(decode, bursty_serving()).resident_load_cycle_s == 5.0
    one_phase = TimeStructure.of(decode, steady)
    assert one_phase.resident_cycle_s == 1.0 and one_phase.resident_load_cycle_s == 0.0
    # a steady resident at 100 requests/s keeps its 0.5 s windows and a washout of 4 sojourns only
    got = plan(budget(), events=200, structure=one_phase, p99_ms=20.0)
    assert isinstance(got, WindowPlan) and got.window_s == 0.5 and got.washout_s == pytest.approx(0.08)


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
