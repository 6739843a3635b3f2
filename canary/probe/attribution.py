"""Was a slow or SLO-breaching on-window the candidate's doing? Pure: no IO, no clock.

The SLO rule and the slowdown guard stop the candidate's load at once when one on-window breaches the
resident's SLO or is far slower than the resident's earlier windows. That protects the resident; it
is not yet evidence against the pair. A resident whose own p99 hovers at its SLO, or whose latency
swings with a period, breaches now and then with no candidate at all — and recording *unsafe* for
that refuses a safe pair.

So the window is **attributed** before anything is recorded. Every window of the probe is put on one
footing — its statistic, the p99 for the SLO rule and the window mean for the guard — and two exact
permutation tests ask whether the windows with the candidate stand out from the resident's own (the
baseline, the probe's off-windows, and windows measured after the candidate stopped). With ``n``
windows with the candidate and ``m`` without, ``N = n + m``:

- **over the threshold** (the SLO; the guard's bound over the slowest off-window when it fired): ``b``
  of the ``n`` and ``c`` of the ``m`` are over it; ``p = P(X ≥ b)`` for ``X ~ Hypergeometric(N, b + c,
  n)`` — breaches no likelier with the candidate than without (Fisher's exact test);
- **above all of the resident's own**: ``t`` windows with the candidate rank above every window
  without it; ``p = C(n, t) / C(N, t)``, the chance that the top ``t`` of ``N`` exchangeable windows all
  carry the candidate. This one sees how far over they are, which counting alone does not.

Under the null — the candidate changes nothing, so the windows are exchangeable (independent windows,
or the probe's random on/off schedule over a resident whose own variation does not follow the
candidate) — which windows carry the candidate is a random draw, and each ``p`` is exactly the
probability of an assignment at least this lopsided. The window is attributed when either ``p`` is at
most half the level (Bonferroni over the two).

A probe can pause several times (at most ``MAX_PAUSES + 1``); the orchestrator splits its error
budget evenly over them, so that the probability of any false *unsafe* from these rules in a probe is
at most α = 1 − required confidence under the null. A window that is not attributable lets the probe
resume; with the candidate truly at fault the next breach makes the counts lopsided fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The most of the time left at a pause that windows of the resident alone may take to attribute it.
ATTRIBUTION_SHARE = 0.25
#: Windows that must be left after a pause for the probe to resume (two pairs).
RESUME_WINDOWS = 4


def hypergeometric_sf(at_least: int, draws: int, successes: int, population: int) -> float:
    """``P(X ≥ at_least)`` for ``X ~ Hypergeometric(population, successes, draws)``, exactly."""
    if not 0 <= successes <= population or not 0 <= draws <= population:
        raise ValueError("hypergeometric parameters out of range")
    low = max(at_least, 0, draws + successes - population)
    high = min(draws, successes)
    if low > high:
        return 0.0
    total = math.comb(population, draws)
    hits = sum(math.comb(successes, k) * math.comb(population - successes, draws - k) for k in range(low, high + 1))
    return hits / total


def top_run_p(on_values: Sequence[float], off_values: Sequence[float]) -> tuple[int, float]:
    """``t``, the windows with the candidate above every window without it, and ``C(n, t) / C(N, t)``."""
    ceiling = max(off_values) if off_values else -math.inf
    t = sum(1 for v in on_values if v > ceiling)
    n, total = len(on_values), len(on_values) + len(off_values)
    return t, (math.comb(n, t) / math.comb(total, t)) if n else 1.0


@dataclass(frozen=True, slots=True)
class Attribution:
    """The tests' counts and answer. ``worth_measuring``: the windows of the resident alone still
    allowed could make the window attributable, were they all under the threshold and the rest."""

    attributed: bool
    worth_measuring: bool
    on_over: int
    on_windows: int
    off_over: int
    off_windows: int
    on_above_all: int
    p_over: float
    p_above: float
    level: float
    threshold: float

    @property
    def p_value(self) -> float:
        """The smaller p, Bonferroni-corrected for the two tests."""
        return min(1.0, 2 * min(self.p_over, self.p_above))

    def describe(self) -> str:
        verdict = "attributed to the candidate" if self.attributed else "not attributable to the candidate"
        return (
            f"{verdict}: {self.on_over} of {self.on_windows} windows with the candidate and {self.off_over} of "
            f"{self.off_windows} without it over {self.threshold:.4g} ms, {self.on_above_all} above all of the "
            f"resident's own (exact tests, p = {self.p_value:.3g}, level {self.level:.3g})"
        )


def attribute(
    on_values: Sequence[float],
    off_values: Sequence[float],
    threshold: float,
    *,
    level: float,
    more_windows_allowed: int,
) -> Attribution:
    """Test whether the windows with the candidate stand out from the resident's own windows.

    ``more_windows_allowed``: windows of the resident alone this pause may still measure (the
    orchestrator allows :data:`ATTRIBUTION_SHARE` of the time left when it paused)."""
    if not 0 < level < 1:
        raise ValueError("level must lie in (0, 1)")
    n, m = len(on_values), len(off_values)
    b = sum(1 for v in on_values if v > threshold)
    c = sum(1 for v in off_values if v > threshold)
    p_over = hypergeometric_sf(b, n, b + c, n + m) if n else 1.0
    t, p_above = top_run_p(on_values, off_values)
    attributed = n > 0 and min(p_over, p_above) <= level / 2
    allowed = max(more_windows_allowed, 0)
    if n:
        best_over = hypergeometric_sf(b, n, b + c, n + m + allowed)
        best_above = math.comb(n, t) / math.comb(n + m + allowed, t)
        best = min(best_over, best_above)
    else:
        best = 1.0
    return Attribution(
        attributed=attributed,
        worth_measuring=not attributed and allowed > 0 and best <= level / 2,
        on_over=b,
        on_windows=n,
        off_over=c,
        off_windows=m,
        on_above_all=t,
        p_over=p_over,
        p_above=p_above,
        level=level,
        threshold=threshold,
    )
