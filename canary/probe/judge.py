"""The sequential judge: turns canary-off / canary-on windows of the resident's latency into a verdict.

Pure: no IO, no clock, and randomness only from a seed argument (:func:`pair_schedule`). The
orchestrator calls :func:`judge` after every window pair; ``benchmarks/judge.py`` drives the same
vectorised core (:func:`sequential_paths`) over thousands of simulated probes at once.

**What is bounded (the estimand).** ``max_resident_slowdown`` bounds the ratio of the resident's mean
latency with the candidate to its mean latency without it (for a throughput resident, whose monitor
reports time per step, the inverse ratio of throughputs)::

    R = E[on-window mean latency] / E[off-window mean latency],      safe  ⇔  R < 1 + b

— the number a user reads as "x% slower", not a mean of per-window log-ratios (which lies below it
whenever the slowdown varies). ``estimate_pct`` is the plug-in ``Σ on / Σ off − 1`` over the usable
pairs; the interval is the confidence sequence for ``R`` described below.

The pipeline, each step testable alone (knobs from the :class:`~canary.policy.RiskBudget`):

1. :func:`preprocess_window` — NaN/inf samples are dropped and counted; a non-number or a negative
   latency makes the window an ``error`` (a broken monitor is never read as a pass); an optional
   outlier cut; fewer than ``min_samples_per_window`` usable samples makes the window ``no-data``.
   A pair with a no-data window is *no data*, skipped and counted — unless the monitor showed the
   resident **stalled** in the on-window (requests outstanding past their timeout, or the SLO
   monitor says so: :attr:`WindowPair.on_stalled`), which is evidence of harm and decides *unsafe*.
2. :func:`pair_contrasts` — for a ratio ``r`` one bounded number per pair::

       z_i(r) = (on_i − r · off_i) / (r · scale_i)

   where ``scale_i`` is the mean of the off-window statistics *before* pair ``i`` (the baseline window
   first): it is known before the pair is measured, so dividing by it keeps the sign of the pair's
   conditional mean. ``E[z_i | past] ≥ 0`` for every pair exactly when each pair's mean ratio is at
   least ``r``. The contrast is clipped below at ``−U`` (:attr:`JudgeSettings.range_z`): that can only
   raise it, so it makes a *safe* claim harder, never easier. Above, nothing is clipped: a pair with
   ``z > U_i`` is **out of range**, and after one the judge never says *safe* again. ``U_i`` is the
   larger of ``U`` — an on-window more than the range (default 4 × the bound, the default per-window
   guard plus the bound) slower than the scale — and ``κ · √2 · cv_i``, ``κ`` standard deviations
   (:attr:`JudgeSettings.range_spreads`, 4) of a contrast with no slowdown at all, ``cv_i`` being the
   coefficient of variation of the usable canary-off windows before pair ``i``
   (:func:`predictable_range`). ``U_i`` is known before pair ``i`` and reads no window the candidate
   ran in, so the test below keeps its bound with it; a resident whose own windows wander by ±10%
   no longer closes the safe side for good on one chance excursion its off-windows show as well.
3. :func:`sequential_paths` — two one-sided betting tests (Waudby-Smith & Ramdas, "Estimating means of
   bounded random variables by betting", JRSS-B 2024, arXiv:2010.09686)::

       K_n^safe(r)   = Π (1 − λ_i z_i(r)),     K_n^unsafe(r) = Π (1 + μ_i max(z_i(r), −U))

   with predictable bets (aGRAPA: ``λ_i = −m/(v + m²)`` from the mean ``m`` and variance ``v`` of the
   earlier contrasts, capped at ``c/U_i`` for *safe* and ``c/U`` for *unsafe*). Under the null "mean
   ratio ≥ r" (every conditional mean of ``z`` ≥ 0, any dependence, any shape) and ``z_i ≤ U_i``,
   ``K^safe`` is a nonnegative supermartingale (``U_i`` is predictable, so each factor is still
   ``≥ 1 − c`` with conditional mean ≤ 1),
   so by Ville's inequality ``P(∃n: K_n^safe ≥ 1/α) ≤ α``: the *safe* claim keeps its error bound
   under a look after every pair and any stopping rule. Symmetrically for *unsafe*.
4. Two guards for what a martingale cannot see, both of which only *withhold* a safe verdict:

   - **bursts rarer than the probe**: a slowdown carried by a few very slow windows (beyond ``U_i``)
     is out of range and shows only when one of those windows is sampled. A safe verdict therefore needs at least
     ``min_safe_pairs = ⌈log α / log(1 − p)⌉`` usable pairs without an out-of-range one, so bursts in
     at least a fraction ``p`` (``burst_rate_guarded``) of the windows are seen with probability
     ``≥ 1 − α`` before any admit;
   - **persistent interference**: the martingale covers the running mean of the *conditional*
     means; when interference is autocorrelated across pairs that running mean over a short probe can
     sit far from the long-run mean. Evidence from ``n`` dependent pairs is worth about ``n / τ``
     independent ones, where ``τ = 1 + 2 Σ ρ_k`` is the integrated autocorrelation time of the
     contrasts. The judge estimates it two ways on its own data — Geyer's initial monotone sequence
     estimator over lags up to 40 (:func:`autocorrelation_time`) and the batch-means variance inflation
     ``F`` (6 batches of consecutive pairs) — and a safe verdict needs both
     ``log K^safe ≥ max(1, F, τ) · log(1/α)`` and an **effective sample** ``n / τ ≥ min_safe_pairs``
     (the burst rule's count assumes independent chances to see a slow window; under dependence ``n``
     pairs give about ``n / τ`` of them). Otherwise the probe goes on, and ends *inconclusive* if the
     evidence never outgrows the dependence. Neither rule ever produces an *unsafe* verdict. From
     fewer than 30 usable pairs τ is too noisy to act on; there a lag-1 autocorrelation above
     ``1.28 / √n`` withholds *safe* instead.
5. :func:`judge` — ``unsafe`` / ``safe`` / ``inconclusive`` (budget spent, or futile: the pairs left
   could not reach either threshold even if the truth lay two standard errors further out),
   ``no-data``, ``error``.

**A prior** (:class:`SlowdownPrior` on :attr:`JudgeSettings.prior`, from an estimator) shapes only the
bets of step 3: each capital becomes ``½ K^data + ½ K^prior``, the second process betting from the
prior's posterior. Its bets are predictable and bounded like the others, so the error bound holds
whatever the prior says; a wrong prior costs at most ``log 2`` of log-capital (time), a right one
decides *unsafe* sooner (:func:`sequential_paths`; ``docs/judge-prior.md``).

Where the guarantee stops (also in ``docs/canary.md``): bursts beyond the range ``U_i`` in fewer than a
fraction ``p`` of the windows (a safe verdict then bounds the slowdown carried by windows within
``max(U, κ`` spreads of the resident's own off-windows``)``, not the bursts' share); interference whose
correlation time is so long against the probe that the probe sees one nearly flat stretch of it (the
estimate of ``τ`` from ``n`` pairs cannot exceed what ``n`` pairs show: measured, AR(1) with φ 0.95 —
``τ`` ≈ 20 pairs — is held at α only because its per-pair wander is visible within a 120-pair probe;
slower or smoother processes are not covered); a resident whose behaviour after admission differs
from the probe (phases longer than the probe).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from canary.policy import RiskBudget

JudgeLabel = Literal["safe", "unsafe", "inconclusive", "no-data", "error"]
#: What made a verdict: the sequential test, the per-window slowdown guard, the resident's SLO, a
#: stalled resident, the futility rule, or the end of the budget.
DecidingRule = Literal["judge", "guard", "slo", "stall", "futility", "budget", "none"]
WindowStatistic = Literal["mean", "median"]
WindowStatus = Literal["ok", "no-data", "error"]
PairOrder = Literal["off-on", "on-off"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# Ratios searched for the reported interval: slowdowns from −90% to +1000%, log-spaced.
_RATIO_GRID = np.exp(np.linspace(math.log(0.1), math.log(11.0), 721))
# Pairs before the futility rule may stop a probe.
_FUTILITY_MIN_PAIRS = 10
# Batches of the dependence check (batch means over consecutive pairs).
_BATCHES = 6
_MIN_BATCH = 5
# Longest lag the autocorrelation-time estimate looks at.
_MAX_LAG = 40
# Pairs from which the autocorrelation time is acted on; before, the lag-1 check stands in.
_TAU_MIN_PAIRS = _BATCHES * _MIN_BATCH
# One-sided 90% point of the lag-1 autocorrelation of independent pairs, in units of 1/sqrt(n).
_LAG1_Z = 1.28
# Bet cap as a fraction of 1/U (Waudby-Smith & Ramdas use 1/2 or 3/4): keeps every factor ≥ 1 − c.
_BET_FRACTION = 0.75
# With a prior: the weight of the prior's betting process in each test's capital (the data-only
# process has the rest), fixed before any data.
_PRIOR_WEIGHT = 0.5
# The prior's process may bet up to this fraction of 1/U (every factor ≥ 0.05): its bets are near
# their best from the first pair, where the data-only bets, still learning, stay at 0.75/U for
# robustness; a loss it takes on one extreme pair leaves the data-only half untouched.
_PRIOR_BET_FRACTION = 0.95


@dataclass(frozen=True, slots=True)
class SlowdownPrior:
    """What is believed about the resident's slowdown before the probe measures it (from an estimator:
    evidence on neighbouring keys, the profiles, the simulator): a mean and a standard deviation, both
    in percent of the ratio of mean latencies (``R − 1``, the judge's estimand).

    It shapes only the *bets* of the sequential tests (:func:`sequential_paths`), never their
    thresholds or the rules that withhold a safe verdict: a right prior decides sooner, a wrong one
    costs time, and neither changes the error bound (see :func:`sequential_paths`)."""

    mean_pct: float
    sd_pct: float

    def __post_init__(self) -> None:
        for name in ("mean_pct", "sd_pct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"SlowdownPrior.{name} must be a number, not {value!r:.40}")
            if not math.isfinite(value):
                raise ValueError(f"SlowdownPrior.{name} must be finite, not {value}")
        if not self.mean_pct > -100.0:
            raise ValueError(f"SlowdownPrior.mean_pct must be > -100 (a latency ratio above 0), not {self.mean_pct}")
        if not self.sd_pct > 0:
            raise ValueError(f"SlowdownPrior.sd_pct must be > 0, not {self.sd_pct}")


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """The judge's knobs, normally taken from a :class:`RiskBudget` (:meth:`from_budget`).

    ``range_slowdown_pct``: the largest slowdown of one on-window against the scale that the judge's
    range holds (default: 4 × the bound, which is the default per-window guard plus the bound). ``burst_rate_guarded``: the rarest fraction of slow windows
    a safe verdict must have had the chance to see (see :attr:`min_safe_pairs`). ``coverage_pairs``: the
    pairs a safe verdict needs to span the probe's coverage horizon (0: none beyond the burst rule).
    ``range_spreads``: ``κ`` of the safe test's per-pair range ``max(U, κ · √2 · cv)`` from the resident's
    own canary-off windows (:func:`predictable_range`; 0: the fixed range ``U`` alone)."""

    max_resident_slowdown_pct: float
    required_confidence: float
    min_pairs: int = 2
    window_statistic: WindowStatistic = "mean"
    min_samples_per_window: int = 3
    outlier_factor: float | None = None
    range_slowdown_pct: float | None = None
    burst_rate_guarded: float = 0.05
    coverage_pairs: int = 0
    prior: SlowdownPrior | None = None
    range_spreads: float = 4.0

    def __post_init__(self) -> None:
        if not self.max_resident_slowdown_pct > 0:
            raise ValueError("max_resident_slowdown_pct must be > 0")
        if not 0.5 < self.required_confidence < 1:
            raise ValueError("required_confidence must lie in (0.5, 1)")
        if self.min_pairs < 1 or self.min_samples_per_window < 1:
            raise ValueError("min_pairs and min_samples_per_window must be >= 1")
        if self.outlier_factor is not None and not self.outlier_factor > 1:
            raise ValueError("outlier_factor must be > 1")
        if self.range_slowdown_pct is not None and not self.range_slowdown_pct > self.max_resident_slowdown_pct:
            raise ValueError("range_slowdown_pct must exceed max_resident_slowdown_pct")
        if not 0 < self.burst_rate_guarded < 1:
            raise ValueError("burst_rate_guarded must lie in (0, 1)")
        if self.coverage_pairs < 0:
            raise ValueError("coverage_pairs must be >= 0")
        if not (math.isfinite(self.range_spreads) and self.range_spreads >= 0):
            raise ValueError("range_spreads must be a finite number >= 0")
        if self.prior is not None and not isinstance(self.prior, SlowdownPrior):
            raise ValueError(f"prior must be a SlowdownPrior or None, not {type(self.prior).__name__}")

    @classmethod
    def from_budget(cls, budget: RiskBudget, prior: SlowdownPrior | None = None) -> JudgeSettings:
        return cls(
            max_resident_slowdown_pct=budget.max_resident_slowdown_pct,
            required_confidence=budget.required_confidence,
            min_pairs=budget.min_windows,
            window_statistic=budget.window_statistic,
            min_samples_per_window=budget.min_samples_per_window,
            outlier_factor=budget.outlier_factor,
            range_slowdown_pct=budget.judge_range_pct,
            burst_rate_guarded=budget.judge_burst_rate,
            prior=prior,
        )

    @property
    def alpha(self) -> float:
        return 1.0 - self.required_confidence

    @property
    def bound_ratio(self) -> float:
        return 1.0 + self.max_resident_slowdown_pct / 100.0

    @property
    def range_z(self) -> float:
        """``U``: a contrast above it is out of range — with the off-window at the scale, an on-window
        more than ``range_slowdown_pct`` slower (default 4 × the bound)."""
        top = self.range_slowdown_pct if self.range_slowdown_pct is not None else 4 * self.max_resident_slowdown_pct
        return (1.0 + top / 100.0) / self.bound_ratio - 1.0

    @property
    def min_safe_pairs(self) -> int:
        """Usable pairs a safe verdict needs: bursts in a fraction ``burst_rate_guarded`` of the windows
        are then seen before an admit with probability ≥ 1 − α — and at least ``coverage_pairs``, the
        pairs that span the coverage horizon the probe plan chose (:mod:`canary.probe.plan`), so that
        the on-windows have met every declared phase of both workloads."""
        need = math.ceil(math.log(self.alpha) / math.log1p(-self.burst_rate_guarded))
        return max(self.min_pairs, need, self.coverage_pairs)


# ---------------------------------------------------------------------------------------------
# the schedule (randomised so that no periodic resident can alias with it)


def pair_schedule(seed: int, index: int, window_s: float) -> tuple[PairOrder, float]:
    """Order and window length of pair ``index`` of a probe seeded with ``seed``.

    Pairs come in blocks of two, ``off-on, on-off`` or ``on-off, off-on`` by a fair coin per block:
    inside a block a linear drift cancels (as in a fixed ABBA design), and across blocks the order is
    random, so a resident with a period cannot line its slow phase up with the on-windows. Both
    windows of a pair last the same time, drawn uniformly from ``[0.75, 1.25] × window_s`` per pair."""
    block_rng = random.Random(f"{seed}:block:{index // 2}")
    first: PairOrder = "off-on" if block_rng.random() < 0.5 else "on-off"
    second: PairOrder = "on-off" if first == "off-on" else "off-on"
    order: PairOrder = first if index % 2 == 0 else second
    length = random.Random(f"{seed}:length:{index}").uniform(0.75, 1.25) * window_s
    return order, length


# ---------------------------------------------------------------------------------------------
# 1. preprocess


@dataclass(frozen=True, slots=True)
class CleanWindow:
    """One window after the NaN/outlier policy. ``statistic_ms`` is ``None`` unless ``status == "ok"``."""

    status: WindowStatus
    values_ms: tuple[float, ...]
    raw_count: int
    dropped_non_finite: int
    dropped_outliers: int
    statistic_ms: float | None
    reason: str = ""


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def window_statistic(values_ms: Sequence[float], kind: WindowStatistic) -> float:
    """The window's summary (mean or median); the caller guarantees at least one value."""
    if kind == "median":
        return _median(values_ms)
    return math.fsum(values_ms) / len(values_ms)


def preprocess_window(samples: Sequence[object], settings: JudgeSettings) -> CleanWindow:
    """Apply the NaN/garbage/outlier policy to one window of latencies (ms)."""
    raw = list(samples)
    finite: list[float] = []
    non_finite = 0
    for position, value in enumerate(raw):
        # bool is an int subclass; a True latency is garbage, not 1 ms.
        if isinstance(value, bool) or not isinstance(value, int | float):
            return CleanWindow(
                "error", (), len(raw), 0, 0, None, f"sample {position} is not a number: {value!r:.40}"
            )
        number = float(value)
        if not math.isfinite(number):
            non_finite += 1
            continue
        if number < 0:
            return CleanWindow(
                "error", (), len(raw), 0, 0, None, f"sample {position} is a negative latency: {number}"
            )
        finite.append(number)
    outliers = 0
    if settings.outlier_factor is not None and finite:
        cut = settings.outlier_factor * _median(finite)
        kept = [v for v in finite if v <= cut]
        outliers = len(finite) - len(kept)
        finite = kept
    if len(finite) < settings.min_samples_per_window:
        return CleanWindow(
            "no-data",
            tuple(finite),
            len(raw),
            non_finite,
            outliers,
            None,
            f"{len(finite)} usable sample(s) of {len(raw)} (need {settings.min_samples_per_window})",
        )
    stat = window_statistic(finite, settings.window_statistic)
    if not stat > 0:
        return CleanWindow(
            "error",
            tuple(finite),
            len(raw),
            non_finite,
            outliers,
            None,
            f"window {settings.window_statistic} is {stat} ms; a ratio needs a positive latency",
        )
    return CleanWindow("ok", tuple(finite), len(raw), non_finite, outliers, stat)


# ---------------------------------------------------------------------------------------------
# 2. contrasts


@dataclass(frozen=True, slots=True)
class WindowPair:
    """Resident latencies (ms) in a canary-off window and the adjacent canary-on window.

    ``on_stalled``: the monitor saw the resident demonstrably stalled with the canary on (requests
    outstanding past their timeout, or its SLO monitor said so). Only then is an on-window without
    data evidence of harm; otherwise it is only *no data*."""

    off_ms: Sequence[object]
    on_ms: Sequence[object]
    on_stalled: bool = False


def predictable_scale(off_stats: FloatArray, valid: BoolArray, baseline: FloatArray) -> FloatArray:
    """``scale_i``: the mean of the usable off-window statistics before pair ``i``, the baseline window
    counted first (``baseline`` per row; NaN when unknown: then a row's first usable pair only sets
    the scale and is not tested, which :func:`pair_contrasts` marks by a NaN contrast)."""
    offs = np.where(valid, off_stats, 0.0)
    has_base = np.isfinite(baseline)
    base_sum = np.where(has_base, baseline, 0.0)[:, None]
    base_n = has_base.astype(np.float64)[:, None]
    before_sum = np.cumsum(offs, axis=1) - offs + base_sum
    before_n = np.cumsum(valid, axis=1) - valid + base_n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(before_n > 0, before_sum / np.maximum(before_n, 1.0), np.nan)


def pair_contrasts(
    off_stats: FloatArray, on_stats: FloatArray, valid: BoolArray, baseline: FloatArray, ratio: float | FloatArray
) -> FloatArray:
    """``z(r) = (on − r·off) / (r·scale)`` per pair (NaN where the pair is unusable or unscaled).

    ``off_stats``, ``on_stats``, ``valid``: shape ``(rows, pairs)``; ``baseline``: ``(rows,)``;
    ``ratio``: a number or one per row."""
    scale = predictable_scale(off_stats, valid, baseline)
    r = np.asarray(ratio, dtype=np.float64)
    if r.ndim == 1:
        r = r[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (on_stats - r * off_stats) / (r * scale)
    return np.where(valid & np.isfinite(scale), z, np.nan)


#: Canary-off windows before the resident's own spread may widen the safe test's range.
_RANGE_MIN_OFF = 5


def predictable_range(off_stats: FloatArray, valid: BoolArray, settings: JudgeSettings) -> FloatArray:
    """The safe test's range per pair, ``U_i = max(U, κ · √2 · cv_i)``, in contrast units (shape of
    ``off_stats``).

    ``cv_i`` is the coefficient of variation of the usable canary-off window statistics *before* pair
    ``i`` (from :data:`_RANGE_MIN_OFF` of them; before that ``U``), so ``√2 · cv_i`` is the spread of a
    contrast with no slowdown at all, and ``κ`` is :attr:`JudgeSettings.range_spreads`. It is known
    before pair ``i`` is measured (predictable), and it reads only windows the candidate did not run
    in, so the candidate cannot widen it by slowing the resident. A resident whose own windows wander
    by ±10% would otherwise put one in every few dozen on-windows beyond a 4 × bound range by chance
    alone, and after that one the safe side is closed for good."""
    offs = np.where(valid, off_stats, 0.0)
    n: FloatArray = (np.cumsum(valid, axis=1) - valid).astype(np.float64)
    s1 = np.cumsum(offs, axis=1) - offs
    s2 = np.cumsum(offs * offs, axis=1) - offs * offs
    u = settings.range_z
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s1 / np.maximum(n, 1)
        var = np.maximum(s2 - n * mean * mean, 0.0) / np.maximum(n - 1, 1)
        cv = np.sqrt(var) / mean
        wide = settings.range_spreads * math.sqrt(2.0) * cv
    return np.asarray(np.where((n >= _RANGE_MIN_OFF) & np.isfinite(wide), np.maximum(wide, u), u), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# 3./4. the sequential tests, vectorised over rows (probes, or candidate ratios)


@dataclass(frozen=True, slots=True)
class Paths:
    """Per row and per usable pair ``k`` (the k-th usable pair; ``position`` maps it back to the pair
    index): whether a safe / unsafe verdict is allowed after it, and the futility flag. Entries past
    a row's last usable pair are ``False``."""

    position: IntArray
    usable: IntArray
    safe: BoolArray
    unsafe: BoolArray
    futile: BoolArray
    out_of_range: BoolArray
    dependence_blocked: BoolArray
    log_capital_safe: FloatArray
    log_capital_unsafe: FloatArray
    lag1: FloatArray
    inflation: FloatArray
    correlated: BoolArray
    autocorrelation_time: FloatArray


def _growth(mu: FloatArray, var: FloatArray, cap: float | FloatArray) -> FloatArray:
    """Log-capital gained per pair at the best bet ≤ ``cap`` if the contrasts had mean ``mu`` (> 0 in
    the bet's favour) and variance ``var`` — the second-order (Kelly) approximation."""
    var = np.maximum(var, 1e-12)
    lam = np.clip(mu / var, 0.0, cap)
    return np.where(mu > 0, lam * mu - lam * lam * var / 2.0, 0.0)


def _prior_capital(
    prior: SlowdownPrior,
    ratio: float | FloatArray | None,
    bound_ratio: float,
    zc: FloatArray,
    low: FloatArray,
    live: BoolArray,
    s1: FloatArray,
    kk: FloatArray,
    var: FloatArray,
    u: float,
    u_safe: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Log-capital of the prior's betting process, safe and unsafe side (see :func:`sequential_paths`).

    The prior on the contrasts' mean at ratio ``r`` is ``N(m₀, s₀²)``, ``m₀ = (1 + mean_pct/100)/r − 1``
    (kept inside the range ``[−U, U]``), ``s₀ = sd_pct/100/r``. Before pair ``k`` it is updated by the
    ``k`` earlier (compacted, clipped-below) contrasts as if they were Gaussian with the predictable
    variance ``v_k``: the prior counts as ``n₀ = v_k / s₀²`` pairs, the posterior mean is
    ``m̂ = (n₀ m₀ + Σ z) / (n₀ + k)`` and its variance ``ŝ² = v_k / (n₀ + k)``. The bet is
    ``m̂ / (v_k + m̂² + ŝ²)`` on the side ``m̂`` points to, capped at ``_PRIOR_BET_FRACTION / U``.
    Every input is known before pair ``k``: the bets are predictable."""
    rows = zc.shape[0]
    r = np.asarray(bound_ratio if ratio is None else ratio, dtype=np.float64)
    r = np.broadcast_to(r.reshape(-1, 1), (rows, 1)) if r.ndim else np.full((rows, 1), float(r))
    m0 = np.clip((1.0 + prior.mean_pct / 100.0) / r - 1.0, -u, u)
    # Kept where floats hold: beyond these a prior is certain (or knows nothing) for every purpose here.
    s0_sq = np.clip(np.minimum(prior.sd_pct / 100.0, 1e9) / r, 1e-9, 1e9) ** 2
    # (n₀ m₀ + Σz)/(n₀ + k) and v/(n₀ + k), written without n₀ so that a prior too sharp for floats
    # (s₀² → 0, n₀ → ∞) gives m₀ and 0 rather than ∞/∞.
    shrink = s0_sq / (var + kk * s0_sq)
    post_mean = m0 + (s1 - kk * m0) * shrink
    post_var = var * shrink
    kelly = post_mean / (var + post_mean * post_mean + post_var)
    cap = _PRIOR_BET_FRACTION / u
    bet_safe = np.clip(-kelly, 0.0, _PRIOR_BET_FRACTION / u_safe)
    bet_unsafe = np.clip(kelly, 0.0, cap)
    step_safe = np.log(np.maximum(1.0 - bet_safe * np.minimum(zc, u_safe), 1e-300))
    step_unsafe = np.log1p(bet_unsafe * low)
    return (np.cumsum(np.where(live, step_safe, 0.0), axis=1), np.cumsum(np.where(live, step_unsafe, 0.0), axis=1))


def sequential_paths(
    z: FloatArray,
    settings: JudgeSettings,
    *,
    pairs_left_after: IntArray | None = None,
    dependence_of: Paths | None = None,
    ratio: float | FloatArray | None = None,
    safe_range: FloatArray | None = None,
) -> Paths:
    """Run both betting tests, the range rule, the burst rule and the dependence check on contrasts
    ``z`` (rows × pairs, NaN = not usable). ``pairs_left_after[row, i]``: pairs the budget still allows
    after pair ``i`` (for the futility rule; ``None``: no futility). ``dependence_of``: take the
    dependence measures from these (one-row) paths instead — the contrasts at the bound, for the
    interval over other ratios, whose clipped contrasts can be degenerate. ``ratio``: the ratio ``r``
    the contrasts were formed at (a number or one per row; default the bound) — used only to place
    :attr:`JudgeSettings.prior` on the contrasts' scale.

    **With a prior** (:class:`SlowdownPrior`) each test's capital is the even mixture of two betting
    processes, ``K = ½ K^data + ½ K^prior``: ``K^data`` is the test without a prior (above), and
    ``K^prior`` bets from the prior's posterior — the prior ``N(m₀, s₀²)`` on the contrasts' mean
    (``m₀ = (1 + mean_pct/100)/r − 1``, ``s₀ = sd_pct/100/r``) updated by the earlier contrasts as if
    Gaussian with the same predictable variance ``v``: posterior mean ``m̂`` and variance ``ŝ²``, bet
    ``m̂ / (v + m̂² + ŝ²)`` on the side ``m̂`` points to (:func:`_prior_capital`), capped at ``0.95/U``
    where the data-only bets stop at ``0.75/U``. Those bets are capped for most of a clear probe, so
    what a right prior buys is mostly the larger bet, from the first pair (measured in
    ``benchmarks/judge_prior.py``: about 15% fewer pairs to an *unsafe* verdict; a *safe* verdict waits
    for the burst rule's pairs whatever the prior). A confident prior keeps betting where it points
    until the data outweigh it (the prior counts as ``v / s₀²`` pairs).

    **Why validity does not depend on the prior.** The prior is fixed before the probe, and each of
    ``K^prior``'s bets is a function of the prior and the *earlier* contrasts only — predictable, as
    the data-only bets are — and lies in ``[0, c/U]``. So under the null every factor still has
    conditional mean ≤ 1 and ``K^prior`` is a nonnegative supermartingale with ``K_0 = 1`` whatever the
    prior says; a mixture of two such with weights fixed in advance is one too, and Ville's
    inequality gives ``P(∃n: K_n ≥ 1/α) ≤ α`` as before. The Gaussian model only chooses the bets: the
    guarantee uses none of it. Nothing else moves — the threshold, the range, burst and dependence
    rules, and futility read the mixture's capital exactly as they read the data-only one. What a
    prior can cost: ``K ≥ ½ K^data``, so a prior however wrong needs at most ``log 2`` more
    log-capital than no prior (about 23% of ``log(1/α)`` at 95%) — time, never an error. What a right
    prior gains: ``K ≥ ½ K^prior``."""
    n_pairs = z.shape[1]
    u = settings.range_z
    cap = _BET_FRACTION / u
    threshold = math.log(1.0 / settings.alpha)
    usable_mask = np.isfinite(z)
    # Compact the usable contrasts to the left of each row, keeping their order.
    position = np.argsort(~usable_mask, axis=1, kind="stable").astype(np.int64)
    zc = np.take_along_axis(z, position, axis=1)
    count = usable_mask.sum(axis=1)
    k = np.arange(n_pairs)
    live = k[None, :] < count[:, None]
    zc = np.where(live, zc, 0.0)
    low = np.maximum(zc, -u)  # clipped below: raises the contrast, so only makes *safe* harder
    # The safe test's range per pair (compacted like the contrasts): U, or wider where the resident's
    # own canary-off windows spread wider (:func:`predictable_range`); never narrower than U.
    if safe_range is None:
        u_safe = np.full(zc.shape, u)
    else:
        u_safe = np.maximum(np.take_along_axis(np.broadcast_to(safe_range, z.shape), position, axis=1), u)
        u_safe = np.where(np.isfinite(u_safe), u_safe, u)
    cap_safe = _BET_FRACTION / u_safe

    # Predictable mean and variance of the earlier contrasts, shrunk towards 0 and (U/2)².
    prior_n, prior_var = 1.0, (u / 2.0) ** 2
    s1 = np.cumsum(low, axis=1) - low
    s2 = np.cumsum(low * low, axis=1) - low * low
    kk = k[None, :].astype(np.float64)
    mean = s1 / (kk + prior_n)
    ssd = np.maximum(s2 - np.where(kk > 0, s1 * s1 / np.maximum(kk, 1.0), 0.0), 0.0)
    var = (prior_var * prior_n + ssd) / (kk + prior_n)
    kelly = mean / (var + mean * mean)
    bet_safe = np.clip(-kelly, 0.0, cap_safe)
    bet_unsafe = np.clip(kelly, 0.0, cap)

    out = live & (zc > u_safe)
    dead = np.cumsum(out, axis=1) > 0
    step_safe = np.log(np.maximum(1.0 - bet_safe * np.minimum(zc, u_safe), 1e-300))
    step_unsafe = np.log1p(bet_unsafe * low)
    log_safe = np.cumsum(np.where(live, step_safe, 0.0), axis=1)
    log_unsafe = np.cumsum(np.where(live, step_unsafe, 0.0), axis=1)
    if settings.prior is not None:
        p_log_safe, p_log_unsafe = _prior_capital(settings.prior, ratio, settings.bound_ratio, zc, low, live, s1, kk,
                                                  var, u, u_safe)
        # K = (1 − w) K^data + w K^prior, in logs.
        keep, mix = math.log1p(-_PRIOR_WEIGHT), math.log(_PRIOR_WEIGHT)
        log_safe = np.logaddexp(log_safe + keep, p_log_safe + mix)
        log_unsafe = np.logaddexp(log_unsafe + keep, p_log_unsafe + mix)
    # Ville's inequality bounds the chance that the capital *ever* reaches 1/α: a crossing counts
    # from then on.
    crossed_safe = np.maximum.accumulate(log_safe, axis=1) >= threshold
    crossed_unsafe = np.maximum.accumulate(log_unsafe, axis=1) >= threshold

    # Dependence, two estimates on the contrasts clipped to the range both ways (one burst can neither
    # fake nor hide it):
    # - F, the batch-means variance-inflation factor b · Var(batch means) / Var(z) over _BATCHES
    #   consecutive batches of b = ⌊n / _BATCHES⌋ pairs;
    # - τ, the integrated autocorrelation time 1 + 2 Σ ρ_k by Geyer's initial monotone sequence
    #   estimator (sums of adjacent autocovariances, cut at the first that is not positive, forced
    #   non-increasing) — it sees persistence at lags up to _MAX_LAG, which six batches of a short
    #   probe cannot.
    # Both are ≈ 1 for independent pairs. Evidence from n dependent pairs is worth about n / τ
    # independent ones, and the log-capital of a betting test grows about that many times too fast, so
    # a safe verdict needs log K ≥ max(1, F, τ) · log(1/α) AND an effective sample n / τ of at least
    # min_safe_pairs: the burst rule's count assumes independent chances to see a slow window, and
    # under dependence n pairs give only about n / τ of them.
    y = np.clip(zc, -u, u) * live
    n = kk + 1.0
    sy = np.cumsum(y, axis=1)
    syy = np.cumsum(y * y, axis=1)
    lag1 = _lag1(y, sy, syy, kk)
    run_max_safe = np.maximum.accumulate(log_safe, axis=1)
    if dependence_of is not None:
        inflation = np.broadcast_to(dependence_of.inflation, y.shape)
        tau = np.broadcast_to(dependence_of.autocorrelation_time, y.shape)
    else:
        inflation = _inflation(sy, syy, k)
        tau = autocorrelation_time(y)
    # τ from fewer than _TAU_MIN_PAIRS pairs is too noisy to act on (as F, whose batches need
    # _MIN_BATCH pairs each): there the lag-1 autocorrelation stands in — no safe verdict while it is
    # above what independent pairs give in ~90% of probes (_LAG1_Z / √n).
    tau_counted = np.where(n >= _TAU_MIN_PAIRS, tau, 1.0)
    factor = np.maximum(np.maximum(inflation, tau_counted), 1.0)
    short = n / tau_counted < settings.min_safe_pairs
    early_lag1 = (n >= 8) & (n < _TAU_MIN_PAIRS) & (lag1 * np.sqrt(n) > _LAG1_Z)
    # ``correlated``: dependence alone holds the safe verdict back (the effective sample is below what
    # the burst rule needs although the raw count is not, or the early lag-1 check).
    correlated = (short & (n >= settings.min_safe_pairs)) | early_lag1
    if dependence_of is not None:
        correlated = np.broadcast_to(dependence_of.correlated, y.shape)
    blocked = crossed_safe & ((log_safe < factor * threshold) | correlated)
    enough = n >= settings.min_pairs
    safe = live & crossed_safe & ~blocked & ~dead & ~short
    unsafe = live & crossed_unsafe & enough

    futile = np.zeros_like(live)
    if pairs_left_after is not None:
        left = np.take_along_axis(pairs_left_after, position, axis=1).astype(np.float64)
        mean_now = (s1 + low) / n
        var_now = np.maximum((s2 + low * low) / n - mean_now * mean_now, 0.0) * n / np.maximum(n - 1.0, 1.0)
        se = np.sqrt(var_now / n)
        run_max_unsafe = np.maximum.accumulate(log_unsafe, axis=1)
        reach_safe = (
            ~dead
            & (n + left >= settings.min_safe_pairs)
            & (run_max_safe + left * _growth(-mean_now + 2 * se, var_now, cap_safe)
               >= np.maximum(inflation, 1.0) * threshold)
        )
        reach_unsafe = run_max_unsafe + left * _growth(mean_now + 2 * se, var_now, cap) >= threshold
        # The autocorrelation time is left out here: from a few pairs it is too rough to give up on.
        # Not before _FUTILITY_MIN_PAIRS: a variance from a handful of pairs is too rough to give up on.
        futile = live & (n >= max(_FUTILITY_MIN_PAIRS, settings.min_pairs)) & ~safe & ~unsafe & ~reach_safe & ~reach_unsafe
    return Paths(
        position, count.astype(np.int64), safe, unsafe, futile, out, blocked, log_safe, log_unsafe, lag1, inflation,
        correlated, np.asarray(tau, dtype=np.float64),
    )


def autocorrelation_time(y: FloatArray, max_lag: int = _MAX_LAG) -> FloatArray:
    """Integrated autocorrelation time ``τ = 1 + 2 Σ_k ρ_k`` of each row's prefix ``y[:, :n+1]``, for
    every ``n`` (shape of ``y``; at least 1), by Geyer's initial monotone sequence estimator
    (Geyer 1992, "Practical Markov chain Monte Carlo", Statist. Sci. 7(4)): with the autocovariances
    ``γ_k`` of the prefix (divisor n, prefix mean), ``Γ_m = γ_{2m} + γ_{2m+1}`` is summed up to the
    first ``Γ_m ≤ 0`` and forced non-increasing; ``τ = (2 Σ Γ_m − γ_0) / γ_0``. For independent
    values ``τ ≈ 1``; ``n / τ`` is the effective number of independent values."""
    rows, n_pairs = y.shape
    k = np.arange(n_pairs)
    n = (k + 1.0)[None, :]
    sy = np.cumsum(y, axis=1)
    mean = sy / n
    g0 = np.cumsum(y * y, axis=1) / n - mean * mean
    padded = np.concatenate([np.zeros((rows, 1)), sy], axis=1)  # padded[:, j] = sum of the first j
    lags = min(max_lag, n_pairs - 1)
    gammas = [g0]
    for lag in range(1, lags + 1):
        products = np.zeros_like(y)
        products[:, lag:] = y[:, lag:] * y[:, :-lag]
        cross = np.cumsum(products, axis=1)
        later = sy - padded[:, lag][:, None]  # Σ_{i=lag}^{n-1} y_i
        earlier = padded[:, np.clip(k - lag + 1, 0, n_pairs)]  # Σ_{i=0}^{n-1-lag} y_i
        g = (cross - mean * (later + earlier) + np.maximum(n - lag, 0.0) * mean * mean) / n
        gammas.append(np.where(k[None, :] >= lag, g, np.nan))
    if lags < 1:
        return np.ones_like(y)
    stacked = np.stack(gammas, axis=2)
    m = (lags + 1) // 2
    big = stacked[:, :, 0 : 2 * m : 2] + stacked[:, :, 1 : 2 * m : 2]
    keep = np.cumprod(np.isfinite(big) & (big > 0), axis=2).astype(bool)
    monotone = np.minimum.accumulate(np.where(keep, big, np.inf), axis=2)
    total = np.where(keep, monotone, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (2.0 * total - g0) / g0
    return np.asarray(np.where(g0 > 1e-18, np.maximum(tau, 1.0), 1.0), dtype=np.float64)


def _inflation(sy: FloatArray, syy: FloatArray, k: IntArray) -> FloatArray:
    """The batch-means variance-inflation factor after each pair (1 until each batch has _MIN_BATCH
    pairs: from fewer it is too noisy to tell dependence from chance)."""
    rows = sy.shape[0]
    size = (k + 1) // _BATCHES  # pairs per batch after pair k
    edges = size[:, None] * np.arange(_BATCHES + 1)[None, :] - 1  # (N, B+1): last index of each batch
    padded = np.concatenate([np.zeros((rows, 1)), sy], axis=1)  # padded[:, j + 1] = Σ_{i ≤ j} y_i
    sums = padded[:, edges + 1]  # (rows, N, B+1)
    batch_means = np.diff(sums, axis=2) / np.maximum(size, 1)[None, :, None]
    used = (size * _BATCHES).astype(np.float64)  # pairs inside the batches
    tot = padded[:, np.maximum(size * _BATCHES, 0)]
    sq = np.concatenate([np.zeros((rows, 1)), syy], axis=1)[:, np.maximum(size * _BATCHES, 0)]
    with np.errstate(invalid="ignore", divide="ignore"):
        var_pairs = (sq - tot * tot / np.maximum(used, 1.0)) / np.maximum(used - 1.0, 1.0)
        var_batches = batch_means.var(axis=2, ddof=1)
        factor = np.where(
            (size >= _MIN_BATCH)[None, :] & (var_pairs > 1e-18), size[None, :] * var_batches / var_pairs, 1.0
        )
    return np.asarray(factor, dtype=np.float64)


def _lag1(y: FloatArray, sy: FloatArray, syy: FloatArray, kk: FloatArray) -> FloatArray:
    """Lag-1 autocorrelation of the contrasts after each pair (reported, not decided on)."""
    n = kk + 1.0
    m = sy / n
    c0 = syy - sy * sy / n
    products = np.zeros_like(y)
    products[:, 1:] = y[:, 1:] * y[:, :-1]
    c1 = np.cumsum(products, axis=1) - m * (2.0 * sy - y[:, :1] - y) + kk * m * m
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c0 > 1e-18, c1 / c0, 0.0)


# ---------------------------------------------------------------------------------------------
# the whole pipeline


@dataclass(frozen=True, slots=True)
class Judgment:
    """The judge's answer.

    ``label`` is ``None`` only from :func:`judge` with ``budget_exhausted=False`` when it wants more
    data (the orchestrator keeps probing); every final judgment has a label. ``estimate_pct`` is the
    plug-in slowdown ``Σ on / Σ off − 1`` (ratio of mean latencies) and ``interval_pct`` the
    confidence sequence for it; both ``None`` when no usable pair exists; an interval endpoint is
    ``±inf`` while the data cannot bound it. ``confidence`` is the coverage each one-sided claim
    guarantees. ``rule`` says what decided (see :data:`DecidingRule`)."""

    label: JudgeLabel | None
    estimate_pct: float | None
    interval_pct: tuple[float, float] | None
    confidence: float
    window_pairs: int
    raw_samples: int
    reason: str
    dropped_samples: int = 0
    no_data_pairs: int = 0
    stalled_pairs: int = 0
    rule: DecidingRule = "none"
    out_of_range_pairs: int = 0
    lag1_autocorrelation: float | None = None
    #: Sample standard deviation of the tested per-pair contrasts at the bound (``z_i`` in units of the
    #: scale; ``None`` under two). The per-pair noise a verdict has to overcome: a fixed-size test at
    #: level α whose mean contrast is ``μ`` needs about ``(z_α · sd / |μ|)²`` pairs for an even chance.
    contrast_sd: float | None = None

    @property
    def decided(self) -> bool:
        return self.label is not None


def _to_pct(ratio: float) -> float:
    return 100.0 * (ratio - 1.0)


def confidence_interval(
    off_stats: FloatArray,
    on_stats: FloatArray,
    valid: BoolArray,
    baseline: float,
    settings: JudgeSettings,
    at_bound: Paths | None = None,
) -> tuple[float, float]:
    """The ratios not excluded by either test (with the same range, burst and dependence rules), as
    slowdowns in percent; an end at the grid's edge is reported as ``-100``/``inf``. Display only:
    the verdict comes from the test at the bound itself."""
    grid = _RATIO_GRID
    rows = grid.size
    z = pair_contrasts(
        np.broadcast_to(off_stats, (rows, off_stats.size)).copy(),
        np.broadcast_to(on_stats, (rows, on_stats.size)).copy(),
        np.broadcast_to(valid, (rows, valid.size)).copy(),
        np.full(rows, baseline),
        grid,
    )
    wide = predictable_range(off_stats[None, :], valid[None, :], settings)
    paths = sequential_paths(z, settings, dependence_of=at_bound, ratio=grid,
                             safe_range=np.broadcast_to(wide, z.shape))
    last = np.maximum(paths.usable - 1, 0)
    has = paths.usable > 0
    excluded_above = has & np.take_along_axis(paths.safe, last[:, None], axis=1)[:, 0]
    excluded_below = has & np.take_along_axis(paths.unsafe, last[:, None], axis=1)[:, 0]
    # Rejecting "the ratio is at most r" rejects "at most r0" for every r0 < r (a hypothesis inside a
    # rejected one), and "at least r" every "at least r1" for r1 > r. The tests at the grid's points are
    # not monotone by themselves (their ranges and bets differ with r: one at 0.5 may keep what the
    # one at 1.1 rejected), and without this the interval read [-100%, ∞] beside a verdict that
    # rejected 'within 10%'.
    excluded_below = np.flip(np.logical_or.accumulate(np.flip(excluded_below)))
    excluded_above = np.logical_or.accumulate(excluded_above)
    kept = ~(excluded_above | excluded_below)
    if not kept.any():
        # The two tests' exclusions meet: the ratios between the lowest one the safe test rejects and
        # the highest the unsafe test rejects are where their boundaries cross.
        a = int(np.flatnonzero(excluded_above)[0])
        b = int(np.flatnonzero(excluded_below)[-1])
        lo_i, hi_i = min(a, b), max(a, b)
        return (-100.0 if lo_i == 0 else _to_pct(float(grid[lo_i])),
                math.inf if hi_i == rows - 1 else _to_pct(float(grid[hi_i])))
    idx = np.flatnonzero(kept)
    low = -100.0 if idx[0] == 0 else _to_pct(float(grid[idx[0]]))
    high = math.inf if idx[-1] == rows - 1 else _to_pct(float(grid[idx[-1]]))
    return (low, high)


def judge(
    pairs: Sequence[WindowPair],
    settings: JudgeSettings,
    *,
    budget_exhausted: bool,
    max_pairs: int | None = None,
    baseline_ms: Sequence[object] | None = None,
) -> Judgment:
    """Judge all window pairs so far (``baseline_ms``: the resident-alone window before them, which
    sets the first pair's scale; without it the first usable pair only sets the scale).

    A pair whose on-window the monitor marked stalled decides *unsafe* at once. A pair with a no-data
    window is skipped and counted: no data is neither a pass nor harm."""
    raw = dropped = no_data = stalled = 0
    offs: list[float] = []
    ons: list[float] = []
    ok: list[bool] = []
    for index, pair in enumerate(pairs):
        off = preprocess_window(pair.off_ms, settings)
        on = preprocess_window(pair.on_ms, settings)
        raw += off.raw_count + on.raw_count
        dropped += off.dropped_non_finite + off.dropped_outliers + on.dropped_non_finite + on.dropped_outliers
        for name, window in (("off", off), ("on", on)):
            if window.status == "error":
                return Judgment(
                    "error", None, None, settings.required_confidence, index + 1, raw,
                    f"pair {index} {name}-window: {window.reason}", dropped, no_data, stalled, "none",
                )
        if pair.on_stalled:
            stalled += 1
        usable = off.statistic_ms is not None and on.statistic_ms is not None
        if not usable and not pair.on_stalled:
            no_data += 1
        offs.append(off.statistic_ms if off.statistic_ms is not None else math.nan)
        ons.append(on.statistic_ms if on.statistic_ms is not None else math.nan)
        ok.append(usable)
    base = math.nan
    if baseline_ms is not None:
        clean = preprocess_window(baseline_ms, settings)
        if clean.statistic_ms is not None:
            base = clean.statistic_ms
    off_arr = np.array([offs], dtype=np.float64)
    on_arr = np.array([ons], dtype=np.float64)
    valid = np.array([ok], dtype=np.bool_)
    estimate = None
    if valid.any():
        estimate = _to_pct(float(on_arr[valid].sum() / off_arr[valid].sum()))
    conf = settings.required_confidence
    limit = settings.max_resident_slowdown_pct
    if stalled:
        return Judgment(
            "unsafe", estimate, None, conf, len(pairs), raw,
            f"the resident was stalled (requests outstanding past their timeout, or its SLO monitor) in "
            f"{stalled} canary-on window(s)", dropped, no_data, stalled, "stall",
        )
    z = pair_contrasts(off_arr, on_arr, valid, np.array([base]), settings.bound_ratio)
    tested = int(np.isfinite(z).sum())
    if tested == 0:
        label: JudgeLabel | None = "no-data" if budget_exhausted else None
        return Judgment(
            label, estimate, None, conf, len(pairs), raw,
            f"no usable window pair to test ({no_data} without data); no data is never a pass",
            dropped, no_data, stalled, "budget" if label else "none",
        )
    left = None
    if max_pairs is not None:
        left = np.array([[max(0, max_pairs - (i + 1)) for i in range(len(pairs))]], dtype=np.int64)
    wide = predictable_range(off_arr, valid, settings)
    paths = sequential_paths(z, settings, pairs_left_after=left, safe_range=wide)
    last = tested - 1
    is_safe = bool(paths.safe[0, last])
    is_unsafe = bool(paths.unsafe[0, last])
    is_futile = bool(paths.futile[0, last])
    out_of_range = int(paths.out_of_range[0, :tested].sum())
    lag1 = float(paths.lag1[0, last]) if tested >= 4 else None
    interval = confidence_interval(off_arr[0], on_arr[0], valid[0], base, settings, paths)
    span = f"[{interval[0]:.2f}%, {interval[1]:.2f}%]"
    of = "mean latencies" if settings.window_statistic == "mean" else "window medians"
    est = f"slowdown {estimate:.2f}% (ratio of {of}), {conf:.0%} interval {span}"
    notes = []
    if out_of_range:
        first = int(np.flatnonzero(paths.out_of_range[0])[0])
        at = float(np.take_along_axis(wide, paths.position, axis=1)[0, first])
        notes.append(f"{out_of_range} pair(s) beyond the range of {at:.3f} (no safe verdict after one)")
    if bool(paths.dependence_blocked[0, last]):
        tau_now = float(paths.autocorrelation_time[0, last])
        notes.append(f"pairs look dependent (integrated autocorrelation time {tau_now:.2f}, batch-means variance "
                     f"inflation {float(paths.inflation[0, last]):.2f}, lag-1 autocorrelation "
                     f"{lag1 if lag1 is not None else 0:.2f}): the safe side needs that much more evidence and "
                     f"{settings.min_safe_pairs} effective pairs ({tested / max(tau_now, 1.0):.1f} so far)")
    if tested < settings.min_safe_pairs and not is_unsafe:
        notes.append(f"a safe verdict needs {settings.min_safe_pairs} usable pairs (bursts in "
                     f"{settings.burst_rate_guarded:.0%} of windows seen with probability {conf:.0%})")
    if no_data:
        notes.append(f"{no_data} pair(s) without data skipped")
    if settings.prior is not None:
        notes.append(f"bets shaped by the prior slowdown {settings.prior.mean_pct:g}% ± {settings.prior.sd_pct:g}% "
                     "(the error bound does not depend on it)")
    rule: DecidingRule = "none"
    if is_unsafe:
        label, rule = "unsafe", "judge"
        reason = f"{est}: the test rejects 'within {limit:g}%' at {conf:.0%} after {tested} pair(s)"
    elif is_safe:
        label, rule = "safe", "judge"
        reason = f"{est}: the test rejects 'beyond {limit:g}%' at {conf:.0%} after {tested} pair(s)"
    elif budget_exhausted:
        label, rule = "inconclusive", "budget"
        reason = f"budget ended: {est}; neither side of the bound {limit:g}% settled after {tested} pair(s)"
    elif is_futile:
        label, rule = "inconclusive", "futility"
        reason = (f"{est}; the {max_pairs} pair(s) the budget allows could not settle the bound {limit:g}%: "
                  "stopped early to save exposure")
    else:
        label = None
        reason = f"{est}; the bound {limit:g}% is not settled after {tested} pair(s); continuing"
    if notes:
        reason += "; " + "; ".join(notes)
    finite = z[0][np.isfinite(z[0])]
    spread = float(np.std(finite, ddof=1)) if finite.size >= 2 else None
    return Judgment(
        label, estimate, interval, conf, len(pairs), raw, reason, dropped, no_data, stalled, rule,
        out_of_range, lag1, spread,
    )
