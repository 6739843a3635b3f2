"""The sequential judge: turns canary-off / canary-on windows of the resident's latency into a verdict.

Pure: no IO, no clock, no randomness. The orchestrator calls :func:`judge` after every window pair.

The pipeline, each step testable alone (knobs from the :class:`~canary.probe.budget.RiskBudget`):

1. :func:`preprocess_window` — NaN/inf samples are dropped and counted; a non-number or a negative
   latency makes the window an ``error`` (a broken monitor is never read as a pass); an optional
   outlier cut drops samples above ``outlier_factor`` × the window median; fewer than
   ``min_samples_per_window`` usable samples makes the window ``no-data``.
2. :func:`pair_statistic` — one number per window pair: ``log(stat(on) / stat(off))`` where ``stat``
   is the window mean (or median). Slowdown ``s`` in percent and the log-ratio ``x`` are linked by
   ``x = log(1 + s/100)``. The orchestrator interleaves the windows off/on, on/off, off/on, …
   (ABBA), so a linear drift of the baseline enters consecutive pairs with opposite signs and
   cancels in their mean.
3. :func:`update` / :func:`confidence_sequence` — an anytime-valid confidence sequence for the
   mean log-ratio ``μ``: the scale-invariant Gaussian mixture of Lai (1976), as analysed by Wang &
   Ramdas (2025):

   - T. L. Lai, "On confidence sequences", *Annals of Statistics* 4(2):265–280, 1976.
   - H. Wang and A. Ramdas, "Anytime-valid t-tests and confidence sequences for Gaussian means with
     unknown variance", *Sequential Analysis* 44(1), 2025 (arXiv:2310.03722).
   - Framework: S. R. Howard, A. Ramdas, J. McAuliffe, J. Sekhon, "Time-uniform, nonparametric,
     nonasymptotic confidence sequences", *Annals of Statistics* 49(2):1055–1080, 2021.

   For a candidate mean ``m`` let ``y_i = x_i − m``, ``A = Σ y_i²``, ``B = Σ y_i``. Mixing the
   likelihood ratio of the scale-invariant statistic over a standardised effect
   ``δ = (μ − m)/σ ~ N(0, 1/c)`` gives the test martingale (``M_1 = 1``)::

       M_n(m) = sqrt(c / (n + c)) · (A / (A − B² / (n + c)))^(n/2)

   which is a nonnegative martingale under ``μ = m`` whatever the unknown variance ``σ²``. By
   Ville's inequality ``P(∃ n: M_n(μ) ≥ 1/α) ≤ α``, so ``CS_n = {m : M_n(m) < 1/α}`` covers ``μ`` at
   every ``n`` simultaneously with probability ≥ ``1 − α``: the guarantee holds under continuous
   monitoring and optional stopping, which Kayenta's repeated fixed-horizon tests lack. Solving
   ``M_n(m) < 1/α`` in closed form: with ``K = (α⁻² (n + c)/c)^(1/n)``, ``q = 1 − 1/K`` and
   ``S = Σ (x_i − x̄)²``, ``CS_n = x̄ ± sqrt(S q / (n (n/(n + c) − q)))`` when ``n/(n + c) > q``,
   else the whole line.

   **Assumption, stated plainly**: the per-pair log-ratios are independent Gaussian with a common
   mean. Window means of tens of requests are close to Gaussian (central limit theorem), and the log
   of a ratio of two such means even more so; the benchmark (``benchmarks/judge.py``) measures the
   false-admit rate on the simulator, whose latencies are not Gaussian, against ``1 − confidence``.
4. :func:`classify` — ``unsafe`` when the whole interval lies above the slowdown bound, ``safe`` when
   it lies below, ``inconclusive`` when neither and the budget has ended — or earlier, for futility
   (:func:`futile`), when the pairs the budget still allows could not settle it even if the truth lay
   two standard errors further from the bound —, ``no-data`` when no usable pair exists, ``error``
   when a window was garbage. A false admit needs the sequence to miss ``μ``,
   so its probability is at most ``α = 1 − required_confidence`` at any stopping time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from canary.probe.budget import RiskBudget

JudgeLabel = Literal["safe", "unsafe", "inconclusive", "no-data", "error"]
WindowStatistic = Literal["mean", "median"]
WindowStatus = Literal["ok", "no-data", "error"]

# An interval endpoint is reported in percent; a log-ratio beyond this is reported as infinite.
_MAX_LOG_RATIO = 50.0


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """The judge's knobs, normally taken from a :class:`RiskBudget` (:meth:`from_budget`)."""

    max_resident_slowdown_pct: float
    required_confidence: float
    min_pairs: int = 2
    window_statistic: WindowStatistic = "mean"
    min_samples_per_window: int = 3
    outlier_factor: float | None = None
    mixture_precision: float = 0.5

    def __post_init__(self) -> None:
        if not self.max_resident_slowdown_pct > 0:
            raise ValueError("max_resident_slowdown_pct must be > 0")
        if not 0.5 < self.required_confidence < 1:
            raise ValueError("required_confidence must lie in (0.5, 1)")
        if self.min_pairs < 1 or self.min_samples_per_window < 1:
            raise ValueError("min_pairs and min_samples_per_window must be >= 1")
        if self.outlier_factor is not None and not self.outlier_factor > 1:
            raise ValueError("outlier_factor must be > 1")
        if not self.mixture_precision > 0:
            raise ValueError("mixture_precision must be > 0")

    @classmethod
    def from_budget(cls, budget: RiskBudget) -> JudgeSettings:
        return cls(
            max_resident_slowdown_pct=budget.max_resident_slowdown_pct,
            required_confidence=budget.required_confidence,
            min_pairs=budget.min_windows,
            window_statistic=budget.window_statistic,
            min_samples_per_window=budget.min_samples_per_window,
            outlier_factor=budget.outlier_factor,
            mixture_precision=budget.judge_mixture_precision,
        )

    @property
    def alpha(self) -> float:
        return 1.0 - self.required_confidence

    @property
    def bound_log_ratio(self) -> float:
        return math.log1p(self.max_resident_slowdown_pct / 100.0)


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
# 2. statistic per pair


@dataclass(frozen=True, slots=True)
class WindowPair:
    """Resident latencies (ms) in a canary-off window and the adjacent canary-on window."""

    off_ms: Sequence[object]
    on_ms: Sequence[object]


def pair_statistic(off: CleanWindow, on: CleanWindow) -> float | None:
    """``log(stat(on) / stat(off))``; ``None`` when either window has no usable statistic."""
    if off.statistic_ms is None or on.statistic_ms is None:
        return None
    return math.log(on.statistic_ms / off.statistic_ms)


# ---------------------------------------------------------------------------------------------
# 3. sequential update


@dataclass(frozen=True, slots=True)
class SequentialState:
    """Running count, mean and sum of squared deviations (Welford) of the pair statistics."""

    n: int = 0
    mean: float = 0.0
    sum_sq_dev: float = 0.0


def update(state: SequentialState, x: float) -> SequentialState:
    n = state.n + 1
    delta = x - state.mean
    mean = state.mean + delta / n
    return SequentialState(n, mean, state.sum_sq_dev + delta * (x - mean))


def confidence_sequence(state: SequentialState, alpha: float, precision: float) -> tuple[float, float]:
    """The time-uniform ``1 − alpha`` interval for the mean log-ratio after ``state.n`` pairs.

    Returns ``(-inf, inf)`` while the data cannot yet exclude anything (fewer than two pairs, or
    too few for the mixture to reach ``1/alpha``)."""
    n, c = state.n, precision
    if n < 2:
        return (-math.inf, math.inf)
    # K = (alpha^-2 (n + c)/c)^(1/n), computed in logs to stay finite for small alpha.
    log_k = (-2.0 * math.log(alpha) + math.log((n + c) / c)) / n
    q = -math.expm1(-log_k)  # 1 − 1/K
    room = n / (n + c) - q
    if room <= 0:
        return (-math.inf, math.inf)
    half = math.sqrt(max(state.sum_sq_dev, 0.0) * q / (n * room))
    return (state.mean - half, state.mean + half)


# ---------------------------------------------------------------------------------------------
# 4. classify


def classify(
    interval_log: tuple[float, float], bound_log: float, *, pairs: int, min_pairs: int, budget_exhausted: bool
) -> JudgeLabel | None:
    """``unsafe``/``safe`` when the interval clears the bound; ``inconclusive`` when the budget has
    ended without that; ``None`` while the probe should continue."""
    low, high = interval_log
    if pairs >= min_pairs:
        if low > bound_log:
            return "unsafe"
        if high < bound_log:
            return "safe"
    return "inconclusive" if budget_exhausted else None


# ---------------------------------------------------------------------------------------------
# the whole pipeline


@dataclass(frozen=True, slots=True)
class Judgment:
    """The judge's answer.

    ``label`` is ``None`` only from :func:`judge` with ``budget_exhausted=False`` when it wants more
    data (the orchestrator keeps probing); every final judgment has a label. ``estimate_pct`` and
    ``interval_pct`` are ``None`` when no usable pair exists; an interval endpoint is ``±inf`` while
    the data cannot bound it. ``confidence`` is the coverage the interval guarantees."""

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

    @property
    def decided(self) -> bool:
        return self.label is not None


def _to_pct(log_ratio: float) -> float:
    if log_ratio >= _MAX_LOG_RATIO:
        return math.inf
    if log_ratio <= -_MAX_LOG_RATIO:
        return -100.0
    return 100.0 * math.expm1(log_ratio)


def projected_half_width(state: SequentialState, n: int, alpha: float, precision: float) -> float:
    """The half-width the confidence sequence would have after ``n`` pairs if the spread of the pairs
    stays what it is now (``inf`` while that is still unbounded)."""
    if state.n < 2 or n < 2:
        return math.inf
    variance = state.sum_sq_dev / (state.n - 1)
    projected = SequentialState(n, state.mean, variance * (n - 1))
    low, high = confidence_sequence(projected, alpha, precision)
    return (high - low) / 2


def futile(state: SequentialState, settings: JudgeSettings, max_pairs: int) -> bool:
    """Whether the probe cannot reach a verdict within ``max_pairs`` even if the true mean lay two
    standard errors further from the bound than the estimate: then more windows only spend exposure.

    Stopping for futility ends *inconclusive*, never *safe*, so it cannot add a false admit: the
    coverage guarantee of the confidence sequence is untouched."""
    if state.n < max(2, settings.min_pairs) or max_pairs <= state.n:
        return False
    standard_error = math.sqrt(state.sum_sq_dev / (state.n - 1) / state.n)
    distance = abs(state.mean - settings.bound_log_ratio) + 2 * standard_error
    return distance < projected_half_width(state, max_pairs, settings.alpha, settings.mixture_precision)


def judge(
    pairs: Sequence[WindowPair], settings: JudgeSettings, *, budget_exhausted: bool, max_pairs: int | None = None
) -> Judgment:
    """Judge all window pairs so far.

    A pair whose on-window has not one usable sample while its off-window has enough is a *stall*: the
    resident served nothing with the canary on. That is evidence of harm, never a pass, so it makes
    the judgment ``unsafe`` at once. A pair where the off-window has no data is skipped and counted.
    """
    state = SequentialState()
    raw = 0
    dropped = 0
    no_data = 0
    stalled = 0
    for index, pair in enumerate(pairs):
        off = preprocess_window(pair.off_ms, settings)
        on = preprocess_window(pair.on_ms, settings)
        raw += off.raw_count + on.raw_count
        dropped += off.dropped_non_finite + off.dropped_outliers + on.dropped_non_finite + on.dropped_outliers
        for name, window in (("off", off), ("on", on)):
            if window.status == "error":
                return Judgment(
                    "error",
                    None,
                    None,
                    settings.required_confidence,
                    index + 1,
                    raw,
                    f"pair {index} {name}-window: {window.reason}",
                    dropped,
                    no_data,
                    stalled,
                )
        # Not one usable on-sample beside a full off-window: the resident stalled. (A few samples,
        # below the minimum, are only too little data: Poisson arrivals give that by chance.)
        if on.status == "no-data" and not on.values_ms and off.status == "ok":
            stalled += 1
            continue
        x = pair_statistic(off, on)
        if x is None:
            no_data += 1
            continue
        state = update(state, x)
    used = state.n
    if stalled:
        estimate = _to_pct(state.mean) if used else None
        return Judgment(
            "unsafe",
            estimate,
            None,
            settings.required_confidence,
            len(pairs),
            raw,
            f"the resident served no usable request in {stalled} canary-on window(s) "
            "while it did with the canary off",
            dropped,
            no_data,
            stalled,
        )
    if used == 0:
        # Without a usable pair the judge waits for more data; at the end it says no-data.
        label: JudgeLabel | None = "no-data" if budget_exhausted else None
        return Judgment(
            label,
            None,
            None,
            settings.required_confidence,
            len(pairs),
            raw,
            f"no usable window pair ({no_data} without data); no data is never a pass",
            dropped,
            no_data,
            stalled,
        )
    low, high = confidence_sequence(state, settings.alpha, settings.mixture_precision)
    bound = settings.bound_log_ratio
    label = classify(
        (low, high), bound, pairs=used, min_pairs=settings.min_pairs, budget_exhausted=budget_exhausted
    )
    stopped_for_futility = label is None and max_pairs is not None and futile(state, settings, max_pairs)
    if stopped_for_futility:
        label = "inconclusive"
    estimate = _to_pct(state.mean)
    interval = (_to_pct(low), _to_pct(high))
    limit = settings.max_resident_slowdown_pct
    conf = settings.required_confidence
    span = f"[{interval[0]:.2f}%, {interval[1]:.2f}%]"
    if label == "unsafe":
        reason = f"slowdown {span} at {conf:.0%} lies above the bound {limit:g}% after {used} pair(s)"
    elif label == "safe":
        reason = f"slowdown {span} at {conf:.0%} lies below the bound {limit:g}% after {used} pair(s)"
    elif label == "inconclusive" and stopped_for_futility:
        reason = (f"slowdown {span} at {conf:.0%} straddles the bound {limit:g}% after {used} pair(s), and the "
                  f"{max_pairs} pair(s) the budget allows could not settle it: stopped early to save exposure")
    elif label == "inconclusive":
        reason = f"budget ended with slowdown {span} at {conf:.0%} straddling the bound {limit:g}% after {used} pair(s)"
    else:
        reason = f"slowdown {span} straddles the bound {limit:g}% after {used} pair(s); continuing"
    if no_data:
        reason += f"; {no_data} pair(s) without data skipped"
    return Judgment(label, estimate, interval, conf, len(pairs), raw, reason, dropped, no_data, stalled)
