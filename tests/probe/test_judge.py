"""The sequential judge: each pipeline step alone, then the whole judgment, then its error guarantee."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from canary.policy import RiskBudget
from canary.probe.judge import (
    JudgeSettings,
    WindowPair,
    autocorrelation_time,
    judge,
    pair_contrasts,
    pair_schedule,
    predictable_range,
    preprocess_window,
    sequential_paths,
)

SETTINGS = JudgeSettings(max_resident_slowdown_pct=10.0, required_confidence=0.95, min_pairs=2, burst_rate_guarded=0.2)
# 0.95 confidence, bursts in 20% of windows: ceil(log 0.05 / log 0.8) = 14 usable pairs before a safe verdict
# (short sequences keep these tests readable; the default guards rarer bursts, see the next test).
assert SETTINGS.min_safe_pairs == 14


def test_by_default_a_safe_verdict_must_have_seen_bursts_in_5_percent_of_windows() -> None:
    """The default guards bursts down to 5% of windows, the rarest the issue's stress families use:
    ceil(log 0.05 / log 0.95) = 59 effective pairs at 0.95, ceil(log 0.02 / log 0.95) = 77 at 0.98."""
    assert JudgeSettings(max_resident_slowdown_pct=15.0, required_confidence=0.95).min_safe_pairs == 59
    assert JudgeSettings(max_resident_slowdown_pct=5.0, required_confidence=0.98).min_safe_pairs == 77
    from canary.policy import load_policy

    for name in ("default", "online-inference", "batch", "training"):
        for klass, budget in load_policy(name).risk_budgets.items():
            settings = JudgeSettings.from_budget(budget)
            assert settings.burst_rate_guarded == 0.05
            # the shipped budgets hold the pairs a safe verdict needs, even if every window lasts 1.25x
            worst_case_pairs = (budget.max_probe_time_s - budget.baseline_window_s) / (2 * 1.25 * budget.sampling_window_s)
            assert worst_case_pairs >= settings.min_safe_pairs, (name, klass, worst_case_pairs)


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



# --- contrasts and the schedule ------------------------------------------------------------------


def test_contrast_uses_the_scale_known_before_the_pair() -> None:
    off = np.array([[10.0, 12.0, 11.0]])
    on = np.array([[11.0, 13.2, 20.0]])
    valid = np.array([[True, True, True]])
    z = pair_contrasts(off, on, valid, np.array([8.0]), 1.1)
    # scale: baseline 8; then mean(8, 10) = 9; then mean(8, 10, 12) = 10
    expected = [(11.0 - 11.0) / (1.1 * 8.0), (13.2 - 13.2) / (1.1 * 9.0), (20.0 - 12.1) / (1.1 * 10.0)]
    assert z[0] == pytest.approx(expected)


def test_judgment_carries_the_spread_of_its_contrasts_at_the_bound() -> None:
    """``contrast_sd`` is the sample sd of the tested contrasts at the bound (the certificate's
    ``probe.contrast_sd``), computed here by hand from the same windows; one tested pair has none."""
    settings = replace(SETTINGS, max_resident_slowdown_pct=10.0)
    offs, ons = [10.0, 12.0, 11.0, 10.0], [11.0, 13.2, 20.0, 9.0]
    pairs = [WindowPair([o] * 5, [n] * 5) for o, n in zip(offs, ons, strict=True)]
    j = judge(pairs, settings, budget_exhausted=True, baseline_ms=[8.0] * 5)
    scales = [8.0, 9.0, 10.0, 10.25]  # baseline, then the mean of it and the off-windows before: 41 / 4
    z = [(n - 1.1 * o) / (1.1 * s) for o, n, s in zip(offs, ons, scales, strict=True)]
    mean = sum(z) / 4
    assert j.contrast_sd == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in z) / 3))
    one = judge(pairs[:1], settings, budget_exhausted=True, baseline_ms=[8.0] * 5)
    assert one.contrast_sd is None


def test_without_a_baseline_the_first_usable_pair_only_sets_the_scale() -> None:
    off = np.array([[10.0, 10.0, 10.0]])
    on = np.array([[11.0, 11.0, 11.0]])
    valid = np.array([[False, True, True]])
    z = pair_contrasts(off, on, valid, np.array([np.nan]), 1.0)
    assert math.isnan(z[0, 0]) and math.isnan(z[0, 1])  # unusable; then scale-only
    assert z[0, 2] == pytest.approx(0.1)


def test_schedule_blocks_cancel_drift_and_orders_are_random_across_blocks() -> None:
    firsts = []
    for seed in range(200):
        orders = [pair_schedule(seed, i, 1.0)[0] for i in range(6)]
        for block in range(3):
            a, b = orders[2 * block], orders[2 * block + 1]
            assert {a, b} == {"off-on", "on-off"}  # inside a block: ABBA or BAAB
        firsts.append(orders[0])
        lengths = [pair_schedule(seed, i, 2.0)[1] for i in range(6)]
        assert all(1.5 <= x <= 2.5 for x in lengths)
        assert pair_schedule(seed, 3, 2.0) == pair_schedule(seed, 3, 2.0)  # seeded: reproducible
    share = firsts.count("off-on") / len(firsts)
    assert 0.35 < share < 0.65  # a fair coin, not a fixed ABBA


# --- the sequential tests ----------------------------------------------------------------------


def _paths(z: np.ndarray, settings: JudgeSettings = SETTINGS):  # type: ignore[no-untyped-def]
    return sequential_paths(z, settings)


def test_a_clear_safe_sequence_is_safe_only_from_min_safe_pairs_on() -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(-0.09, 0.02, (1, 40))  # about 0% slowdown against a 10% bound
    paths = _paths(z)
    first = int(np.argmax(paths.safe[0]))
    assert paths.safe[0].any() and SETTINGS.min_safe_pairs <= first + 1 <= SETTINGS.min_safe_pairs + 4
    assert not paths.unsafe[0].any()


def test_a_clear_unsafe_sequence_is_unsafe_early() -> None:
    rng = np.random.default_rng(2)
    z = rng.normal(0.15, 0.02, (1, 40))
    paths = _paths(z)
    assert paths.unsafe[0].any() and int(np.argmax(paths.unsafe[0])) < 12
    assert not paths.safe[0].any()


def test_one_out_of_range_pair_ends_every_safe_verdict_after_it() -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(-0.09, 0.02, (2, 40))
    z[1, 5] = SETTINGS.range_z * 1.5  # one window far slower than the range: a burst
    paths = _paths(z)
    assert paths.safe[0].any()
    assert not paths.safe[1].any()
    assert paths.out_of_range[1, 5] and paths.out_of_range[1].sum() == 1


def test_the_safe_range_widens_only_with_the_residents_own_off_window_spread() -> None:
    """U_i = max(U, κ·√2·cv of the off-windows before pair i): U until five off-windows, wider for a
    resident whose windows wander, never narrower, and blind to the on-windows (the candidate's)."""
    rng = np.random.default_rng(11)
    n = 30
    quiet = np.full((1, n), 10.0) * (1 + rng.normal(0, 0.01, (1, n)))
    noisy = np.full((1, n), 10.0) * (1 + rng.normal(0, 0.15, (1, n)))
    valid = np.ones((1, n), dtype=bool)
    u = SETTINGS.range_z
    q = predictable_range(quiet, valid, SETTINGS)[0]
    w = predictable_range(noisy, valid, SETTINGS)[0]
    assert np.all(q == pytest.approx(u)) and np.all(w[:5] == pytest.approx(u))
    assert np.all(w >= u) and float(w[-1]) > 1.5 * u  # ~4·√2·0.15 = 0.85 against U 0.27
    # predictable: pair i's range is the same whatever pair i's own off-window (or any later one) was
    bumped = noisy.copy()
    bumped[0, 20:] *= 3.0
    assert np.array_equal(predictable_range(bumped, valid, SETTINGS)[0, :21], w[:21])
    # unusable pairs do not count
    holes = valid.copy()
    holes[0, :10] = False
    assert np.all(predictable_range(noisy, holes, SETTINGS)[0, :15] == pytest.approx(u))


def test_a_noisy_residents_chance_excursion_no_longer_ends_the_safe_side() -> None:
    """A resident whose windows wander by ±12% with no slowdown at all: one on-window past 4 × the bound
    by chance closed the safe side for good; inside the resident's own spread it is counted instead."""
    rng = np.random.default_rng(12)
    n = 60
    off = 10.0 * (1 + rng.normal(0, 0.12, (1, n)))
    on = 10.0 * (1 + rng.normal(0, 0.12, (1, n)))
    # 45% of the scale slower than the bound allows: beyond U (0.27), well inside 4 spreads (≈ 0.65)
    on[0, 20] = SETTINGS.bound_ratio * (off[0, 20] + 4.5)
    valid = np.ones((1, n), dtype=bool)
    z = pair_contrasts(off, on, valid, np.array([10.0]), SETTINGS.bound_ratio)
    fixed = sequential_paths(z, SETTINGS)
    wide = sequential_paths(z, SETTINGS, safe_range=predictable_range(off, valid, SETTINGS))
    assert fixed.out_of_range[0, 20] and not fixed.safe[0, 20:].any()
    assert not wide.out_of_range[0].any() and wide.safe[0].any()
    # a burst beyond the wider range still ends it
    on[0, 40] = 10.0 * 4.0
    z = pair_contrasts(off, on, valid, np.array([10.0]), SETTINGS.bound_ratio)
    burst = sequential_paths(z, SETTINGS, safe_range=predictable_range(off, valid, SETTINGS))
    assert burst.out_of_range[0, 40] and not burst.safe[0, 40:].any()


def test_the_wider_range_keeps_the_false_safe_rate_at_alpha_for_noisy_residents_on_the_bound() -> None:
    """Window means of a noisy resident (log-normal requests, few per window, cv of a window ≈ 20%) with
    the on-windows exactly at the bound: with the range from the off-windows' spread the safe test errs in
    at most α of the runs, looked at after every pair (burst rule out of the way)."""
    rng = np.random.default_rng(13)
    rows, n, per = 3000, 80, 8
    settings = JudgeSettings(10.0, 0.95, min_pairs=2, burst_rate_guarded=0.9)

    def windows() -> np.ndarray:
        return np.asarray(rng.lognormal(0.0, 0.6, (rows, n, per)).mean(axis=2) / math.exp(0.18))

    off = windows()
    on = settings.bound_ratio * windows()
    valid = np.ones((rows, n), dtype=bool)
    z = pair_contrasts(off, on, valid, np.full(rows, 1.0), settings.bound_ratio)
    wide = predictable_range(off, valid, settings)
    assert float(np.median(wide[:, -1])) > 2 * settings.range_z
    rate = float(sequential_paths(z, settings, safe_range=wide).safe.any(axis=1).mean())
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / rows)


def test_persistent_interference_withholds_the_safe_verdict() -> None:
    # A slow drift of the interference: every pair close to the one before.
    rng = np.random.default_rng(4)
    n = 60
    level = np.cumsum(rng.normal(0, 0.02, n)) - 0.05
    z = (level + rng.normal(0, 0.005, n))[None, :]
    paths = _paths(z)
    late = slice(SETTINGS.min_safe_pairs, n)
    assert paths.dependence_blocked[0, late].any()
    assert float(paths.lag1[0, -1]) > 0.5


def _null_rows(rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Contrasts whose every conditional mean is exactly 0 (the truth on the bound), in shapes the
    Gaussian judge could not handle: skewed two-point bursts and uniform noise."""
    u = SETTINGS.range_z
    burst = np.where(rng.random((rows // 2, n)) < 0.2, u * 0.8, -u * 0.2)  # mean 0.16u - 0.16u = 0
    flat = rng.uniform(-u / 2, u / 2, (rows - rows // 2, n))
    return np.concatenate([burst, flat])


def test_false_safe_rate_under_the_null_is_at_most_alpha_at_any_stopping_time() -> None:
    """Ville: looked at after every pair, the safe test errs in at most alpha of the runs."""
    rng = np.random.default_rng(7)
    rows = 4000
    z = _null_rows(rows, 80, rng)
    settings = JudgeSettings(10.0, 0.95, min_pairs=2, burst_rate_guarded=0.9)  # burst rule out of the way
    paths = sequential_paths(z, settings)
    rate = float(paths.safe.any(axis=1).mean())
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / rows)


def test_ar1_interference_at_the_bound_keeps_false_admits_near_alpha() -> None:
    """Interference correlated across pairs (phi 0.8), mean exactly on the bound, with the judge as the
    benchmark configures it (bursts down to 5% of windows guarded: 59 pairs before a safe verdict): the
    dependence rule keeps safe verdicts near alpha (the full families are in benchmarks/judge.py)."""
    rng = np.random.default_rng(8)
    rows, n, phi = 1500, 120, 0.8
    settings = JudgeSettings(10.0, 0.95, min_pairs=3, burst_rate_guarded=0.05)
    eps = np.empty((rows, n))
    eps[:, 0] = rng.normal(0, 0.08, rows)
    for i in range(1, n):
        eps[:, i] = phi * eps[:, i - 1] + rng.normal(0, 0.08 * math.sqrt(1 - phi * phi), rows)
    z = eps + rng.normal(0, 0.06, (rows, n))
    rate = float(sequential_paths(z, settings).safe.any(axis=1).mean())
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / rows)


def _ar1(rng: np.random.Generator, rows: int, n: int, phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) paths with marginal standard deviation ``sd``."""
    eps = np.empty((rows, n))
    eps[:, 0] = rng.normal(0, sd, rows)
    innovations = rng.normal(0, sd * math.sqrt(1 - phi * phi), (rows, n))
    for i in range(1, n):
        eps[:, i] = phi * eps[:, i - 1] + innovations[:, i]
    return eps


@pytest.mark.parametrize(
    ("phi", "expected"),
    [
        pytest.param(0.0, 1.0, id="independent"),
        # AR(1): rho_k = phi^k, so tau = 1 + 2 phi / (1 - phi) = (1 + phi) / (1 - phi).
        pytest.param(0.5, 3.0, id="ar1-0.5"),
        pytest.param(0.8, 9.0, id="ar1-0.8"),
    ],
)
def test_autocorrelation_time_matches_the_ar1_formula_on_long_series(phi: float, expected: float) -> None:
    rng = np.random.default_rng(11)
    y = _ar1(rng, 40, 1500, phi, 1.0)
    tau = autocorrelation_time(y)[:, -1]
    assert abs(float(np.median(tau)) - expected) <= 0.2 * expected
    # Every prefix has an estimate, never below 1.
    assert autocorrelation_time(y[:3, :50]).shape == (3, 50) and float(autocorrelation_time(y[:3, :50]).min()) >= 1.0


def test_autocorrelation_time_is_that_of_each_prefix() -> None:
    rng = np.random.default_rng(12)
    y = _ar1(rng, 2, 90, 0.7, 1.0)
    whole = autocorrelation_time(y)
    for n in (10, 45, 90):
        assert np.allclose(autocorrelation_time(y[:, :n])[:, -1], whole[:, n - 1])


def test_ar1_phi_095_at_the_bound_is_held_to_alpha_by_the_effective_sample_rule() -> None:
    """The benchmark's hardest family in contrast form: a level that wanders with phi 0.95 (sd close
    to the per-pair noise), true mean exactly on the bound. A safe verdict needs n / tau >= 59
    effective pairs; without the autocorrelation-time rule 8.2% of these probes admitted (limit here 6%)."""
    rng = np.random.default_rng(13)
    rows, n = 2000, 120
    settings = JudgeSettings(15.0, 0.95, min_pairs=3, range_slowdown_pct=60.0, burst_rate_guarded=0.05)
    z = _ar1(rng, rows, n, 0.95, 0.087) + rng.normal(0, 0.093, (rows, n))
    paths = sequential_paths(z, settings)
    rate = float(paths.safe.any(axis=1).mean())
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / rows)
    # The rule only ever withholds safe: the unsafe side is the betting test alone.
    crossed = np.maximum.accumulate(paths.log_capital_unsafe, axis=1) >= math.log(20)
    assert np.array_equal(paths.unsafe, crossed & (np.arange(n)[None, :] + 1 >= settings.min_pairs))


# --- the whole judgment ------------------------------------------------------------------------


def _window(rng: random.Random, mean_ms: float, n: int = 40, cv: float = 0.3) -> list[float]:
    sigma = math.sqrt(math.log1p(cv * cv))
    mu = math.log(mean_ms) - sigma * sigma / 2
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def _run(true_slowdown_pct: float, seed: int, max_pairs: int = 40) -> tuple[str | None, int]:
    rng = random.Random(seed)
    base = _window(rng, 10.0, n=80)
    pairs: list[WindowPair] = []
    for i in range(max_pairs):
        pairs.append(WindowPair(_window(rng, 10.0), _window(rng, 10.0 * (1 + true_slowdown_pct / 100))))
        j = judge(pairs, SETTINGS, budget_exhausted=i == max_pairs - 1, baseline_ms=base)
        if j.label is not None:
            return j.label, i + 1
    raise AssertionError("the final judgment must carry a label")


def test_clearly_safe_and_clearly_unsafe_decide() -> None:
    label, n = _run(0.0, seed=1)
    assert label == "safe" and SETTINGS.min_safe_pairs <= n <= SETTINGS.min_safe_pairs + 6
    label, n = _run(40.0, seed=2)
    assert label == "unsafe" and n < 12


def test_judge_counts_a_wandering_residents_excursion_inside_its_own_spread() -> None:
    """Through :func:`judge`: a resident whose windows wander by ±12% with no slowdown, one on-window 45%
    of the scale past what the bound allows (past the fixed range, inside 4 of the resident's spreads):
    the verdict is *safe* and no pair is out of range; without the spread (``range_spreads=0``) the
    probe ends inconclusive."""
    rng = random.Random(21)
    pairs = []
    for i in range(70):
        off = 10.0 * (1 + rng.gauss(0, 0.12))
        on = 10.0 * (1 + rng.gauss(0, 0.12)) if i != 30 else SETTINGS.bound_ratio * (off + 4.5)
        pairs.append(WindowPair([off] * 10, [on] * 10))
    wide = judge(pairs, SETTINGS, budget_exhausted=True, baseline_ms=[10.0] * 20)
    fixed = judge(pairs, replace(SETTINGS, range_spreads=0.0), budget_exhausted=True, baseline_ms=[10.0] * 20)
    assert wide.label == "safe" and wide.out_of_range_pairs == 0
    # the fixed range sees chance excursions of the resident itself, not only the planted one
    assert fixed.label == "inconclusive" and fixed.out_of_range_pairs >= 1
    assert "beyond the range of 0.273" in fixed.reason


def test_the_estimand_is_the_ratio_of_mean_latencies() -> None:
    """One pair in ten slowed 150%, the rest not at all: the mean latency is 15% higher with the
    candidate, above a 10% bound, although the mean per-pair log-ratio (0.1 × log 2.5 = 0.092) lies
    below log 1.1 = 0.095. The judge must report about 15% and never call it safe."""
    pairs = []
    for i in range(40):
        factor = 2.5 if i % 10 == 3 else 1.0
        pairs.append(WindowPair([10.0] * 20, [10.0 * factor] * 20))
    j = judge(pairs, SETTINGS, budget_exhausted=True, baseline_ms=[10.0] * 40)
    assert j.estimate_pct == pytest.approx(15.0)
    assert j.label != "safe"
    assert j.out_of_range_pairs == 4


def test_judgment_fields_and_reason_name_the_bound() -> None:
    rng = random.Random(5)
    base = _window(rng, 10.0, n=80)
    pairs = [WindowPair(_window(rng, 10.0), _window(rng, 10.0)) for _ in range(20)]
    j = judge(pairs, SETTINGS, budget_exhausted=False, baseline_ms=base)
    assert j.label == "safe" and j.rule == "judge"
    assert j.interval_pct is not None and j.estimate_pct is not None
    on = sum(sum(p.on_ms) / len(p.on_ms) for p in pairs)  # type: ignore[arg-type,misc]
    off = sum(sum(p.off_ms) / len(p.off_ms) for p in pairs)  # type: ignore[arg-type,misc]
    assert j.estimate_pct == pytest.approx(100 * (on / off - 1))
    assert j.interval_pct[0] < j.estimate_pct < j.interval_pct[1] < 10.0
    assert j.window_pairs == 20 and j.raw_samples == 20 * 80
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


@pytest.mark.parametrize(
    ("on_ms", "stalled", "label", "no_data", "stalled_pairs"),
    [
        pytest.param([], True, "unsafe", 0, 1, id="monitor-says-stalled"),
        pytest.param([], False, "no-data", 1, 0, id="empty-without-stall-is-no-data"),
        pytest.param([10.0, 11.0], False, "no-data", 1, 0, id="sparse-is-no-data"),
        pytest.param([10.0, 11.0], True, "unsafe", 0, 1, id="sparse-and-stalled"),
    ],
)
def test_no_data_is_not_unsafe_unless_the_resident_is_stalled(
    on_ms: list[float], stalled: bool, label: str, no_data: int, stalled_pairs: int
) -> None:
    rng = random.Random(1)
    j = judge([WindowPair(_window(rng, 10.0), on_ms, on_stalled=stalled)], SETTINGS, budget_exhausted=True)
    assert j.label == label
    assert (j.no_data_pairs, j.stalled_pairs) == (no_data, stalled_pairs)
    if stalled:
        assert j.rule == "stall" and "stalled" in j.reason


def test_settings_from_budget() -> None:
    budget = RiskBudget(
        max_probe_time_s=60,
        max_requests_exposed=100,
        max_resident_slowdown_pct=7,
        required_confidence=0.9,
        min_windows=4,
        window_statistic="median",
        outlier_factor=5.0,
        judge_burst_rate=0.05,
        judge_range_pct=40.0,
    )
    s = JudgeSettings.from_budget(budget)
    assert (s.max_resident_slowdown_pct, s.required_confidence, s.min_pairs) == (7, 0.9, 4)
    assert (s.window_statistic, s.outlier_factor, s.burst_rate_guarded) == ("median", 5.0, 0.05)
    assert s.min_safe_pairs == math.ceil(math.log(0.1) / math.log(0.95)) == 45
    assert s.range_z == pytest.approx(1.40 / 1.07 - 1)
    assert s.alpha == pytest.approx(0.1)
    default = JudgeSettings.from_budget(budget.model_copy(update={"judge_range_pct": None}))
    assert default.range_z == pytest.approx(1.28 / 1.07 - 1)  # 4 × the bound


def test_futility_stops_a_borderline_probe_early_as_inconclusive_never_safe() -> None:
    """A pair whose slowdown sits on the bound cannot be settled within the budget: stop, inconclusive."""
    rng = random.Random(5)
    base = [rng.gauss(10.0, 1.0) for _ in range(40)]
    pairs: list[WindowPair] = []
    stopped_at = None
    for i in range(30):
        off = [rng.gauss(10.0, 1.0) for _ in range(20)]
        on = [rng.gauss(11.0, 1.1) for _ in range(20)]  # 10% slower: exactly on the bound
        pairs.append(WindowPair(off, on))
        j = judge(pairs, SETTINGS, budget_exhausted=False, max_pairs=30, baseline_ms=base)
        if j.label is not None:
            stopped_at = i + 1
            assert j.label == "inconclusive" and j.rule == "futility"
            assert "stopped early" in j.reason
            break
    assert stopped_at is not None and stopped_at < 30


def test_futility_never_cuts_a_clear_answer_short() -> None:
    rng = random.Random(6)
    base = [rng.gauss(10.0, 1.0) for _ in range(40)]
    pairs: list[WindowPair] = []
    label = None
    for _ in range(30):
        pairs.append(WindowPair([rng.gauss(10.0, 1.0) for _ in range(20)], [rng.gauss(10.1, 1.0) for _ in range(20)]))
        label = judge(pairs, SETTINGS, budget_exhausted=False, max_pairs=30, baseline_ms=base).label
        if label is not None:
            break
    assert label == "safe"


@pytest.mark.parametrize("seed", [14, 29, 66])
def test_the_interval_agrees_with_an_unsafe_verdict(seed: int) -> None:
    """Four noisy pairs of a resident 3–8 × slower with the candidate: the test at the bound rejects
    'within 10%'. Rejecting "the ratio is at most 1.1" rejects "at most r" for every r below 1.1, so the
    interval shown beside the verdict starts above 10% — it read [-100%, ∞] (the per-ratio tests of the
    display are not monotone by themselves)."""
    from canary.policy import load_policy

    settings = JudgeSettings.from_budget(load_policy("default").budget_for("online-inference"))
    rng = random.Random(seed)

    def w(mean_ms: float, n: int = 12, sd: float = 0.3) -> list[float]:
        return [max(0.1, rng.gauss(mean_ms, mean_ms * sd)) for _ in range(n)]

    k = rng.choice([4, 5, 6, 8])
    factor = rng.choice([1.5, 2, 3, 5, 8])
    pairs = [WindowPair(w(20, sd=rng.choice([0.1, 0.5])), w(20 * factor, sd=rng.choice([0.2, 0.8])))
             for _ in range(k)]
    j = judge(pairs, settings, budget_exhausted=False, baseline_ms=w(20, 60))
    assert j.label == "unsafe" and j.rule == "judge"
    assert j.interval_pct is not None and j.interval_pct[0] > 10.0, j.interval_pct
    assert j.estimate_pct is not None and j.interval_pct[0] <= j.estimate_pct
    assert f"95% interval [{j.interval_pct[0]:.2f}%" in j.reason
