"""The prior-informed judge: :class:`SlowdownPrior` on :attr:`JudgeSettings.prior`.

A prior shapes the betting tests' bets only: a right prior reaches a verdict in fewer pairs on the
same windows; a confidently wrong one keeps the error bound (its cost is time). Windows are simulated
here as the orchestrator measures them (per-request lognormal latencies, one mean per window, a
resident-alone baseline), seeded, so every count below is deterministic."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from canary.policy import RiskBudget
from canary.probe.judge import (
    JudgeSettings,
    SlowdownPrior,
    WindowPair,
    judge,
    pair_contrasts,
    sequential_paths,
)

ROOT = Path(__file__).resolve().parents[2]
BOUND = 15.0
HORIZON = 120
SETTINGS = JudgeSettings(max_resident_slowdown_pct=BOUND, required_confidence=0.95, min_pairs=3,
                         range_slowdown_pct=60.0)


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mean", "sd", "problem"),
    [
        (math.nan, 2.0, "mean_pct must be finite"),
        (math.inf, 2.0, "mean_pct must be finite"),
        (5.0, math.nan, "sd_pct must be finite"),
        (5.0, -math.inf, "sd_pct must be finite"),
        (5.0, 0.0, "sd_pct must be > 0"),
        (5.0, -1.0, "sd_pct must be > 0"),
        (-100.0, 2.0, "mean_pct must be > -100"),
        ("5", 2.0, "mean_pct must be a number"),
        (True, 2.0, "mean_pct must be a number"),
        (5.0, None, "sd_pct must be a number"),
    ],
)
def test_a_prior_that_is_not_a_distribution_is_refused(mean: object, sd: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        SlowdownPrior(mean, sd)  # type: ignore[arg-type]


def test_a_prior_is_frozen_and_settings_take_only_a_prior() -> None:
    prior = SlowdownPrior(-5, 1)  # ints are numbers; a speed-up is a slowdown below 0
    with pytest.raises(AttributeError):
        prior.mean_pct = 3.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="prior must be a SlowdownPrior or None, not tuple"):
        JudgeSettings(BOUND, 0.95, prior=(10.0, 2.0))  # type: ignore[arg-type]
    budget = RiskBudget(max_probe_time_s=60, max_requests_exposed=100, max_resident_slowdown_pct=10,
                        required_confidence=0.95)
    assert JudgeSettings.from_budget(budget).prior is None
    assert JudgeSettings.from_budget(budget, prior=prior).prior == prior


# -- simulated probes -----------------------------------------------------------------------------


def _windows(truth_pct: float, trials: int, seed: int, rps: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Off- and on-window means (trials × HORIZON) and a baseline per trial: ``rps`` lognormal
    (median 10 ms, σ 0.5) latencies per window, the on-window's times ``1 + truth``."""
    rng = np.random.default_rng(seed)

    def means(shape: tuple[int, ...]) -> np.ndarray:
        return np.asarray(rng.lognormal(math.log(10.0), 0.5, (*shape, rps)).mean(axis=-1))

    off = means((trials, HORIZON))
    on = means((trials, HORIZON)) * (1.0 + truth_pct / 100.0)
    return off, on, means((trials,))


def _first_verdicts(off: np.ndarray, on: np.ndarray, base: np.ndarray, settings: JudgeSettings) -> tuple[np.ndarray, np.ndarray]:
    """Per trial: the first verdict (1 safe, -1 unsafe, 0 none within the horizon) and the pairs it
    took (the horizon when none), as :func:`judge` reaches them looking after every pair."""
    valid = np.ones(off.shape, dtype=bool)
    z = pair_contrasts(off, on, valid, base, settings.bound_ratio)
    paths = sequential_paths(z, settings)
    event = paths.safe | paths.unsafe
    has = event.any(axis=1)
    first = event.argmax(axis=1)
    rows = np.arange(off.shape[0])
    label = np.where(~has, 0, np.where(paths.unsafe[rows, first], -1, 1))
    return label, np.where(has, first + 1, HORIZON)


@pytest.mark.parametrize("truth", [22.0, 30.0])
def test_a_right_prior_reaches_the_verdict_in_fewer_pairs(truth: float) -> None:
    off, on, base = _windows(truth, trials=400, seed=int(truth))
    plain, plain_pairs = _first_verdicts(off, on, base, SETTINGS)
    right, right_pairs = _first_verdicts(off, on, base, replace(SETTINGS, prior=SlowdownPrior(truth, 2.0)))
    # Same windows, same (correct) verdicts, sooner.
    assert (plain == -1).mean() >= 0.95 and (right == -1).mean() >= 0.95
    assert np.median(right_pairs) < np.median(plain_pairs)
    assert right_pairs.mean() <= 0.92 * plain_pairs.mean()
    assert (right_pairs <= plain_pairs).mean() >= 0.8


def test_the_prior_reaches_the_orchestrators_judge() -> None:
    """Through :func:`judge`, pair by pair: the verdict comes at the pair the vectorised core says, the
    right prior's sooner, and the reason names the prior."""
    off, on, base = _windows(30.0, trials=1, seed=7)
    decided_at = {}
    for prior in (None, SlowdownPrior(30.0, 2.0)):
        settings = replace(SETTINGS, prior=prior)
        pairs: list[WindowPair] = []
        for i in range(HORIZON):
            pairs.append(WindowPair([float(off[0, i])] * 3, [float(on[0, i])] * 3))
            j = judge(pairs, settings, budget_exhausted=False, baseline_ms=[float(base[0])] * 3)
            if j.decided:
                break
        assert j.label == "unsafe" and j.rule == "judge"
        assert ("prior slowdown 30% ± 2%" in j.reason) == (prior is not None)
        _, core = _first_verdicts(off, on, base, settings)
        assert j.window_pairs == int(core[0])
        decided_at[prior] = j.window_pairs
    assert decided_at[SlowdownPrior(30.0, 2.0)] < decided_at[None]


def _rate_within_level(errors: np.ndarray, alpha: float) -> tuple[float, float]:
    rate = float(errors.mean())
    se = max(math.sqrt(rate * (1 - rate) / errors.size), math.sqrt(alpha * (1 - alpha) / errors.size))
    return rate, alpha + 2 * se


@pytest.mark.parametrize(
    ("truth", "prior", "error"),
    [
        (BOUND, SlowdownPrior(0.0, 0.5), 1),  # truth at the bound, a confident "no slowdown": false admits
        (BOUND, SlowdownPrior(-20.0, 0.5), 1),  # a confident speed-up
        (BOUND, SlowdownPrior(2 * BOUND, 0.5), -1),  # at the bound the unsafe test's null holds too
        (0.0, SlowdownPrior(2 * BOUND, 0.5), -1),  # truth 0, a confident "twice the bound": false rejects
    ],
)
def test_a_confidently_wrong_prior_keeps_the_level(truth: float, prior: SlowdownPrior, error: int) -> None:
    """The burst rule is out of the way (it would hold every safe verdict to 59 pairs): the betting
    test alone carries the claim, so this measures exactly what the prior can move."""
    settings = replace(SETTINGS, burst_rate_guarded=0.5, prior=prior)
    off, on, base = _windows(truth, trials=1500, seed=11 + int(truth), rps=20)
    label, _ = _first_verdicts(off, on, base, settings)
    rate, limit = _rate_within_level(label == error, settings.alpha)
    assert rate <= limit, f"{rate:.4f} > {limit:.4f} with prior {prior} at truth {truth}%"


def test_a_wrong_prior_costs_time_and_no_more_than_half_the_capital() -> None:
    """K = ½ K^data + ½ K^prior ≥ ½ K^data: the log-capital with any prior is at least the one without,
    less log 2; and here, truth 30% under a prior of 0%, the verdict is still *unsafe*, later."""
    off, on, base = _windows(30.0, trials=200, seed=3)
    valid = np.ones(off.shape, dtype=bool)
    z = pair_contrasts(off, on, valid, base, SETTINGS.bound_ratio)
    plain = sequential_paths(z, SETTINGS)
    wrong_settings = replace(SETTINGS, prior=SlowdownPrior(0.0, 0.5))
    wrong = sequential_paths(z, wrong_settings)
    for a, b in ((wrong.log_capital_safe, plain.log_capital_safe), (wrong.log_capital_unsafe, plain.log_capital_unsafe)):
        assert np.all(a >= b - math.log(2) - 1e-9)
    plain_label, plain_pairs = _first_verdicts(off, on, base, SETTINGS)
    wrong_label, wrong_pairs = _first_verdicts(off, on, base, wrong_settings)
    assert (wrong_label == -1).all() and (plain_label == -1).all()
    assert wrong_pairs.mean() > plain_pairs.mean()


def test_no_prior_is_the_judge_as_it_was() -> None:
    off, on, base = _windows(13.0, trials=50, seed=5)
    z = pair_contrasts(off, on, np.ones(off.shape, dtype=bool), base, SETTINGS.bound_ratio)
    a = sequential_paths(z, SETTINGS)
    b = sequential_paths(z, replace(SETTINGS, prior=None), ratio=2.0)  # the ratio only places a prior
    for name in ("safe", "unsafe", "log_capital_safe", "log_capital_unsafe", "autocorrelation_time"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


# -- the benchmark ----------------------------------------------------------------------------------


def test_the_prior_benchmark_runs_every_prior(tmp_path: Path) -> None:
    out = tmp_path / "prior.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "judge_prior.py"), "--trials", "20", "--horizon", "80",
         "--families", "clear-unsafe,held-out: bound+1", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "false-admit checks:" in proc.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    names = [r["family"]["name"] for r in doc["results"]]
    assert names == ["clear-unsafe 30% (2x bound)", "held-out: bound+1 (16%)"]
    for r in doc["results"]:
        assert list(r["priors"]) == ["none", "right", "0%±0.5", "30%±0.5"]
        for m in r["priors"].values():
            assert m["false_admit"] is not None and 0.0 <= m["false_admit"] <= 1.0
            assert 1.0 <= m["mean_pairs"] <= 80.0
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "judge_prior.py"), "--families", "no such family"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert bad.returncode == 2 and "matches no family" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("prior", [SlowdownPrior(BOUND, 1e-300), SlowdownPrior(1e300, 5.0), SlowdownPrior(-99.9, 1e300)])
def test_an_extreme_prior_is_still_a_number(prior: SlowdownPrior) -> None:
    """A prior sharper, further out or vaguer than floats hold gives finite capital, not NaN."""
    off, on, base = _windows(30.0, trials=20, seed=9)
    z = pair_contrasts(off, on, np.ones(off.shape, dtype=bool), base, SETTINGS.bound_ratio)
    paths = sequential_paths(z, replace(SETTINGS, prior=prior))
    assert np.isfinite(paths.log_capital_safe).all() and np.isfinite(paths.log_capital_unsafe).all()
    assert paths.unsafe.any(axis=1).all()
