"""The sequential judge: each pipeline step alone, then the whole judgment, then its error guarantee."""

from __future__ import annotations

import math
import random

import pytest

from canary.probe.budget import RiskBudget
from canary.probe.judge import (
    CleanWindow,
    JudgeSettings,
    SequentialState,
    WindowPair,
    classify,
    confidence_sequence,
    judge,
    pair_statistic,
    preprocess_window,
    update,
)

SETTINGS = JudgeSettings(max_resident_slowdown_pct=10.0, required_confidence=0.95, min_pairs=2)


@pytest.mark.parametrize(
    ("samples", "status", "statistic", "dropped"),
    [
        ([10.0, 12.0, 14.0], "ok", 12.0, 0),
        ([10, 12, 14], "ok", 12.0, 0),  # integers are numbers
        ([10.0, math.nan, 12.0, math.inf, 14.0], "ok", 12.0, 2),  # NaN/inf dropped and counted
        ([], "no-data", None, 0),
        ([math.nan, math.nan, math.nan, math.nan], "no-data", None, 4),  # NaN-only is no-data, never a pass
        ([10.0, 11.0], "no-data", None, 0),  # below min_samples_per_window (3)
        ([10.0, "fast", 12.0], "error", None, 0),  # garbage
        ([10.0, None, 12.0], "error", None, 0),
        ([10.0, True, 12.0], "error", None, 0),  # a bool is not a latency
        ([10.0, -1.0, 12.0], "error", None, 0),  # negative latency
        ([0.0, 0.0, 0.0], "error", None, 0),  # mean 0: no ratio
    ],
)
def test_preprocess_table(samples: list[object], status: str, statistic: float | None, dropped: int) -> None:
    clean = preprocess_window(samples, SETTINGS)
    assert clean.status == status
    assert clean.statistic_ms == statistic
    assert clean.dropped_non_finite == dropped
    if status == "error":
        assert clean.reason


def test_outlier_policy_drops_values_above_factor_times_median() -> None:
    settings = JudgeSettings(10.0, 0.95, outlier_factor=3.0)
    clean = preprocess_window([10.0, 11.0, 12.0, 500.0], settings)
    assert clean.status == "ok"
    assert clean.dropped_outliers == 1
    assert clean.statistic_ms == pytest.approx(11.0)


def test_median_statistic() -> None:
    settings = JudgeSettings(10.0, 0.95, window_statistic="median")
    assert preprocess_window([1.0, 2.0, 100.0], settings).statistic_ms == 2.0


def test_pair_statistic_is_the_log_ratio_and_none_without_data() -> None:
    off = CleanWindow("ok", (10.0,), 1, 0, 0, 10.0)
    on = CleanWindow("ok", (12.0,), 1, 0, 0, 12.0)
    empty = CleanWindow("no-data", (), 0, 0, 0, None)
    assert pair_statistic(off, on) == pytest.approx(math.log(1.2))
    assert pair_statistic(off, empty) is None
    assert pair_statistic(empty, on) is None


def test_update_matches_two_pass_mean_and_variance() -> None:
    values = [0.1, -0.2, 0.05, 0.3, 0.0]
    state = SequentialState()
    for v in values:
        state = update(state, v)
    mean = sum(values) / len(values)
    assert state.n == 5
    assert state.mean == pytest.approx(mean)
    assert state.sum_sq_dev == pytest.approx(sum((v - mean) ** 2 for v in values))


def test_confidence_sequence_unbounded_until_two_pairs_and_shrinks() -> None:
    assert confidence_sequence(SequentialState(), 0.05, 0.5) == (-math.inf, math.inf)
    assert confidence_sequence(update(SequentialState(), 0.1), 0.05, 0.5) == (-math.inf, math.inf)
    rng = random.Random(3)
    state = SequentialState()
    widths = []
    for n in range(1, 200):
        state = update(state, rng.gauss(0.05, 0.02))
        low, high = confidence_sequence(state, 0.05, 0.5)
        if n >= 10:
            assert low < state.mean < high
            widths.append(high - low)
    assert widths[-1] < widths[0] / 3


def test_confidence_sequence_is_scale_equivariant() -> None:
    state_a, state_b = SequentialState(), SequentialState()
    for v in [0.1, 0.3, 0.2, 0.25, 0.15]:
        state_a = update(state_a, v)
        state_b = update(state_b, 10 * v)
    low_a, high_a = confidence_sequence(state_a, 0.05, 0.5)
    low_b, high_b = confidence_sequence(state_b, 0.05, 0.5)
    assert (low_b, high_b) == pytest.approx((10 * low_a, 10 * high_a))


@pytest.mark.parametrize(
    ("interval", "pairs", "exhausted", "label"),
    [
        ((0.11, 0.2), 3, False, "unsafe"),
        ((-0.1, 0.05), 3, False, "safe"),
        ((0.05, 0.2), 3, False, None),  # straddles the bound: continue
        ((0.05, 0.2), 3, True, "inconclusive"),
        ((-0.1, 0.05), 1, False, None),  # below min_pairs: never decide early
        ((-0.1, 0.05), 1, True, "inconclusive"),
        ((-math.inf, math.inf), 5, True, "inconclusive"),
    ],
)
def test_classify_table(
    interval: tuple[float, float], pairs: int, exhausted: bool, label: str | None
) -> None:
    bound = math.log1p(0.10)
    assert classify(interval, bound, pairs=pairs, min_pairs=2, budget_exhausted=exhausted) == label


def _window(rng: random.Random, mean_ms: float, n: int = 40, cv: float = 0.3) -> list[float]:
    sigma = math.sqrt(math.log1p(cv * cv))
    mu = math.log(mean_ms) - sigma * sigma / 2
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def _run(
    true_slowdown_pct: float, seed: int, max_pairs: int = 40, settings: JudgeSettings = SETTINGS
) -> tuple[str | None, int]:
    rng = random.Random(seed)
    pairs: list[WindowPair] = []
    for i in range(max_pairs):
        pairs.append(WindowPair(_window(rng, 10.0), _window(rng, 10.0 * (1 + true_slowdown_pct / 100))))
        j = judge(pairs, settings, budget_exhausted=i == max_pairs - 1)
        if j.label is not None:
            return j.label, i + 1
    raise AssertionError("the final judgment must carry a label")


def test_clearly_safe_and_clearly_unsafe_stop_early() -> None:
    label, n = _run(0.0, seed=1)
    assert (label, n < 15) == ("safe", True)
    label, n = _run(40.0, seed=2)
    assert (label, n < 8) == ("unsafe", True)


def test_judgment_fields_and_reason_name_the_bound() -> None:
    rng = random.Random(5)
    pairs = [WindowPair(_window(rng, 10.0), _window(rng, 10.0)) for _ in range(12)]
    j = judge(pairs, SETTINGS, budget_exhausted=False)
    assert j.label == "safe"
    assert j.interval_pct is not None and j.estimate_pct is not None
    assert j.interval_pct[0] < j.estimate_pct < j.interval_pct[1] < 10.0
    assert j.window_pairs == 12 and j.raw_samples == 12 * 80
    assert "10%" in j.reason and j.confidence == 0.95


def test_empty_windows_are_no_data_at_the_end_and_never_a_pass() -> None:
    pairs = [WindowPair([], []), WindowPair([math.nan] * 5, [math.nan] * 5)]
    assert judge(pairs, SETTINGS, budget_exhausted=False).label is None
    final = judge(pairs, SETTINGS, budget_exhausted=True)
    assert final.label == "no-data"
    assert final.estimate_pct is None and final.interval_pct is None
    assert final.no_data_pairs == 2


def test_garbage_becomes_error_with_the_reason() -> None:
    rng = random.Random(1)
    pairs = [
        WindowPair(_window(rng, 10.0), _window(rng, 10.0)),
        WindowPair(_window(rng, 10.0), ["x", 1.0, 2.0]),
    ]
    j = judge(pairs, SETTINGS, budget_exhausted=False)
    assert j.label == "error"
    assert "pair 1 on-window" in j.reason and "not a number" in j.reason


def test_an_on_window_without_data_after_an_off_window_with_data_is_a_stall_and_unsafe() -> None:
    rng = random.Random(1)
    j = judge([WindowPair(_window(rng, 10.0), [])], SETTINGS, budget_exhausted=False)
    assert j.label == "unsafe"
    assert j.stalled_pairs == 1
    assert "served no usable request" in j.reason


def test_settings_from_budget() -> None:
    budget = RiskBudget(
        max_probe_time_s=60,
        max_requests_exposed=100,
        max_resident_slowdown_pct=7,
        required_confidence=0.9,
        min_windows=4,
        window_statistic="median",
        outlier_factor=5.0,
        judge_mixture_precision=2.0,
    )
    s = JudgeSettings.from_budget(budget)
    assert (s.max_resident_slowdown_pct, s.required_confidence, s.min_pairs) == (7, 0.9, 4)
    assert (s.window_statistic, s.outlier_factor, s.mixture_precision) == ("median", 5.0, 2.0)
    assert s.alpha == pytest.approx(0.1)


def test_time_uniform_coverage_under_continuous_monitoring() -> None:
    """Checked at every n up to 60, the sequence misses the true mean in at most ~alpha of runs."""
    alpha = 0.1
    misses = 0
    trials = 400
    rng = random.Random(11)
    for _ in range(trials):
        state = SequentialState()
        for _n in range(60):
            state = update(state, rng.gauss(0.07, 0.05))
            low, high = confidence_sequence(state, alpha, 0.5)
            if not low <= 0.07 <= high:
                misses += 1
                break
    # Ville's bound is alpha; allow three binomial standard errors of slack.
    assert misses / trials <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)


def test_false_admit_rate_at_the_bound_is_within_one_minus_confidence() -> None:
    """A pair exactly 12% slower against a 10% bound: 'safe' would be a false admit."""
    admits = sum(_run(12.0, seed=s, max_pairs=30)[0] == "safe" for s in range(150))
    assert admits / 150 <= 0.05


def test_a_sparse_on_window_is_only_no_data_not_a_stall() -> None:
    rng = random.Random(1)
    j = judge([WindowPair(_window(rng, 10.0), [10.0, 11.0])], SETTINGS, budget_exhausted=True)
    assert j.label == "no-data"
    assert j.stalled_pairs == 0 and j.no_data_pairs == 1


def test_futility_stops_a_borderline_probe_early_as_inconclusive_never_safe() -> None:
    """A pair whose slowdown sits on the bound cannot be settled within the budget: stop, inconclusive."""
    import random as _random

    from canary.probe.judge import JudgeSettings, WindowPair, judge

    settings = JudgeSettings(max_resident_slowdown_pct=10, required_confidence=0.95, min_pairs=3)
    rng = _random.Random(5)
    pairs: list[WindowPair] = []
    stopped_at = None
    for i in range(30):
        off = [rng.gauss(10.0, 1.0) for _ in range(20)]
        on = [rng.gauss(11.0, 1.1) for _ in range(20)]  # 10% slower: exactly on the bound
        pairs.append(WindowPair(off, on))
        j = judge(pairs, settings, budget_exhausted=False, max_pairs=30)
        if j.label is not None:
            stopped_at = i + 1
            assert j.label == "inconclusive"
            assert "stopped early" in j.reason
            break
    assert stopped_at is not None and stopped_at < 30


def test_futility_never_cuts_a_clear_answer_short() -> None:
    import random as _random

    from canary.probe.judge import JudgeSettings, WindowPair, judge

    settings = JudgeSettings(max_resident_slowdown_pct=10, required_confidence=0.95, min_pairs=3)
    rng = _random.Random(6)
    pairs: list[WindowPair] = []
    label = None
    for _ in range(30):
        pairs.append(WindowPair([rng.gauss(10.0, 1.0) for _ in range(20)], [rng.gauss(10.1, 1.0) for _ in range(20)]))
        label = judge(pairs, settings, budget_exhausted=False, max_pairs=30).label
        if label is not None:
            break
    assert label == "safe"
