"""The sequential judge against fixed-horizon and uncorrected tests, on stress families of window data.

    python benchmarks/judge.py [--trials 1000] [--seed 0] [--workers 1] [--json PATH] [--plot PNG]
                               [--families a,b] [--horizon 120]

Every trial is one probe, generated window by window the way the orchestrator measures it: a 2 s
baseline window of the resident alone, then up to ``HORIZON`` pairs of canary-off / canary-on windows
in the orchestrator's own schedule (:func:`canary.probe.judge.pair_schedule`: blocks of two pairs in
a random order, window lengths 0.75–1.25 s). In each window the resident serves Poisson requests
(50/s; 4.5/s in the *few requests* families) whose latencies are drawn per request from the family's
distribution, times a time-varying resident factor (drift, step, period), times ``1 + s`` in an
on-window, where ``s`` is the on-window's slowdown (constant, AR(1) across pairs, or bursts). The
candidate's requests (exposure) are Poisson, 10/s of on-window. The truth of each family — the ratio
of the resident's mean latency with the candidate to without, minus one — is ``s``'s long-run mean
by construction, and the family says it.

Methods, all fed the same windows and the same per-pair contrast
``z = (on − (1+b)·off) / ((1+b)·scale)`` (``scale``: mean of the earlier off-windows):

- **sequential**: :func:`canary.probe.judge.sequential_paths` exactly as :func:`~canary.probe.judge.judge`
  runs it after every pair (betting tests, range, burst and dependence rules, futility); stops at the
  first verdict; *inconclusive* when the horizon ends first;
- **sequential+old guard (unattributed)**: what the probe did before issue 20 — the per-window slowdown
  guard (an on-window of ≥ 10 requests > 45% slower than the slowest off-window of the earlier pairs
  and the baseline → unsafe at once, before the judge sees that pair), no SLO rule, no attribution;
- **sequential+guard+slo**: the judge, the guard and the SLO rule as the orchestrator drives them now
  (``_Run.breach`` / ``tally`` / ``settle``): an on-window whose resident p99 is over the SLO, or (else)
  the guard's, ends the candidate's load; when its pair is complete every pair so far has been tallied
  per rule against thresholds fixed before it, and :func:`canary.probe.attribution.attribute` tests
  whether the pairs where only the window with the candidate was over outweigh those where only the
  resident's own was (a test martingale over the whole probe, level α); attributed → *unsafe* (rule
  slo / guard; an SLO breach with the slowdown estimate within the bound is *no headroom*: the
  resident's state, inconclusive), else the probe resumes; a breach once some rule has seen more than
  MAX_EXCESS pairs over only with the candidate than only without ends it with the judge's
  last word (a *safe* turned
  inconclusive). A baseline over the SLO is *not now* (the candidate never runs; counted
  inconclusive). The SLO is per family: the 90th percentile of the resident-alone window p99
  (:func:`resident_slo`, from independent draws) — a resident near its SLO, which it breaches alone in
  about one window in ten. Each window's p99 is the nearest-rank p99 of the same per-request draws as
  its mean;
- **fixed-horizon**: a one-sided t-test of ``mean z < 0`` (safe) / ``> 0`` (unsafe) at level α on all
  usable pairs of the full horizon; *inconclusive* when neither;
- **every-pair, uncorrected**: the same t-test after every pair (from ``min_pairs``), stopping at the
  first verdict — what repeated looks without correction do;
- **Kayenta MW**: Kayenta's MannWhitneyClassifier as configured by default (two-sided, confidence
  0.98, tolerance 0.25) plus an allowed increase of 1 + bound on the ratio of means, on the per-window
  means at the full horizon; *admit* unless *High*. It tests "differs from baseline", not "within the
  bound", and has no inconclusive outcome: it is reported, not used as the exposure yardstick.

Per family and method: false-admit rate (a *safe* verdict when the truth is at or beyond the bound)
with its standard error, false-reject rate (an *unsafe* verdict when the truth is below the bound),
inconclusive rate, and median exposure (candidate requests) **per decided trial**. Targets (issue 11):
false admits ≤ α + 2 SE in every family; median exposure per decided trial ≥ 30% below the
fixed-horizon test on the clear and moderate families; inconclusive ≤ 5% and false rejects ≤ 5% on the
clear cases. Issue 20, for ``sequential+guard+slo``: false admits ≤ α + 2 SE in every family, false rejects
≤ 5% where the truth is at most half the bound; the table beside it splits false rejects by rule
(judge / guard / slo) and gives not-now and pauses.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from canary.probe.attribution import BET, MAX_EXCESS, ExceedanceTally, attribute, excess  # noqa: E402
from canary.probe.judge import (  # noqa: E402
    JudgeSettings,
    pair_contrasts,
    pair_schedule,
    predictable_range,
    sequential_paths,
)
from canary.quantiles import quantile  # noqa: E402

BOUND_PCT = 15.0
CONFIDENCE = 0.95
MIN_PAIRS = 3
GUARD_PCT = 45.0
RANGE_PCT = GUARD_PCT + BOUND_PCT
GUARD_MIN_SAMPLES = 10
BURST_RATE_GUARDED = 0.05
HORIZON = 120
WINDOW_S = 1.0
BASELINE_S = 2.0
RESIDENT_RPS = 50.0
FEW_RPS = 4.5
CANDIDATE_RPS = 10.0
MIN_SAMPLES = 3
KAYENTA_CONFIDENCE = 0.98
KAYENTA_TOLERANCE = 0.25
#: The family's SLO: this quantile of the resident-alone window p99 (:func:`resident_slo`).
SLO_QUANTILE = 0.90

SETTINGS = JudgeSettings(
    max_resident_slowdown_pct=BOUND_PCT,
    required_confidence=CONFIDENCE,
    min_pairs=MIN_PAIRS,
    min_samples_per_window=MIN_SAMPLES,
    range_slowdown_pct=RANGE_PCT,
    burst_rate_guarded=BURST_RATE_GUARDED,
)


@dataclass(frozen=True)
class Family:
    """One stress family. ``truth_pct`` is the long-run ratio of mean latencies − 1, by construction."""

    name: str
    group: str  # clear | moderate | stress
    truth_pct: float
    latency: str = "lognormal"  # lognormal (σ 0.5) | lognormal-heavy (σ 1.0) | pareto (α 2.5)
    rps: float = RESIDENT_RPS
    drift_per_s: float = 0.0
    step_at_fraction: bool = False
    period_s: float | None = None
    ar_phi: float | None = None
    ar_sd: float = 0.0
    burst_rate: float | None = None


def families() -> list[Family]:
    b = BOUND_PCT
    out = [
        Family("clear-safe 0%", "clear", 0.0),
        Family(f"clear-safe {b / 2:g}% (bound/2)", "clear", b / 2),
        Family(f"clear-unsafe {2 * b:g}% (2x bound)", "clear", 2 * b),
        Family(f"moderate {b - 2:g}% (bound-2)", "moderate", b - 2),
        Family(f"at bound {b:g}%", "moderate", b),
        Family(f"moderate {b + 2:g}% (bound+2)", "moderate", b + 2),
        Family("heavy tail lognormal s1.0, at bound", "stress", b, latency="lognormal-heavy"),
        Family("heavy tail Pareto a2.5, at bound", "stress", b, latency="pareto"),
        Family("heavy tail Pareto a2.5, 0%", "stress", 0.0, latency="pareto"),
        Family("drift -0.25%/s, at bound", "stress", b, drift_per_s=-0.0025),
        Family("drift +0.5%/s, at bound", "stress", b, drift_per_s=0.005),
        Family("step +30% mid-probe, at bound", "stress", b, step_at_fraction=True),
        Family("few requests 4.5/s, at bound", "stress", b, rps=FEW_RPS),
        Family("few requests 4.5/s, 0%", "stress", 0.0, rps=FEW_RPS),
    ]
    for phi in (0.5, 0.8, 0.95):
        for sd in (0.1, 0.2):
            out.append(Family(f"AR(1) phi {phi:g} sd {sd:g}, at bound", "stress", b, ar_phi=phi, ar_sd=sd))
    for rate in (0.05, 0.10, 0.20):
        out.append(Family(f"bursts {rate:.0%} of on-windows, mean at bound", "stress", b, burst_rate=rate))
        out.append(Family(f"bursts {rate:.0%} of on-windows, bound+2", "stress", b + 2, burst_rate=rate))
    for period in (2.0, 4.0, 8.0, 30.0):
        out.append(Family(f"periodic resident {period:g} s (amp 30%), at bound", "stress", b, period_s=period))
    out.append(Family("periodic resident 4 s (amp 30%), 0%", "stress", 0.0, period_s=4.0))
    return out


# ---------------------------------------------------------------------------------------------
# generating windows


@dataclass
class Windows:
    off: np.ndarray  # (T, N) window means, NaN when empty
    on: np.ndarray
    off_n: np.ndarray  # (T, N) requests in the window
    on_n: np.ndarray
    off_first: np.ndarray  # (T, N) bool
    baseline: np.ndarray  # (T,)
    baseline_n: np.ndarray
    exposure: np.ndarray  # (T, N) candidate requests in each on-window
    off_p99: np.ndarray | None = None  # (T, N) nearest-rank p99 per window, from the same draws
    on_p99: np.ndarray | None = None
    baseline_p99: np.ndarray | None = None  # (T,)
    stream: tuple[int, ...] = ()  # the family's random stream
    slo: float | None = None  # the resident's p99 SLO (ms), :func:`resident_slo`


def schedule(trials: int, horizon: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The orchestrator's schedule for each trial's probe seed: (off_first, duration) of shape (T, N)."""
    off_first = np.empty((trials, horizon), dtype=bool)
    duration = np.empty((trials, horizon))
    for t in range(trials):
        probe_seed = seed * 1_000_003 + t
        for i in range(horizon):
            order, length = pair_schedule(probe_seed, i, WINDOW_S)
            off_first[t, i] = order == "off-on"
            duration[t, i] = length
    return off_first, duration


def _draw_latency(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "lognormal":
        return rng.lognormal(math.log(10.0), 0.5, shape)
    if kind == "lognormal-heavy":
        return rng.lognormal(math.log(10.0), 1.0, shape)
    if kind == "pareto":
        return 6.0 * (1.0 + rng.pareto(2.5, shape))
    raise ValueError(kind)


def _window_means(rng: np.random.Generator, kind: str, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and p99 of ``counts[...]`` per-request latencies per window, from the same draws (NaN when a
    window has none). The p99 is canary's nearest rank (:mod:`canary.quantiles`): the
    ``ceil(0.99 k)``-th smallest of the window's ``k`` latencies, the maximum below 100 requests."""
    flat = counts.reshape(-1)
    out = np.full(flat.size, np.nan)
    p99 = np.full(flat.size, np.nan)
    kmax = int(flat.max()) if flat.size else 0
    chunk = max(1, 4_000_000 // max(kmax, 1))
    for start in range(0, flat.size, chunk):
        k = flat[start : start + chunk]
        draws = _draw_latency(rng, kind, (k.size, kmax))
        mask = np.arange(kmax)[None, :] < k[:, None]
        sums = np.where(mask, draws, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + chunk] = np.where(k > 0, sums / np.maximum(k, 1), np.nan)
        if kmax:
            ordered = np.sort(np.where(mask, draws, np.inf), axis=1)
            rank = np.clip(np.ceil(0.99 * k).astype(np.int64), 1, kmax) - 1
            p99[start : start + chunk] = np.where(k > 0, ordered[np.arange(k.size), rank], np.nan)
    return out.reshape(counts.shape), p99.reshape(counts.shape)


def _resident_factor(fam: Family, start: np.ndarray, end: np.ndarray, phase: np.ndarray, step_at: np.ndarray) -> np.ndarray:
    """The resident's own latency factor averaged over each window [start, end)."""
    factor = np.ones_like(start)
    if fam.drift_per_s:
        factor = factor * (1.0 + fam.drift_per_s * (start + end) / 2.0)
    if fam.step_at_fraction:
        overlap = np.clip(end - np.maximum(start, step_at[:, None]), 0.0, None) / (end - start)
        factor = factor * (1.0 + 0.3 * overlap)
    if fam.period_s is not None:
        w = 2 * math.pi / fam.period_s
        mean_sin = (np.cos(w * start + phase[:, None]) - np.cos(w * end + phase[:, None])) / (w * (end - start))
        factor = factor * (1.0 + 0.3 * mean_sin)
    return factor


def _slowdowns(fam: Family, rng: np.random.Generator, trials: int, horizon: int) -> np.ndarray:
    s = fam.truth_pct / 100.0
    if fam.ar_phi is not None:
        phi, sd = fam.ar_phi, fam.ar_sd
        eps = np.empty((trials, horizon))
        eps[:, 0] = rng.normal(0.0, sd, trials)
        innovations = rng.normal(0.0, sd * math.sqrt(1 - phi * phi), (trials, horizon))
        for i in range(1, horizon):
            eps[:, i] = phi * eps[:, i - 1] + innovations[:, i]
        return np.maximum(s + eps, -0.5)
    if fam.burst_rate is not None:
        magnitude = s / fam.burst_rate
        return np.where(rng.random((trials, horizon)) < fam.burst_rate, magnitude, 0.0)
    return np.full((trials, horizon), s)


def generate(fam: Family, trials: int, horizon: int, seed: int, family_index: int,
             sched: tuple[np.ndarray, np.ndarray], *, stream: int = 11) -> Windows:
    rng = np.random.default_rng([seed, family_index, stream])
    off_first, duration = sched
    off_first, duration = off_first[:trials, :horizon], duration[:trials, :horizon]
    pair_start = BASELINE_S + 2.0 * (np.cumsum(duration, axis=1) - duration)
    first_end = pair_start + duration
    on_start = np.where(off_first, first_end, pair_start)
    off_start = np.where(off_first, pair_start, first_end)
    phase = rng.uniform(0, 2 * math.pi, trials)
    total = pair_start[:, -1] + 2 * duration[:, -1]
    step_at = rng.uniform(0.25, 0.75, trials) * total
    on_factor = _resident_factor(fam, on_start, on_start + duration, phase, step_at)
    off_factor = _resident_factor(fam, off_start, off_start + duration, phase, step_at)
    base_factor = _resident_factor(fam, np.zeros((trials, 1)), np.full((trials, 1), BASELINE_S), phase, step_at)[:, 0]
    slow = _slowdowns(fam, rng, trials, horizon)
    on_n = rng.poisson(fam.rps * duration)
    off_n = rng.poisson(fam.rps * duration)
    base_n = rng.poisson(fam.rps * BASELINE_S, trials)
    on_unit, on_unit_p99 = _window_means(rng, fam.latency, on_n)
    off_unit, off_unit_p99 = _window_means(rng, fam.latency, off_n)
    base_unit, base_unit_p99 = _window_means(rng, fam.latency, base_n)
    exposure = rng.poisson(CANDIDATE_RPS * duration)
    return Windows(
        off_unit * off_factor, on_unit * on_factor * (1.0 + slow), off_n, on_n, off_first,
        base_unit * base_factor, base_n, exposure,
        off_p99=off_unit_p99 * off_factor, on_p99=on_unit_p99 * on_factor * (1.0 + slow),
        baseline_p99=base_unit_p99 * base_factor, stream=(seed, family_index, stream),
    )


def resident_slo(fam: Family, seed: int, family_index: int, sched: tuple[np.ndarray, np.ndarray], horizon: int,
                 probes: int = 200) -> float:
    """The family's SLO on the resident's p99: the 90th percentile (nearest rank) of the p99 of the
    resident's windows *alone* — ``probes`` independent probes' off-windows of the family without the
    candidate (no slowdown, same latency law, rate and resident factor process), drawn from their own
    random stream. The resident alone breaches it in about one window in ten: a resident running near
    its SLO, the hard case for the SLO rule, whose breaches are mostly not the candidate's."""
    quiet = replace(fam, truth_pct=0.0, ar_phi=None, ar_sd=0.0, burst_rate=None)
    cal_sched = (np.resize(sched[0][:, :horizon], (probes, horizon)), np.resize(sched[1][:, :horizon], (probes, horizon)))
    w = generate(quiet, probes, horizon, seed, family_index, cal_sched, stream=13)
    ok = w.off_n >= SETTINGS.min_samples_per_window
    assert w.off_p99 is not None
    value = quantile(w.off_p99[ok].tolist(), SLO_QUANTILE)
    assert value is not None
    return float(value)


# ---------------------------------------------------------------------------------------------
# the methods


@dataclass
class Outcome:
    label: np.ndarray  # (T,) 1 safe, -1 unsafe, 0 inconclusive
    pairs_used: np.ndarray  # (T,) pairs consumed until the verdict (horizon when inconclusive)
    rule: np.ndarray | None = None  # (T,) str: judge / guard / futility / budget (+ slo, *-end, not-now)
    pauses: np.ndarray | None = None  # (T,) SLO / guard breaches settled (the last attributed or not)


def _first_true(mask: np.ndarray) -> np.ndarray:
    """Index of the first True per row, or -1."""
    any_ = mask.any(axis=1)
    return np.where(any_, mask.argmax(axis=1), -1)


def sequential(w: Windows, settings: JudgeSettings, *, guard: bool) -> Outcome:
    trials, horizon = w.off.shape
    valid = (w.off_n >= settings.min_samples_per_window) & (w.on_n >= settings.min_samples_per_window)
    base = np.where(w.baseline_n >= settings.min_samples_per_window, w.baseline, np.nan)
    z = pair_contrasts(w.off, w.on, valid, base, settings.bound_ratio)
    left = np.broadcast_to(horizon - 1 - np.arange(horizon), (trials, horizon)).astype(np.int64)
    paths = sequential_paths(z, settings, pairs_left_after=left,
                             safe_range=predictable_range(w.off, valid & np.isfinite(w.off), settings))
    event = paths.safe | paths.unsafe | paths.futile
    k = _first_true(event)
    rows = np.arange(trials)
    kk = np.maximum(k, 0)
    judge_pair = np.where(k >= 0, paths.position[rows, kk], horizon)
    label = np.where(
        k < 0, 0, np.where(paths.unsafe[rows, kk], -1, np.where(paths.safe[rows, kk], 1, 0))
    )
    rule = np.where(k < 0, "budget", np.where(paths.futile[rows, kk] & (label == 0), "futility", "judge"))
    used = np.where(k < 0, horizon, judge_pair + 1)
    if guard:
        g = _guard_pairs(w, settings)
        # The guard sees pair i's on-window before the judge sees pair i.
        fired = (g >= 0) & (g <= judge_pair)
        label = np.where(fired, -1, label)
        rule = np.where(fired, "guard", rule)
        used = np.where(fired, g + 1, used)
    return Outcome(label, used, rule)


def _guard_pairs(w: Windows, settings: JudgeSettings) -> np.ndarray:
    """First pair whose on-window (>= GUARD_MIN_SAMPLES requests) is more than the guard slower than the
    slowest off-window of the earlier pairs and the baseline (or -1) — the orchestrator's rule."""
    valid_off = (w.off_n >= settings.min_samples_per_window) & np.isfinite(w.off)
    base = np.where(w.baseline_n >= settings.min_samples_per_window, w.baseline, 0.0)
    offs = np.where(valid_off, w.off, 0.0)
    running = np.maximum(np.maximum.accumulate(offs, axis=1), base[:, None])
    ref = np.concatenate([base[:, None], running[:, :-1]], axis=1)  # before pair i
    on_ok = (w.on_n >= max(GUARD_MIN_SAMPLES, settings.min_samples_per_window)) & np.isfinite(w.on)
    with np.errstate(invalid="ignore", divide="ignore"):
        fire = on_ok & (ref > 0) & (w.on / ref - 1.0 > GUARD_PCT / 100.0)
    return _first_true(fire)


# -- judge + guard + SLO rule with attribution, as the orchestrator drives them --------------------


@dataclass
class _Path:
    """One row's judge path mapped back to pair indices: after pair ``i``, does the judge say safe,
    unsafe or futile (with the budget's pairs left then)?"""

    safe: np.ndarray  # (R, N) bool
    unsafe: np.ndarray
    futile: np.ndarray


def _judge_by_pair(off: np.ndarray, on: np.ndarray, valid: np.ndarray, base: np.ndarray, left: np.ndarray,
                   settings: JudgeSettings) -> _Path:
    z = pair_contrasts(off, on, valid, base, settings.bound_ratio)
    paths = sequential_paths(z, settings, pairs_left_after=left,
                             safe_range=predictable_range(off, valid & np.isfinite(off), settings))
    out = []
    for flags in (paths.safe, paths.unsafe, paths.futile):
        by_pair = np.zeros_like(flags)
        # ``position`` is a permutation of the pairs per row; entries past the usable pairs are False.
        np.put_along_axis(by_pair, paths.position, flags, axis=1)
        out.append(by_pair)
    return _Path(*out)


def _triggers(on: np.ndarray, on_p99: np.ndarray, on_n: np.ndarray, off: np.ndarray, off_n: np.ndarray,
              base: np.ndarray, base_n: np.ndarray, slo: float, settings: JudgeSettings) -> tuple[np.ndarray, np.ndarray]:
    """Per on-window (R, N): the SLO rule fires (resident p99 over the SLO in a window with data), and
    else the slowdown guard fires (≥ ``GUARD_MIN_SAMPLES`` requests and the window mean more than the
    guard over the slowest off-window of the earlier pairs and the baseline) — ``_Run.guard``."""
    slo_fire = (on_n >= settings.min_samples_per_window) & (on_p99 > slo)
    valid_off = off_n >= settings.min_samples_per_window
    b = np.where(base_n >= settings.min_samples_per_window, base, 0.0)
    running = np.maximum(np.maximum.accumulate(np.where(valid_off, off, 0.0), axis=1), b[:, None])
    ref = np.concatenate([b[:, None], running[:, :-1]], axis=1)  # before pair i
    on_ok = (on_n >= max(GUARD_MIN_SAMPLES, settings.min_samples_per_window)) & np.isfinite(on)
    with np.errstate(invalid="ignore", divide="ignore"):
        guard_fire = on_ok & (ref > 0) & (100.0 * (on / ref - 1.0) > GUARD_PCT) & ~slo_fire
    return slo_fire, guard_fire


@dataclass
class _Row:
    """One probe's windows: statistics, p99s, the rules' triggers and the judge's path by pair."""

    off: np.ndarray  # (N,)
    on: np.ndarray
    off_p99: np.ndarray
    on_p99: np.ndarray
    slo_fire: np.ndarray
    guard_fire: np.ndarray
    path: _Path


def sequential_guarded(w: Windows, settings: JudgeSettings) -> Outcome:
    """The judge, the slowdown guard and the SLO rule with attribution, as the orchestrator's probe loop,
    ``breach``, ``tally`` and ``settle`` drive them: see :func:`run_guarded_trial`. Vectorised where no
    rule fired; a loop over the probes where one did."""
    trials, horizon = w.off.shape
    assert w.on_p99 is not None and w.off_p99 is not None and w.baseline_p99 is not None and w.slo is not None
    slo = w.slo
    valid = (w.off_n >= settings.min_samples_per_window) & (w.on_n >= settings.min_samples_per_window)
    base = np.where(w.baseline_n >= settings.min_samples_per_window, w.baseline, np.nan)
    left = np.broadcast_to(horizon - 1 - np.arange(horizon), (trials, horizon)).astype(np.int64)
    path = _judge_by_pair(w.off, w.on, valid, base, left, settings)
    slo_fire, guard_fire = _triggers(w.on, w.on_p99, w.on_n, w.off, w.off_n, w.baseline, w.baseline_n, slo, settings)
    event = path.safe | path.unsafe | path.futile
    jp = np.where(event.any(axis=1), event.argmax(axis=1), horizon)
    trig = slo_fire | guard_fire
    g = np.where(trig.any(axis=1), trig.argmax(axis=1), horizon)
    rows = np.arange(trials)
    jj = np.minimum(jp, horizon - 1)
    label = np.where(jp >= horizon, 0, np.where(path.unsafe[rows, jj], -1, np.where(path.safe[rows, jj], 1, 0)))
    rule = np.where(jp >= horizon, "budget", np.where(path.futile[rows, jj] & (label == 0), "futility", "judge")).astype(object)
    used = np.minimum(jp + 1, horizon)
    pauses = np.zeros(trials, dtype=np.int64)
    # The baseline breaches the SLO: "not now", the candidate never runs (no exposure, no verdict).
    base_ok = w.baseline_n >= settings.min_samples_per_window
    not_now = base_ok & (w.baseline_p99 > slo)
    label[not_now], rule[not_now], used[not_now] = 0, "not-now", 0
    for t in np.flatnonzero(~not_now & (g < horizon) & (g <= jp)):
        row = _Row(w.off[t], w.on[t], w.off_p99[t], w.on_p99[t], slo_fire[t], guard_fire[t],
                   _Path(path.safe[t], path.unsafe[t], path.futile[t]))
        label[t], rule[t], used[t], pauses[t] = run_guarded_trial(w, int(t), row, slo, settings)
    return Outcome(label, used, rule.astype(str), pauses=pauses)


def run_guarded_trial(w: Windows, t: int, row: _Row, slo: float, settings: JudgeSettings) -> tuple[int, str, int, int]:
    """One probe in which the SLO rule or the guard fires before the judge decides, driven as the
    orchestrator drives it: every complete pair is tallied per rule against thresholds fixed before the
    pair (the SLO on window p99s; the guard's bound over the slowest off-window of the earlier pairs and
    the baseline, on window means), both windows with data (the guard: ``GUARD_MIN_SAMPLES`` requests
    each). When an on-window fired, its pair complete and tallied, the breach is tested by
    :func:`canary.probe.attribution.attribute` (both rules in force, level α over the whole probe):
    attributed → *unsafe* (rule slo / guard); else the probe resumes — unless this was breach
    once some rule's pairs over only with the candidate outnumber those over only without by more than
    ``MAX_EXCESS``: then the judge's word on the pairs so far, a *safe* turned inconclusive (rule
    slo-end / guard-end). Returns (label, rule, pairs used, pauses)."""
    horizon = w.off.shape[1]
    mins = settings.min_samples_per_window
    need = max(GUARD_MIN_SAMPLES, mins)
    b = float(w.baseline[t]) if w.baseline_n[t] >= mins else 0.0
    running = np.maximum(np.maximum.accumulate(np.where(w.off_n[t] >= mins, row.off, 0.0)), b)
    reference = np.concatenate([[b], running[:-1]])  # the slowest off-window before pair i
    tallies = {"guard": ExceedanceTally("guard"), "slo": ExceedanceTally("slo")}
    pauses = 0
    for i in range(horizon):
        if w.on_n[t, i] >= mins and w.off_n[t, i] >= mins:
            tallies["slo"] = tallies["slo"].add(on_over=bool(row.on_p99[i] > slo), off_over=bool(row.off_p99[i] > slo))
        if reference[i] > 0 and min(w.on_n[t, i], w.off_n[t, i]) >= need:
            bound = reference[i] * (1.0 + GUARD_PCT / 100.0)
            tallies["guard"] = tallies["guard"].add(on_over=bool(row.on[i] > bound), off_over=bool(row.off[i] > bound))
        if row.slo_fire[i] or row.guard_fire[i]:
            kind = "slo" if row.slo_fire[i] else "guard"
            pauses += 1
            if attribute(list(tallies.values()), level=settings.alpha).attributed:
                usable = (w.on_n[t, : i + 1] >= mins) & (w.off_n[t, : i + 1] >= mins)
                estimate = 100.0 * (row.on[: i + 1][usable].sum() / row.off[: i + 1][usable].sum() - 1.0)
                if kind == "slo" and usable.any() and estimate < BOUND_PCT:
                    return 0, "no-headroom", i + 1, pauses  # the resident's state, not the pair's: inconclusive
                return -1, kind, i + 1, pauses
            if excess(tallies.values()) > MAX_EXCESS:
                return (-1 if row.path.unsafe[i] else 0), f"{kind}-end", i + 1, pauses
        if row.path.unsafe[i]:
            return -1, "judge", i + 1, pauses
        if row.path.safe[i]:
            return 1, "judge", i + 1, pauses
        if row.path.futile[i]:
            return 0, "futility", i + 1, pauses
    return 0, "budget", horizon, pauses


def _t_quantile(p: float, df: np.ndarray) -> np.ndarray:
    from scipy.stats import t

    return np.asarray(t.ppf(p, np.maximum(df, 1)))


def fixed_horizon(w: Windows, settings: JudgeSettings, *, every_pair: bool) -> Outcome:
    trials, horizon = w.off.shape
    valid = (w.off_n >= settings.min_samples_per_window) & (w.on_n >= settings.min_samples_per_window)
    base = np.where(w.baseline_n >= settings.min_samples_per_window, w.baseline, np.nan)
    z = pair_contrasts(w.off, w.on, valid, base, settings.bound_ratio)
    usable = np.isfinite(z)
    zz = np.where(usable, z, 0.0)
    n = np.cumsum(usable, axis=1).astype(float)
    s1 = np.cumsum(zz, axis=1)
    s2 = np.cumsum(zz * zz, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s1 / n
        var = (s2 - s1 * s1 / n) / (n - 1)
        tstat = mean / np.sqrt(var / n)
    crit = _t_quantile(1 - settings.alpha, n - 1)
    able = (n >= max(2, settings.min_pairs)) & (var > 0)
    safe = able & (tstat < -crit)
    unsafe = able & (tstat > crit)
    if not every_pair:
        last = horizon - 1
        label = np.where(safe[:, last], 1, np.where(unsafe[:, last], -1, 0))
        return Outcome(label, np.full(trials, horizon))
    fresh = usable  # a look happens after each pair that added data
    k = _first_true((safe | unsafe) & fresh)
    rows = np.arange(trials)
    kk = np.maximum(k, 0)
    label = np.where(k < 0, 0, np.where(safe[rows, kk], 1, -1))
    return Outcome(label, np.where(k < 0, horizon, k + 1))


def kayenta_mw(w: Windows, settings: JudgeSettings) -> Outcome:
    """Kayenta's MannWhitneyClassifier (two-sided, confidence 0.98, tolerance 0.25) on per-window means
    at the full horizon, with an allowed increase of 1 + bound on the ratio of means: admit unless High."""
    from scipy.stats import norm

    trials, horizon = w.off.shape
    label = np.zeros(trials, dtype=int)
    z = norm.ppf(1 - (1 - KAYENTA_CONFIDENCE) / 2)
    for t in range(trials):
        off = w.off[t][np.isfinite(w.off[t])]
        on = w.on[t][np.isfinite(w.on[t])]
        if off.size == 0 or on.size == 0:
            continue  # Kayenta: no data → NODATA, which its scorer does not fail
        diffs = np.sort((on[:, None] - off[None, :]).ravel())
        m, n = on.size, off.size
        hl = float(np.median(diffs))  # Hodges-Lehmann: the conventional median of pairwise differences, as Kayenta
        kk = max(math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)), 0)
        lower = diffs[min(kk, diffs.size - 1)]
        effect = on.mean() / off.mean()
        high = lower > KAYENTA_TOLERANCE * abs(hl) and effect > settings.bound_ratio
        label[t] = -1 if high else 1
    return Outcome(label, np.full(trials, horizon))


OLD_GUARD = "sequential+old guard (unattributed)"
GUARDED = "sequential+guard+slo"

METHODS: dict[str, Callable[[Windows, JudgeSettings], Outcome]] = {
    "sequential": lambda w, s: sequential(w, s, guard=False),
    OLD_GUARD: lambda w, s: sequential(w, s, guard=True),
    GUARDED: sequential_guarded,
    "fixed-horizon": lambda w, s: fixed_horizon(w, s, every_pair=False),
    "every-pair uncorrected": lambda w, s: fixed_horizon(w, s, every_pair=True),
    "Kayenta MW (differs from baseline)": kayenta_mw,
}


# ---------------------------------------------------------------------------------------------
# running and reporting


def _median(values: np.ndarray) -> float | None:
    """The nearest-rank median (:func:`canary.quantiles.quantile`); ``None`` without values."""
    m = quantile(values.tolist(), 0.5)
    return None if m is None else float(m)


@dataclass
class MethodRow:
    false_admit: float | None
    false_admit_se: float | None
    false_reject: float | None
    inconclusive: float
    decided: int
    median_exposure_decided: float | None
    median_pairs_decided: float | None
    rules: dict[str, int] = field(default_factory=dict)
    # Only for the method with the SLO rule and attribution:
    false_reject_by: dict[str, float] | None = None  # judge / guard / slo (a *-end unsafe counts as judge)
    not_now: float | None = None  # the resident breached its SLO in the baseline: the candidate never ran
    pauses_mean: float | None = None
    paused: float | None = None  # share of trials with at least one SLO / guard pause


def summarise(fam: Family, out: Outcome, w: Windows, bound_pct: float) -> MethodRow:
    trials = out.label.size
    cum = np.cumsum(w.exposure, axis=1)
    exposure = cum[np.arange(trials), np.clip(out.pairs_used, 1, cum.shape[1]) - 1]
    decided = out.label != 0
    unsafe_truth = fam.truth_pct >= bound_pct
    fa = float(np.mean(out.label == 1)) if unsafe_truth else None
    fa_se = math.sqrt(fa * (1 - fa) / trials) if fa is not None else None
    fr = None if unsafe_truth else float(np.mean(out.label == -1))
    rules: dict[str, int] = {}
    if out.rule is not None:
        for r, lab in zip(out.rule, out.label, strict=True):
            key = f"{r}:{ {1: 'safe', -1: 'unsafe', 0: 'inconclusive'}[int(lab)] }".replace(" ", "")
            rules[key] = rules.get(key, 0) + 1
    extra: dict[str, Any] = {}
    if out.pauses is not None and out.rule is not None:
        rejected = out.label == -1
        base_rule = np.array([str(r).removesuffix("-end") for r in out.rule])
        ended = np.array([str(r).endswith("-end") for r in out.rule])
        by = {"judge": rejected & ((base_rule == "judge") | ended), "guard": rejected & (base_rule == "guard") & ~ended,
              "slo": rejected & (base_rule == "slo") & ~ended}
        extra = {
            "false_reject_by": None if unsafe_truth else {k: float(np.mean(v)) for k, v in by.items()},
            "not_now": float(np.mean(out.rule == "not-now")),
            "pauses_mean": float(np.mean(out.pauses)),
            "paused": float(np.mean(out.pauses > 0)),
        }
    return MethodRow(
        **extra,
        false_admit=fa,
        false_admit_se=fa_se,
        false_reject=fr,
        inconclusive=float(np.mean(~decided)),
        decided=int(decided.sum()),
        # canary's one quantile definition (nearest rank): a median that was observed.
        median_exposure_decided=_median(exposure[decided]),
        median_pairs_decided=_median(out.pairs_used[decided]),
        rules=rules,
    )


def run_family(args: tuple[Family, int, int, int, int, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    fam, index, trials, horizon, seed, sched = args
    began = time.perf_counter()
    w = generate(fam, trials, horizon, seed, index, sched)
    w.slo = resident_slo(fam, seed, index, sched, horizon)
    rows = {name: summarise(fam, method(w, SETTINGS), w, BOUND_PCT).__dict__ for name, method in METHODS.items()}
    return {"family": fam.__dict__, "slo_p99_ms": w.slo, "methods": rows, "wall_s": time.perf_counter() - began}


def pick(indexed: list[tuple[int, Family]], selection: str | None) -> list[tuple[int, Family]]:
    """The families whose name contains one of ``selection``'s comma-separated parts (all when
    ``None``), each keeping its index in the full list, so its random stream (and figures) do not
    depend on which families are picked."""
    if not selection:
        return indexed
    wanted = [w.strip() for w in selection.split(",") if w.strip()]
    return [(i, f) for i, f in indexed if any(w in f.name for w in wanted)]


def run_families(run: Callable[[tuple[Family, int, int, int, int, tuple[np.ndarray, np.ndarray]]], dict[str, Any]],
                 indexed: list[tuple[int, Family]], trials: int, horizon: int, seed: int,
                 workers: int) -> list[dict[str, Any]]:
    """``run`` (a module-level function: it crosses processes) on every family, over one shared
    schedule of window orders and lengths, on ``workers`` processes; results in ``indexed`` order."""
    sched = schedule(trials, horizon, seed)
    jobs = [(f, i, trials, horizon, seed, sched) for i, f in indexed]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(run, jobs))
    return [run(j) for j in jobs]


def _fmt(v: float | None, width: int = 6, digits: int = 3) -> str:
    return f"{'—':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def check_targets(results: Sequence[dict[str, Any]], alpha: float) -> list[str]:
    """The issue's targets, each line 'PASS'/'FAIL' with the numbers."""
    lines = []
    for r in results:
        seq = r["methods"]["sequential"]
        if seq["false_admit"] is not None:
            limit = alpha + 2 * max(seq["false_admit_se"], math.sqrt(alpha * (1 - alpha) / r["trials"]))
            ok = seq["false_admit"] <= limit
            lines.append(f"{'PASS' if ok else 'FAIL'} false admits {seq['false_admit']:.3f} <= {limit:.3f}: {r['family']['name']}")
    for r in results:
        if r["family"]["group"] not in ("clear", "moderate"):
            continue
        seq, fixed = r["methods"]["sequential"], r["methods"]["fixed-horizon"]
        if seq["median_exposure_decided"] is None or fixed["median_exposure_decided"] is None:
            lines.append(f"n/a  exposure: no decided trial: {r['family']['name']}")
            continue
        saving = 1 - seq["median_exposure_decided"] / fixed["median_exposure_decided"]
        fa_ok = (seq["false_admit"] or 0.0) <= (fixed["false_admit"] or 0.0) + 1e-12
        ok = saving >= 0.30 and fa_ok
        lines.append(f"{'PASS' if ok else 'FAIL'} exposure per decided trial {saving:.0%} below fixed-horizon "
                     f"(FA {seq['false_admit'] if seq['false_admit'] is not None else '—'} vs "
                     f"{fixed['false_admit'] if fixed['false_admit'] is not None else '—'}): {r['family']['name']}")
    for r in results:
        if r["family"]["group"] != "clear":
            continue
        seq = r["methods"]["sequential"]
        ok = seq["inconclusive"] <= 0.05 and (seq["false_reject"] or 0.0) <= 0.05
        lines.append(f"{'PASS' if ok else 'FAIL'} inconclusive {seq['inconclusive']:.3f} <= 0.05, false rejects "
                     f"{_fmt(seq['false_reject'], 0)} <= 0.05: {r['family']['name']}")
    # Issue 20: the judge, the guard and the SLO rule together, with attribution.
    for r in results:
        g = r["methods"].get(GUARDED)
        if g is None:
            continue
        name, truth = r["family"]["name"], r["family"]["truth_pct"]
        if g["false_admit"] is not None:
            limit = alpha + 2 * max(g["false_admit_se"], math.sqrt(alpha * (1 - alpha) / r["trials"]))
            ok = g["false_admit"] <= limit
            lines.append(f"{'PASS' if ok else 'FAIL'} judge+guard+slo false admits {g['false_admit']:.3f} <= {limit:.3f}: {name}")
        elif truth <= BOUND_PCT / 2:
            ok = g["false_reject"] <= 0.05
            lines.append(f"{'PASS' if ok else 'FAIL'} judge+guard+slo false rejects {g['false_reject']:.3f} <= 0.05 "
                         f"(truth <= bound/2): {name}")
    return lines


def guarded_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """The judge, the guard and the SLO rule with attribution, per family, beside the old guard."""
    head = (f"{'family':<44} {'truth':>6} {'SLO ms':>7} | {'FA±SE / FR':<13} {'FR judge/guard/slo':<18} "
            f"{'inc':>5} {'notnow':>6} {'exp':>5} {'paused':>6} {'pauses':>6} | old guard FA/FR")
    lines = [f"# {GUARDED}: the SLO rule and the guard pause the probe; unsafe only when attributed "
             f"(a test martingale over the probe, level alpha; ends at an excess of {MAX_EXCESS})", head, "-" * len(head)]
    for r in results:
        g, old = r["methods"][GUARDED], r["methods"][OLD_GUARD]
        err = (f"{g['false_admit']:.3f}±{g['false_admit_se']:.3f}" if g["false_admit"] is not None
               else f"FR {g['false_reject']:.3f}")
        by = g["false_reject_by"]
        by_text = "—" if by is None else f"{by['judge']:.3f}/{by['guard']:.3f}/{by['slo']:.3f}"
        exp = g["median_exposure_decided"]
        old_text = (f"FA {old['false_admit']:.3f}" if old["false_admit"] is not None else f"FR {old['false_reject']:.3f}")
        lines.append(
            f"{r['family']['name']:<44} {r['family']['truth_pct']:>6.1f} {r['slo_p99_ms']:>7.2f} | {err:<13} {by_text:<18} "
            f"{g['inconclusive']:>5.3f} {g['not_now']:>6.3f} {'—' if exp is None else str(round(exp)):>5} "
            f"{g['paused']:>6.3f} {g['pauses_mean']:>6.2f} | {old_text}"
        )
    lines.append("-" * len(head))
    lines.append("# FR judge/guard/slo: false rejects by the rule that decided (an unsafe word of the judge at the "
                 "probe's end after the last pause counts as judge); inc includes not-now; notnow: the resident "
                 "breached its SLO in the baseline (the candidate never ran); paused: trials with >= 1 pause; pauses: "
                 "mean per trial")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials per family")
    parser.add_argument("--horizon", type=int, default=HORIZON, help="window pairs the budget allows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes (families run in parallel)")
    parser.add_argument("--families", default="", help="comma-separated substrings of family names")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--plot", type=Path, default=None, help="draw false admits and exposure per family here")
    args = parser.parse_args(argv)
    if args.trials < 10 or args.horizon < MIN_PAIRS:
        parser.error("--trials must be >= 10 and --horizon >= 3")
    indexed = pick(list(enumerate(families())), args.families)
    alpha = 1 - CONFIDENCE
    began = time.perf_counter()
    print(f"# judge benchmark: bound {BOUND_PCT:g}%, confidence {CONFIDENCE}, windows {WINDOW_S:g} s "
          f"(0.75-1.25x, random block order), horizon {args.horizon} pairs, {args.trials} trials per family, "
          f"seed {args.seed}")
    print(f"# judge: range {SETTINGS.range_z:.3f} ({RANGE_PCT:g}% per window; guard {GUARD_PCT:g}%), safe needs >= {SETTINGS.min_safe_pairs} "
          f"effective pairs n/tau (bursts in >= {BURST_RATE_GUARDED:.0%} of windows) and log-capital >= max(1, F, tau) log(1/alpha)")
    results = run_families(run_family, indexed, args.trials, args.horizon, args.seed, args.workers)
    for r in results:
        r["trials"] = args.trials
    names = list(METHODS)
    short = {"sequential": "seq", OLD_GUARD: "seq+oldguard", GUARDED: "seq+guard+slo", "fixed-horizon": "fixed",
             "every-pair uncorrected": "uncorr", "Kayenta MW (differs from baseline)": "KaytMW"}
    header = f"{'family':<44} {'truth':>6} | " + " | ".join(
        f"{short[n] + ' FA±SE / FR / inc / exp':<33}" for n in names
    )
    print(header)
    print("-" * len(header))
    for r in results:
        fam = r["family"]
        cells = []
        for n in names:
            m = r["methods"][n]
            err = (f"{m['false_admit']:.3f}±{m['false_admit_se']:.3f}" if m["false_admit"] is not None
                   else f"FR {m['false_reject']:.3f}    ")
            exp = m["median_exposure_decided"]
            exp_text = "—" if exp is None else str(round(exp))
            cells.append(f"{err:<13} inc {m['inconclusive']:.3f} exp {exp_text:>5}")
        print(f"{fam['name']:<44} {fam['truth_pct']:>6.1f} | " + " | ".join(f"{c:<33}" for c in cells))
    print("-" * len(header))
    print("# FA = false admits (safe verdict, truth >= bound) ± standard error; FR = false rejects (truth < bound);")
    print("# inc = inconclusive; exp = median candidate requests per DECIDED trial. Kayenta MW tests "
          "'differs from baseline', not 'within the bound'.")
    print("# sequential verdicts by rule: " + "; ".join(
        f"{r['family']['name']}: {r['methods'][GUARDED]['rules']}" for r in results[:3]))
    for line in guarded_table(results):
        print(line)
    targets = check_targets(results, alpha)
    for line in targets:
        print(line)
    failed = sum(line.startswith("FAIL") for line in targets)
    elapsed = time.perf_counter() - began
    print(f"# {len(results)} families x {args.trials} trials in {elapsed:.1f} s; targets failed: {failed}")
    if args.json is not None:
        doc = {
            "settings": {"bound_pct": BOUND_PCT, "confidence": CONFIDENCE, "horizon_pairs": args.horizon,
                         "window_s": WINDOW_S, "guard_pct": GUARD_PCT, "burst_rate_guarded": BURST_RATE_GUARDED,
                         "min_safe_pairs": SETTINGS.min_safe_pairs, "range_z": SETTINGS.range_z,
                         "trials": args.trials, "seed": args.seed, "slo_quantile": SLO_QUANTILE,
                         "max_excess": MAX_EXCESS, "attribution_bet": BET, "attribution_level": alpha},
            "results": results,
            "targets": targets,
            "wall_s": elapsed,
        }
        args.json.write_text(json.dumps(doc, indent=1, default=float))
    if args.plot is not None:
        plot(results, alpha, args.plot, args.trials)
    return 0


def plot(results: Sequence[dict[str, Any]], alpha: float, path: Path, trials: int) -> None:
    """Two panels: false-admit rate per family at or beyond the bound (±2 SE), per method, against
    alpha; and median exposure per decided trial on the clear and moderate families."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = ["sequential", "fixed-horizon", "every-pair uncorrected", "Kayenta MW (differs from baseline)"]
    colours = {"sequential": "tab:green", "fixed-horizon": "tab:blue", "every-pair uncorrected": "tab:orange",
               "Kayenta MW (differs from baseline)": "tab:red"}
    unsafe = [r for r in results if r["methods"]["sequential"]["false_admit"] is not None]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(16, 8), gridspec_kw={"width_ratios": [3, 1]})
    y = np.arange(len(unsafe))
    for k, m in enumerate(methods):
        fa = np.array([r["methods"][m]["false_admit"] for r in unsafe])
        se = np.array([r["methods"][m]["false_admit_se"] for r in unsafe])
        ax1.errorbar(fa, y + (k - 1.5) * 0.18, xerr=2 * se, fmt="o", ms=4, color=colours[m], label=m)
    ax1.axvline(alpha, color="k", ls="--", lw=1, label=f"alpha = {alpha:g}")
    ax1.set_xscale("symlog", linthresh=0.02)
    ax1.set_xlim(0.0, 1.05)
    ax1.set_yticks(y, [r["family"]["name"] for r in unsafe], fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel("false-admit rate (safe verdicts with truth >= bound), ±2 SE")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
    ax1.set_title(f"false admits per family ({trials} trials each)")
    clear = [r for r in results if r["family"]["group"] in ("clear", "moderate")]
    yc = np.arange(len(clear))
    for k, m in enumerate(["sequential", "fixed-horizon"]):
        ex = [r["methods"][m]["median_exposure_decided"] or 0 for r in clear]
        ax2.barh(yc + (k - 0.5) * 0.4, ex, height=0.4, color=colours[m], label=m)
    ax2.set_yticks(yc, [r["family"]["name"] for r in clear], fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel("median candidate requests per decided trial")
    ax2.legend(fontsize=8)
    ax2.set_title("exposure")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
