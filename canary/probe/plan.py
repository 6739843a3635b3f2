"""How long a probe's windows are and how long its safe side must look, from what is known before the
candidate sends its first request. Pure: no IO, no clock.

Two facts decide it, both known once the baseline window (the resident alone) is measured:

- **what the resident gives per second** — completed requests (a latency monitor) or work done,
  partial steps included (a throughput monitor) — measured in the baseline, and
- **how the pair's load varies in time** — the phase lengths and duty cycles the two profiles declare
  (:class:`TimeStructure`).

The window is the shortest that holds enough of the resident's own events for a statistic
(:data:`TARGET_EVENTS_PER_WINDOW` requests, or :data:`STEPS_PER_WINDOW` steps of work), never below
:data:`MIN_WINDOW_S` and, while the policy's ``sampling_window_s`` holds enough events, never above it —
and never shorter than the resident's **declared cycle** when its phases differ in load: a window
shorter than the cycle measures which phase of it the window fell on (a burst, or the gap after one,
with no requests at all), not how fast the resident goes, and its pairs' contrasts are dominated by
that phase.

A latency resident queues: requests the candidate slowed are still waiting when the on-window ends, and
they are served — with the latency the candidate gave them — in whatever window comes next. So before
every off-window that follows an on-window the probe waits a **washout** of ``washout_s`` with the
candidate stopped, measured but never judged: long enough for that backlog to leave. It is one cycle of
a resident whose phases differ (a resident that keeps up alone has served its backlog by the end of its
cycle's quiet part) and at least :data:`WASHOUT_SOJOURNS` of the resident's p99 latency alone (a steady
resident's waiting requests leave within a few sojourn times). Without it the candidate's effect spills into the
off-windows and cancels the contrast (docs/canary.md, "Windows and washout"). A throughput resident's
work has no queue that outlives the window: no washout.

A resident whose window cannot fit ``min_windows`` pairs (with their washouts) into the time budget is
**unmeasurable**: the probe says so before the candidate starts (exposure 0).

The **coverage horizon** is how long the probe must have run before a *safe* verdict: long enough for
the on-windows to have met every declared phase of both workloads — :data:`COVERAGE_CYCLES` of the
longer declared cycle. Where either profile declares neither phases nor a duty cycle, nothing is known
about its time structure and the horizon is the one the policy's windows always implied
(``min_safe_pairs`` pairs of ``sampling_window_s`` windows). The judge's burst rule (``min_safe_pairs``
usable pairs) applies on top, whatever the window length: bursts in a fraction ``judge_burst_rate`` of
the windows are seen with probability ≥ the required confidence, and a shorter window sees a burst of a
given share of the *time* in at least that share of the windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canary.policy import RiskBudget
    from canary.profile import WorkloadProfile

#: Requests a latency window should hold on average: with Poisson arrivals at a mean of 12, a window
#: has fewer than the default ``min_samples_per_window`` (3) with probability 0.05%.
TARGET_EVENTS_PER_WINDOW = 12.0
#: Work a throughput window should hold, in the resident's steps at its baseline speed: a window
#: shorter than a step would measure where in its step the resident was, not how fast it goes.
STEPS_PER_WINDOW = 2.0
#: The shortest window, whatever the resident's rate.
MIN_WINDOW_S = 0.5
#: The washout before an off-window that follows an on-window is at least this many of the resident's
#: p99 latency alone: the requests waiting when the candidate stops leave within about one sojourn each,
#: behind the backlog the candidate left.
WASHOUT_SOJOURNS = 4.0
#: How many of the longer declared cycle the on-windows must have spanned before a safe verdict.
COVERAGE_CYCLES = 2.0
#: The most of the time budget the baseline may take while it waits for enough of the resident's events.
BASELINE_SHARE = 0.125
#: Longest pair relative to ``window_s`` (the schedule draws 0.75–1.25 × the window).
_LONGEST_WINDOW = 1.25


@dataclass(frozen=True, slots=True)
class TimeStructure:
    """What the two profiles declare about how their load varies in time.

    A cycle is the length of one repetition of the declared phases; ``0.0`` is a steady workload (a
    duty cycle and no phases: its variation is shorter than any window); ``None``: the profile declares
    neither phases nor a duty cycle, so its time structure is unknown."""

    candidate_cycle_s: float | None
    resident_cycle_s: float | None
    #: Whether the resident's declared phases differ in load. One phase repeated (or phases alike) is a
    #: steady load whatever its declared length: nothing in it for a window to average over.
    resident_phases_vary: bool = True

    @classmethod
    def of(cls, candidate: WorkloadProfile, resident: WorkloadProfile) -> TimeStructure:
        return cls(declared_cycle_s(candidate), declared_cycle_s(resident), phases_vary(resident))

    @property
    def resident_load_cycle_s(self) -> float | None:
        """The cycle over which the resident's load varies: its declared cycle when its phases differ,
        ``0.0`` when they do not (steady), ``None`` when unknown."""
        if self.resident_cycle_s is None:
            return None
        return self.resident_cycle_s if self.resident_phases_vary else 0.0

    @property
    def known(self) -> bool:
        return self.candidate_cycle_s is not None and self.resident_cycle_s is not None


def declared_cycle_s(profile: WorkloadProfile) -> float | None:
    """The length of the profile's declared phase cycle, ``0.0`` for a steady profile (duty cycle, no
    phases), ``None`` when it declares neither."""
    if profile.phases:
        return math.fsum(p.duration_s for p in profile.phases)
    if profile.duty_cycle is not None:
        return 0.0
    return None


def phases_vary(profile: WorkloadProfile) -> bool:
    """Whether the profile declares two or more phases of different load (duty cycle, DRAM intensity or
    SM share)."""
    loads = {(p.duty_cycle, p.dram_intensity, p.sm_share) for p in profile.phases}
    return len(loads) > 1


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """The probe's windows: ``window_s`` (each pair's windows are drawn from 0.75–1.25 × it),
    ``coverage_pairs`` (the pairs a safe verdict needs to span ``horizon_s``), the resident's event rate
    it was sized from, ``washout_s`` (the unjudged wait, candidate stopped, before an off-window that
    follows an on-window), ``safe_reachable`` (whether the time budget holds the pairs a safe verdict
    needs) and ``why`` — one sentence for the probe's transitions and the certificate."""

    window_s: float
    coverage_pairs: int
    horizon_s: float
    events_per_s: float
    throughput: bool
    why: str
    washout_s: float = 0.0
    #: Whether the time budget holds the pairs a safe verdict needs (the coverage horizon's and the burst
    #: rule's); ``False``: the probe can only find the pair unsafe.
    safe_reachable: bool = True

    @property
    def pair_s(self) -> float:
        """The most simulated or wall time one pair takes: its two longest windows and a washout."""
        return 2 * _LONGEST_WINDOW * self.window_s + self.washout_s


@dataclass(frozen=True, slots=True)
class Unmeasurable:
    """No window the budget allows holds a statistic of this resident: ``reason`` says why and what
    would make it measurable."""

    reason: str


def plan_windows(
    budget: RiskBudget,
    *,
    events: float,
    baseline_s: float,
    throughput: bool,
    min_samples_per_window: int,
    burst_pairs: int,
    structure: TimeStructure | None,
    time_left_s: float,
    latency_p99_ms: float | None = None,
) -> WindowPlan | Unmeasurable:
    """Size the probe's windows from the baseline: ``events`` completed requests (or, for a throughput
    monitor, steps of work, partial ones included) in ``baseline_s`` seconds of the resident alone.
    ``burst_pairs``: the pairs the judge's burst rule needs. ``time_left_s``: the time budget left.
    ``latency_p99_ms``: the resident's p99 latency alone in the baseline (a latency monitor), from which
    a steady resident's washout is sized."""
    unit = "steps of work" if throughput else "requests"
    if not events > 0:
        return Unmeasurable(
            f"the resident gave no usable {unit} in {baseline_s:g} s alone: no window can measure it; "
            "measurable would be a resident under load, or a monitor that reports "
            + ("work done within a step" if throughput else "request latencies")
        )
    rate = events / baseline_s
    if throughput:
        need_s = STEPS_PER_WINDOW / rate
        holds = f"{STEPS_PER_WINDOW:g} steps of work ({1 / rate:.3g} s a step alone)"
    else:
        target = max(TARGET_EVENTS_PER_WINDOW, 4.0 * min_samples_per_window)
        need_s = target / rate
        holds = f"{target:g} requests on average ({rate:.3g} requests/s alone)"
    window_s = max(need_s, MIN_WINDOW_S)
    if need_s <= budget.sampling_window_s:
        window_s = min(window_s, budget.sampling_window_s)
    cycle_s = structure.resident_load_cycle_s if structure is not None else None
    if cycle_s is not None and cycle_s > window_s:
        window_s = cycle_s
        # The window is longer than its event target asked: say what it holds at that length.
        holds = (f"{window_s * rate:.3g} steps of work ({1 / rate:.3g} s a step alone)"
                 if throughput else f"{window_s * rate:.3g} requests on average ({rate:.3g} requests/s alone)")
        holds += f", and span the resident's declared {cycle_s:.3g} s cycle"
    washout_s = 0.0
    washout_why = ""
    if not throughput:
        sojourns_s = WASHOUT_SOJOURNS * latency_p99_ms / 1000.0 if latency_p99_ms is not None else 0.0
        washout_s = max(cycle_s or 0.0, sojourns_s)
        if washout_s > 0:
            washout_why = (f"; a washout of {washout_s:.3g} s before each off-window that follows an on-window ("
                           + ("one declared cycle" if washout_s == cycle_s else
                              f"{WASHOUT_SOJOURNS:g} × the p99 latency alone, {latency_p99_ms:.3g} ms")
                           + ")")
    pair_s = 2 * _LONGEST_WINDOW * window_s + washout_s
    pairs_fit = int(time_left_s // pair_s)
    if pairs_fit < budget.min_windows:
        return Unmeasurable(
            f"a window must last {window_s:.3g} s to hold {holds}{washout_why}; the {time_left_s:.0f} s left of "
            f"the time budget hold {pairs_fit} pair(s), fewer than min_windows {budget.min_windows}: measurable "
            f"with max_probe_time_s of at least {budget.min_windows * pair_s + 1:.0f} s, or a "
            + ("monitor that reports work within a step" if throughput else "resident that serves more requests")
        )
    if structure is not None and structure.known:
        assert structure.candidate_cycle_s is not None and structure.resident_cycle_s is not None
        longest = max(structure.candidate_cycle_s, structure.resident_cycle_s)
        horizon_s = COVERAGE_CYCLES * longest
        horizon_why = (
            f"coverage {horizon_s:.3g} s ({COVERAGE_CYCLES:g} × the longer declared cycle, {longest:.3g} s)"
            if longest > 0
            else "both profiles declare steady load (no phases)"
        )
    else:
        horizon_s = burst_pairs * 2 * budget.sampling_window_s
        horizon_why = (
            f"coverage {horizon_s:.3g} s (a profile declares neither phases nor a duty cycle: the policy's "
            f"{burst_pairs} pairs of {budget.sampling_window_s:g} s)"
        )
    coverage_pairs = math.ceil(horizon_s / (2 * window_s)) if horizon_s > 0 else 0
    why = f"windows of {window_s:.3g} s hold {holds}{washout_why}; {horizon_why}"
    safe_pairs = max(coverage_pairs, burst_pairs)
    if safe_pairs > pairs_fit:
        needs = (f"the {coverage_pairs} the coverage needs" if coverage_pairs >= burst_pairs else
                 f"the {burst_pairs} usable pairs the burst rule needs (judge_burst_rate)")
        why += (f"; the budget holds {pairs_fit} pairs, fewer than {needs}: no safe verdict can be reached, "
                f"only an unsafe one (a safe verdict needs max_probe_time_s of at least "
                f"{math.ceil(safe_pairs * pair_s + baseline_s)} s)")
    return WindowPlan(window_s, coverage_pairs, horizon_s, rate, throughput, why, washout_s,
                      safe_reachable=safe_pairs <= pairs_fit)
