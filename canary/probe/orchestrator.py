"""The probe orchestrator: runs one bounded canary and always rolls it back.

States (each transition is recorded as ``(state, at, message)``)::

    PENDING → BASELINE → PROBING ⇄ JUDGING → DECIDED | ABORTED → ROLLED_BACK → RECORDED

- ``PENDING``: the candidate's process is created but held; the journal row is written (``running``,
  with owner, lease, pid and process group) **before** the candidate is let run.
- ``BASELINE``: one window of the resident alone; no data, garbage, or an SLO already breached
  aborts (no data is never a pass).
- ``PROBING``: canary-on and canary-off windows in pairs; pairs come in blocks of two ordered
  off/on, on/off or on/off, off/on by a coin seeded from the probe id, with window lengths drawn
  around ``sampling_window_s`` (:func:`~canary.probe.judge.pair_schedule`): a linear drift cancels
  inside a block and a periodic resident cannot alias with the schedule. Windows span the resident's
  declared cycle, and before every off-window that follows an on-window the probe waits the plan's
  washout (candidate stopped, measured, never judged) so that the backlog the candidate left is not
  counted as the resident's own (:mod:`canary.probe.plan`). Before every on-window the
  exposure left is computed; the executor gets an :class:`~canary.probe.interfaces.ExposureGate` and
  cannot send a request past it. An on-window whose resident p99 breaches the SLO, or whose slowdown
  against the slowest off-window so far (the baseline included) exceeds the guard (the on-window
  with at least ``slowdown_guard_min_samples`` samples), ends the candidate's load at once; when its
  pair is complete the breach is *unsafe* only if the attribution test over the whole probe pins
  it on the candidate (:mod:`canary.probe.attribution`), else the probe resumes. The judgment
  records which rule decided (``Judgment.rule``: judge, guard, slo, stall, futility, budget).
- ``JUDGING``: after each pair, the sequential judge (:mod:`canary.probe.judge`).
- ``DECIDED`` (safe / unsafe / inconclusive, also when the time or exposure budget ends) or
  ``ABORTED`` (start failure, garbage data, an executor or monitor error, cancellation).
- ``ROLLED_BACK``: rollback **always** runs — on success, failure, timeout, cancellation and Ctrl-C —
  shielded from cancellation, bounded by :data:`ROLLBACK_GRACE_S`, idempotent, and verified by the
  executor (its processes gone; memory back where the backend can tell).
- ``RECORDED``: the result is written to the journal (or the probe had none).

Time: the probe body runs under ``move_on_after(max_probe_time_s)`` (the deadline is a cancel scope);
rollback and journal writes take at most :data:`ROLLBACK_GRACE_S` more, so a probe's wall time is at
most ``max_probe_time_s + 2 s``. With the simulator, the budget is checked in simulated time (each
window advances the simulated clock) and ``time_used_s`` reports simulated seconds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import socket
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio

from canary.errors import ProbeError
from canary.policy import RiskBudget
from canary.probe.attribution import MAX_EXCESS, ExceedanceTally, attribute, excess
from canary.probe.interfaces import (
    Executor,
    ExposureGate,
    Journal,
    Monitor,
    RollbackReport,
    WindowSample,
)
from canary.probe.judge import (
    CleanWindow,
    DecidingRule,
    JudgeSettings,
    Judgment,
    SlowdownPrior,
    WindowPair,
    judge,
    pair_schedule,
    preprocess_window,
)
from canary.probe.plan import BASELINE_SHARE, TimeStructure, Unmeasurable, WindowPlan, plan_windows
from canary.quantiles import quantile

ProbeState = Literal[
    "PENDING", "BASELINE", "PROBING", "JUDGING", "DECIDED", "ABORTED", "ROLLED_BACK", "RECORDED"
]
Outcome = Literal["safe", "unsafe", "inconclusive", "aborted"]
#: Why the candidate never ran: the resident breaches its SLO alone ("not now"), or no window the
#: budget allows holds a statistic of it.
AbortCause = Literal["resident-over-slo", "unmeasurable"]

#: The transition table: from each state, the states it may go to.
TRANSITIONS: dict[ProbeState, frozenset[ProbeState]] = {
    "PENDING": frozenset({"BASELINE", "ABORTED"}),
    "BASELINE": frozenset({"PROBING", "ABORTED"}),
    "PROBING": frozenset({"JUDGING", "DECIDED", "ABORTED"}),
    "JUDGING": frozenset({"PROBING", "DECIDED", "ABORTED"}),
    "DECIDED": frozenset({"ROLLED_BACK"}),
    "ABORTED": frozenset({"ROLLED_BACK"}),
    "ROLLED_BACK": frozenset({"RECORDED"}),
    "RECORDED": frozenset(),
}

#: Time allowed after the deadline for rollback (incl. SIGTERM→SIGKILL), closing the monitor and the journal.
ROLLBACK_GRACE_S = 1.8
#: Default journal lease; a heartbeat renews it every third of it.
DEFAULT_LEASE_S = 15.0


class InvalidTransition(RuntimeError):
    """A transition the table does not allow: a bug in the orchestrator, never a user error."""


class RollbackFailed(ProbeError):
    """The candidate could not be proven gone after rollback. ``result`` holds the probe's result."""

    def __init__(self, message: str, result: ProbeResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True, slots=True)
class Transition:
    state: ProbeState
    at: dt.datetime
    message: str


@dataclass(frozen=True, slots=True)
class ProbeProgress:
    """A live view for progress displays. Estimate and interval are ``None`` until a pair is judged."""

    probe_id: str
    state: ProbeState
    time_used_s: float
    max_probe_time_s: float
    exposure_used: int
    max_requests_exposed: int
    windows: int
    estimate_pct: float | None
    interval_pct: tuple[float, float] | None
    simulated: bool


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe's result. Slowdown numbers are ``None`` when the judge had no usable pair; an interval
    endpoint may be ``±inf`` while the data could not bound it (the summary then omits the interval)."""

    probe_id: str
    outcome: Outcome
    state: ProbeState
    transitions: tuple[Transition, ...]
    judgment: Judgment | None
    slowdown_estimate_pct: float | None
    slowdown_interval_pct: tuple[float, float] | None
    confidence: float | None
    samples: int
    window_pairs: int
    exposure_used: int
    time_used_s: float
    wall_time_s: float
    windows: int
    rollback_reason: str
    rollback_verified: bool
    rollback_detail: str
    simulated: bool
    budget: RiskBudget
    abort_cause: AbortCause | None = None
    window_s: float | None = None
    window_plan: str | None = None
    attribution: str | None = None
    safe_reachable: bool | None = None

    @property
    def contrast_sd(self) -> float | None:
        """The judge's per-pair contrast spread (:attr:`canary.probe.judge.Judgment.contrast_sd`)."""
        sd = self.judgment.contrast_sd if self.judgment is not None else None
        return sd if sd is not None and math.isfinite(sd) else None

    def to_summary_dict(self) -> dict[str, Any]:
        """Fields of :class:`canary.certificate.ProbeSummary` (JSON-safe: no infinities)."""
        interval = self.slowdown_interval_pct
        if interval is not None and not all(math.isfinite(v) for v in interval):
            interval = None
        estimate = self.slowdown_estimate_pct
        if estimate is not None and not math.isfinite(estimate):
            estimate = None
        return {
            "probe_id": self.probe_id,
            "state": self.state,
            "outcome": self.outcome,
            "time_used_s": self.time_used_s,
            "exposure_used": self.exposure_used,
            "windows": self.windows,
            "rollback_reason": self.rollback_reason,
            "slowdown_estimate_pct": estimate,
            "slowdown_interval_pct": interval,
            "confidence": self.confidence,
            "simulated": self.simulated,
            "decided_by_rule": self.judgment.rule if self.judgment else None,
            "slowdown_estimand": (
                "ratio of the resident's mean latency with the candidate to without, minus 1"
                if self.budget.window_statistic == "mean"
                else "ratio of the resident's window-median latency with the candidate to without, minus 1"
            ),
            "budget": {
                k: v for k, v in self.budget.model_dump().items() if isinstance(v, int | float | bool)
            },
            "window_s": self.window_s,
            "window_plan": self.window_plan,
            "safe_reachable": self.safe_reachable,
            "contrast_sd": self.contrast_sd,
            "abort_cause": self.abort_cause,
            "attribution": self.attribution,
        }

    def to_json_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (the journal's ``result_json``)."""
        data = self.to_summary_dict()
        data["transitions"] = [[t.state, t.at.isoformat(), t.message] for t in self.transitions]
        data["rollback_verified"] = self.rollback_verified
        data["rollback_detail"] = self.rollback_detail
        data["samples"] = self.samples
        data["window_pairs"] = self.window_pairs
        data["wall_time_s"] = self.wall_time_s
        data["judgment_label"] = self.judgment.label if self.judgment else None
        data["judgment_reason"] = self.judgment.reason if self.judgment else None
        return data


class _Stop(Exception):
    """Ends the probe body early with a decision already recorded."""


@dataclass
class _Run:
    probe_id: str
    budget: RiskBudget
    executor: Executor
    monitor: Monitor
    journal: Journal | None
    key_json: dict[str, Any]
    owner: str
    progress: Callable[[ProbeProgress], None] | None
    slo_latency_p99_ms: float | None
    lease_s: float
    rollback_grace_s: float
    schedule_seed: int
    structure: TimeStructure | None = None
    prior: SlowdownPrior | None = None
    settings: JudgeSettings = field(init=False)
    state: ProbeState | None = None
    transitions: list[Transition] = field(default_factory=list)
    pairs: list[WindowPair] = field(default_factory=list)
    judgment: Judgment | None = None
    outcome: Outcome | None = None
    rollback_reason: str = ""
    exposure_used: int = 0
    windows: int = 0
    sim_time_s: float = 0.0
    t0: float = 0.0
    journaled: bool = False
    off_max_ms: float = 0.0
    off_windows: int = 0
    baseline_ms: tuple[object, ...] | None = None
    progress_error: str | None = None
    abort_cause: AbortCause | None = None
    window_s: float = 0.0
    plan: WindowPlan | None = None
    throughput: bool = False
    # Per rule in force, its pairs over the threshold and its wealth (canary.probe.attribution).
    tallies: dict[str, ExceedanceTally] = field(default_factory=dict)
    pauses: int = 0
    attribution: str | None = None

    def __post_init__(self) -> None:
        self.settings = JudgeSettings.from_budget(self.budget, prior=self.prior)
        self.window_s = self.budget.sampling_window_s

    @property
    def simulated(self) -> bool:
        return bool(self.executor.simulated and self.monitor.simulated)

    def time_used_s(self) -> float:
        return self.sim_time_s if self.simulated else anyio.current_time() - self.t0

    # -- states -------------------------------------------------------------------------------
    def go(self, state: ProbeState, message: str) -> None:
        if self.state is not None and state not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{self.state} → {state} is not allowed ({message})")
        if self.state is None and state != "PENDING":
            raise InvalidTransition(f"a probe starts in PENDING, not {state}")
        self.state = state
        self.transitions.append(Transition(state, dt.datetime.now(dt.UTC), message))
        self.report()

    def report(self) -> None:
        """Call the progress display. A display never decides a probe: when it raises (its terminal
        gone, a closed pipe), it is not called again, the probe goes on, and the failure is noted in
        the last transition when the probe is recorded."""
        if self.progress is None or self.state is None:
            return
        j = self.judgment
        try:
            self._call_progress(j)
        except Exception as exc:
            self.progress = None
            self.progress_error = f"progress display raised {type(exc).__name__}: {exc}"

    def _call_progress(self, j: Judgment | None) -> None:
        assert self.progress is not None and self.state is not None
        self.progress(
            ProbeProgress(
                probe_id=self.probe_id,
                state=self.state,
                time_used_s=self.time_used_s(),
                max_probe_time_s=self.budget.max_probe_time_s,
                exposure_used=self.exposure_used,
                max_requests_exposed=self.budget.max_requests_exposed,
                windows=self.windows,
                estimate_pct=j.estimate_pct if j else None,
                interval_pct=j.interval_pct if j else None,
                simulated=self.simulated,
            )
        )

    def decide(self, judgment: Judgment, why: str) -> None:
        self.judgment = judgment
        label = judgment.label
        if label == "error" or label is None:
            self.abort(f"judge error: {judgment.reason}")
            return
        self.outcome = "inconclusive" if label == "no-data" else label
        self.rollback_reason = why
        self.go("DECIDED", f"{label}: {judgment.reason}")

    def abort(self, why: str) -> None:
        if self.state in ("DECIDED", "ABORTED", "ROLLED_BACK", "RECORDED"):
            return
        self.outcome = "aborted"
        self.rollback_reason = why
        self.go("ABORTED", why)

    # -- the probe ------------------------------------------------------------------------------
    def max_pairs(self, window_s: float) -> int:
        """The window pairs this probe can still reach: the pairs so far plus those the time left and
        the exposure left allow at the exposure rate seen so far (for the judge's futility rule)."""
        done = len(self.pairs)
        washout_s = self.plan.washout_s if self.plan is not None else 0.0
        by_time = int((self.budget.max_probe_time_s - self.time_used_s()) // (2 * window_s + washout_s))
        left = self.budget.max_requests_exposed - self.exposure_used
        per_pair = self.exposure_used / done if done and self.exposure_used else 0.0
        by_exposure = int(left // per_pair) if per_pair > 0 else by_time
        return done + max(0, min(by_time, by_exposure))

    def time_left_for(self, duration_s: float) -> bool:
        return self.time_used_s() + duration_s <= self.budget.max_probe_time_s + 1e-9

    async def measure(self, kind: Literal["off", "on", "baseline", "washout"], duration_s: float) -> WindowSample:
        if kind != "on":
            sample = await self.monitor.measure(duration_s)
        else:
            gate = ExposureGate(self.budget.max_requests_exposed - self.exposure_used)
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(_drive, self.executor, duration_s, gate)
                    sample = await self.monitor.measure(duration_s)
                    tg.cancel_scope.cancel()
            finally:
                # Count what the gate granted, never what the executor reports.
                self.exposure_used += gate.used
        self.sim_time_s += duration_s
        self.windows += 1
        if self.journal is not None and self.journaled:
            self.journal.heartbeat(self.probe_id, self.lease_s)
        self.report()
        return sample

    async def heartbeat_loop(self) -> None:
        assert self.journal is not None
        while True:
            await anyio.sleep(self.lease_s / 3)
            self.journal.heartbeat(self.probe_id, self.lease_s)

    async def body(self, tg: anyio.abc.TaskGroup) -> None:
        candidate = await self.executor.prepare(self.probe_id)
        if self.journal is not None:
            pid, pgid = (candidate.pid, candidate.pgid) if candidate else (os.getpid(), 0)
            self.journal.start(
                self.probe_id,
                self.key_json,
                self.owner,
                self.lease_s,
                pid,
                pgid,
                self.budget.model_dump(mode="json"),
            )
            self.journaled = True
            tg.start_soon(self.heartbeat_loop)
        await self.monitor.open()
        self.go("BASELINE", "measuring the resident alone")
        base = await self.measure_baseline()
        self._add_off(base)
        self.rules_in_force()
        await self.executor.start()
        self.go("PROBING", f"candidate started; {self.plan.why if self.plan else ''}".rstrip("; "))
        window_s = self.window_s
        washout_s = self.plan.washout_s if self.plan is not None else 0.0
        seed = self.schedule_seed
        index = 0
        last: Literal["off", "on"] = "off"  # the baseline was the resident alone
        while True:
            pair_order, pair_s = pair_schedule(seed, index, window_s)
            order: tuple[Literal["off", "on"], ...] = ("off", "on") if pair_order == "off-on" else ("on", "off")
            got: dict[str, WindowSample] = {}
            breach: tuple[str, DecidingRule] | None = None
            for kind in order:
                wash = washout_s if kind == "off" and last == "on" else 0.0
                if not self.time_left_for(wash + pair_s):
                    return self.final_judgment("time budget spent", breach)
                if kind == "on" and self.exposure_used >= self.budget.max_requests_exposed:
                    return self.final_judgment("exposure budget spent")
                if wash > 0:
                    # The backlog the candidate left is served now, candidate stopped; never judged.
                    await self.measure("washout", wash)
                got[kind] = await self.measure(kind, pair_s)
                last = kind
                if kind == "on":
                    breach = self.breach(preprocess_window(got["on"].latencies_ms, self.settings))
            self.pairs.append(_pair(got["off"], got["on"]))
            off = preprocess_window(got["off"].latencies_ms, self.settings)
            self.tally(off, preprocess_window(got["on"].latencies_ms, self.settings))
            # The guard's reference grows only between pairs, as the judge's scale does.
            self._add_off(off)
            if breach is not None:
                self.settle(breach)
            index += 1
            self.go("JUDGING", f"pair {index}")
            j = judge(
                self.pairs,
                self.settings,
                budget_exhausted=False,
                max_pairs=self.max_pairs(window_s),
                baseline_ms=self.baseline_ms,
            )
            self.judgment = j
            if j.label == "error":
                self.abort(f"judge error: {j.reason}")
                raise _Stop
            if j.decided:
                self.decide(j, f"decided: {j.label}")
                return None
            self.go("PROBING", j.reason)

    async def measure_baseline(self) -> CleanWindow:
        """The resident alone, until it gave enough events to size the windows (at most
        ``BASELINE_SHARE`` of the time budget); then the SLO check and the window plan. Aborts — the
        candidate never started, exposure 0 — when the resident breaches its SLO alone or cannot be
        measured within the budget."""
        limit_s = max(self.budget.baseline_window_s, BASELINE_SHARE * self.budget.max_probe_time_s)
        step_s = self.budget.baseline_window_s
        spent_s = 0.0
        latencies: list[object] = []
        work: float | None = None
        while True:
            if not self.time_left_for(step_s):
                self.abort("the baseline window does not fit in the time budget")
                raise _Stop
            sample = await self.measure("baseline", step_s)
            spent_s += step_s
            if sample.work_units is not None:
                work = (work or 0.0) + sample.work_units
            else:
                latencies.extend(sample.latencies_ms)
            events = work if work is not None else float(len(latencies))
            need = 2.0 if work is not None else max(12.0, 4.0 * self.settings.min_samples_per_window)
            if events >= need or spent_s + step_s > limit_s + 1e-9:
                break
            step_s = min(2 * step_s, limit_s - spent_s)
        self.throughput = work is not None
        if work is not None:
            # A throughput window's statistic is one exact measurement of work over time.
            self.settings = replace(self.settings, min_samples_per_window=1)
            latencies = [1000.0 * spent_s / work] if work > 0 else []
        self.baseline_ms = tuple(latencies)
        base = preprocess_window(latencies, self.settings)
        if base.status == "error":
            self.abort(f"baseline: error: {base.reason}; no data is never a pass")
            raise _Stop
        events = work if work is not None else float(len(base.values_ms))
        planned = plan_windows(
            self.budget,
            events=events or 0.0,
            baseline_s=spent_s,
            throughput=self.throughput,
            min_samples_per_window=self.budget.min_samples_per_window,
            burst_pairs=self.settings.min_safe_pairs,
            structure=self.structure,
            time_left_s=self.budget.max_probe_time_s - self.time_used_s(),
            latency_p99_ms=None if self.throughput else quantile(base.values_ms, 0.99),
        )
        if isinstance(planned, Unmeasurable) or base.status != "ok":
            self.abort_cause = "unmeasurable"
            why = planned.reason if isinstance(planned, Unmeasurable) else f"baseline: {base.reason}"
            self.abort(f"unmeasurable: {why}; the candidate never started")
            raise _Stop
        if self.slo_latency_p99_ms is not None and not self.throughput:
            p99 = quantile(base.values_ms, 0.99)
            if p99 is not None and p99 > self.slo_latency_p99_ms:
                self.abort_cause = "resident-over-slo"
                self.abort(
                    f"the resident breaches its SLO alone: p99 {p99:.2f} ms > {self.slo_latency_p99_ms:g} ms over "
                    f"{spent_s:g} s before the candidate started (not now: the candidate never ran)"
                )
                raise _Stop
        self.plan = planned
        self.window_s = planned.window_s
        self.settings = replace(self.settings, coverage_pairs=planned.coverage_pairs)
        return base

    def _add_off(self, off: CleanWindow) -> None:
        if off.statistic_ms is not None:
            self.off_max_ms = max(self.off_max_ms, off.statistic_ms)
            self.off_windows += 1

    def rules_in_force(self) -> None:
        """The rules whose breaches may be attributed, fixed before the candidate starts: the guard
        always, the SLO rule for a latency resident with an SLO and rollback on breach."""
        self.tallies = {"guard": ExceedanceTally("guard")}
        if self.slo_in_force():
            self.tallies["slo"] = ExceedanceTally("slo")

    def slo_in_force(self) -> bool:
        return self.slo_latency_p99_ms is not None and self.budget.rollback_on_slo_violation and not self.throughput

    def guard_threshold_ms(self) -> float | None:
        """The guard's bound for the next pair: the guard over the slowest off-window so far."""
        if not self.off_windows:
            return None
        return self.off_max_ms * (1.0 + self.budget.effective_slowdown_guard_pct / 100.0)

    def breach(self, on: CleanWindow) -> tuple[str, DecidingRule] | None:
        """SLO breach or slowdown guard on one on-window: the reason and the rule, or ``None``. Either
        ends the candidate's load at once — the on-window is over and nothing more is sent until the
        breach is settled when its pair is complete (:meth:`settle`)."""
        if on.status == "ok" and self.slo_in_force():
            assert self.slo_latency_p99_ms is not None
            p99 = quantile(on.values_ms, 0.99)
            if p99 is not None and p99 > self.slo_latency_p99_ms:
                return (f"slo-breach: resident p99 {p99:.2f} ms > SLO {self.slo_latency_p99_ms:g} ms with the canary on",
                        "slo")
        enough = self.throughput or len(on.values_ms) >= self.budget.slowdown_guard_min_samples
        if on.statistic_ms is not None and enough and self.off_windows:
            slowdown_pct = 100.0 * (on.statistic_ms / self.off_max_ms - 1.0)
            guard_pct = self.budget.effective_slowdown_guard_pct
            if slowdown_pct > guard_pct:
                return f"slowdown-guard: one window {slowdown_pct:.1f}% slower > guard {guard_pct:g}%", "guard"
        return None

    def tally(self, off: CleanWindow, on: CleanWindow) -> None:
        """One complete pair into each rule's tally, against thresholds fixed before the pair (the
        guard's reference grows only after this)."""
        if off.status != "ok" or on.status != "ok":
            return
        if "slo" in self.tallies and self.slo_latency_p99_ms is not None:
            slo = self.slo_latency_p99_ms
            self.tallies["slo"] = self.tallies["slo"].add(on_over=_p99(on) > slo, off_over=_p99(off) > slo)
        bound = self.guard_threshold_ms()
        need = 0 if self.throughput else self.budget.slowdown_guard_min_samples
        if (bound is not None and on.statistic_ms is not None and off.statistic_ms is not None
                and min(len(on.values_ms), len(off.values_ms)) >= need):
            self.tallies["guard"] = self.tallies["guard"].add(on_over=on.statistic_ms > bound,
                                                              off_over=off.statistic_ms > bound)

    def settle(self, breach: tuple[str, DecidingRule]) -> None:
        """A breach, its pair complete and tallied: *unsafe* when the test attributes it to the
        candidate; else the probe resumes — until the breaches with the candidate outnumber those without
        by more than ``MAX_EXCESS``, then it ends inconclusive. An attributed SLO breach with a slowdown
        estimate within the bound is the resident's lack of headroom, not the pair's: inconclusive."""
        reason, rule = breach
        self.pauses += 1
        verdict = attribute(list(self.tallies.values()), level=self.settings.alpha)
        self.attribution = verdict.describe()
        if verdict.attributed:
            base = judge(self.pairs, self.settings, budget_exhausted=False, baseline_ms=self.baseline_ms)
            bound = self.budget.max_resident_slowdown_pct
            if rule == "slo" and base.estimate_pct is not None and base.estimate_pct < bound:
                # The candidate does push the resident over its SLO more often — but with a slowdown the
                # bound allows: the resident has no SLO headroom now. That is its state, not the pair's
                # property, so nothing unsafe is recorded against the pair: inconclusive, and why.
                why = (f"no SLO headroom: {reason}; {verdict.describe()}; the slowdown estimate "
                       f"{base.estimate_pct:.1f}% is within the {bound:g}% bound, so the resident is too close to "
                       "its SLO for any candidate now — nothing is recorded against the pair; ask again once the "
                       "resident has headroom")
                self.judgment = replace(base, label="inconclusive", rule=rule, reason=why)
                self.decide(self.judgment, why)
                raise _Stop
            j = Judgment(
                "unsafe",
                base.estimate_pct,
                base.interval_pct,
                self.settings.required_confidence,
                len(self.pairs),
                base.raw_samples,
                f"{reason}; {verdict.describe()}",
                rule=rule,
            )
            self.decide(j, reason)
            raise _Stop
        if excess(self.tallies.values()) > MAX_EXCESS:
            why = (f"{reason}; {verdict.describe()}; more than {MAX_EXCESS} pairs over a threshold only with the "
                   "candidate than only without it, not attributable yet: the probe ends")
            j = judge(self.pairs, self.settings, budget_exhausted=True, baseline_ms=self.baseline_ms)
            if j.label == "unsafe":
                # The judge's own test rejects 'within the bound' on the pairs so far: that decides, by
                # the judge's rule, and its reason leads; the unattributed breaches only ended the probe.
                self.judgment = replace(j, reason=f"{j.reason}; the probe ended here: {why}")
            else:
                self.judgment = replace(j, label="inconclusive", rule=rule, reason=why)
            self.decide(self.judgment, why)
            raise _Stop
        self.go("JUDGING", f"{reason}; {verdict.describe()}: not the candidate's, the probe resumes")
        self.go("PROBING", "resumed")

    def final_judgment(self, why: str, breach: tuple[str, DecidingRule] | None = None) -> None:
        """The judge's last word when a budget ends. A breach whose pair the budget left incomplete
        could not be settled: a *safe* then ends inconclusive (the breach stays unexplained)."""
        if self.state != "JUDGING":
            self.go("JUDGING", why)
        j = judge(self.pairs, self.settings, budget_exhausted=True, baseline_ms=self.baseline_ms)
        if j.label == "error":
            self.judgment = j
            self.abort(f"judge error: {j.reason}")
            return
        if breach is not None and j.label == "safe":
            reason, rule = breach
            why = f"{why} before the pair of a breach was complete ({reason}): not settled"
            j = replace(j, label="inconclusive", rule=rule, reason=why)
        self.decide(j, f"{why}: {j.label}")

    async def rollback(self) -> RollbackReport:
        """Shielded, bounded, always run; never raises (a failure is reported unverified)."""
        report = RollbackReport(False, f"rollback did not finish within {self.rollback_grace_s:g} s")
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.rollback_grace_s):
                try:
                    report = await self.executor.rollback()
                except Exception as exc:  # reported, never swallowed: the result says unverified and why
                    report = RollbackReport(False, f"rollback raised {type(exc).__name__}: {exc}")
                try:
                    await self.monitor.close()
                except Exception as exc:
                    report = replace(report, detail=f"{report.detail}; monitor close raised {exc!r}")
        return report

    def result(self, report: RollbackReport) -> ProbeResult:
        assert self.state is not None and self.outcome is not None
        j = self.judgment
        return ProbeResult(
            probe_id=self.probe_id,
            outcome=self.outcome,
            state=self.state,
            transitions=tuple(self.transitions),
            judgment=j,
            slowdown_estimate_pct=j.estimate_pct if j else None,
            slowdown_interval_pct=j.interval_pct if j else None,
            confidence=j.confidence if j and j.interval_pct is not None else None,
            samples=j.raw_samples if j else 0,
            window_pairs=len(self.pairs),
            exposure_used=self.exposure_used,
            time_used_s=self.time_used_s(),
            wall_time_s=anyio.current_time() - self.t0,
            windows=self.windows,
            rollback_reason=self.rollback_reason,
            rollback_verified=report.verified,
            rollback_detail=report.detail,
            simulated=self.simulated,
            budget=self.budget,
            abort_cause=self.abort_cause,
            window_s=self.window_s if self.plan is not None else None,
            window_plan=self.plan.why if self.plan is not None else None,
            attribution=self.attribution,
            safe_reachable=self.plan.safe_reachable if self.plan is not None else None,
        )

    def record(self, report: RollbackReport) -> ProbeResult:
        self.go("ROLLED_BACK", ("verified: " if report.verified else "NOT verified: ") + report.detail)
        if self.journal is not None and self.journaled:
            interim = self.result(report)
            state = (
                "failed" if not report.verified else ("aborted" if self.outcome == "aborted" else "recorded")
            )
            self.journal.finish(self.probe_id, state, interim.to_json_dict())
            self.go("RECORDED", f"journal: {state}")
        else:
            self.go("RECORDED", "no journal row to close" if self.journal is not None else "no journal")
        if self.progress_error is not None and self.progress_error not in self.rollback_reason:
            self.transitions[-1] = replace(
                self.transitions[-1], message=f"{self.transitions[-1].message}; {self.progress_error}"
            )
        return self.result(report)

    async def execute(self) -> ProbeResult:
        self.t0 = anyio.current_time()
        self.go("PENDING", f"probe {self.probe_id} by {self.owner}")
        try:
            with anyio.move_on_after(self.budget.max_probe_time_s) as deadline:
                async with anyio.create_task_group() as tg:
                    with contextlib.suppress(_Stop):
                        await self.body(tg)
                    tg.cancel_scope.cancel()
            if deadline.cancelled_caught and self.outcome is None:
                if self.state in ("PROBING", "JUDGING"):
                    self.final_judgment("deadline reached")
                else:
                    self.abort(f"deadline of {self.budget.max_probe_time_s:g} s reached in {self.state}")
        except Exception as exc:
            self.abort(f"error: {_describe(exc)}")
        except BaseException as exc:
            # Cancellation, Ctrl-C, SystemExit: roll back (shielded), record, and re-raise.
            self.abort(_interruption(exc))
            report = await self.rollback()
            with anyio.CancelScope(shield=True):
                self._record_quietly(report)
            raise
        if self.outcome is None:  # the body returned without deciding: a bug, reported as an abort
            self.abort("probe ended without a decision")
        report = await self.rollback()
        result = self.record(report)
        if not report.verified:
            raise RollbackFailed(f"probe {self.probe_id}: candidate not proven gone: {report.detail}", result)
        return result

    def _record_quietly(self, report: RollbackReport) -> None:
        # On cancellation the original exception must propagate; a journal failure here is secondary.
        try:
            self.record(report)
        except Exception:  # the journal row stays 'running'; recover() will close it
            return


async def _drive(
    executor: Executor, duration_s: float, gate: ExposureGate, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    await executor.drive(duration_s, gate, task_status=task_status)


def _p99(window: CleanWindow) -> float:
    value = quantile(window.values_ms, 0.99) if window.values_ms else None
    return value if value is not None else 0.0


def _pair(off: WindowSample, on: WindowSample) -> WindowPair:
    return WindowPair(off.latencies_ms, on.latencies_ms, on_stalled=on.stalled)


def _interruption(exc: BaseException) -> str:
    """Why a probe stopped when something outside it stopped it, in an operator's words (it was
    ``cancelled: CancelledError``). A signal usually reaches the probe as its task's cancellation, so
    the cancelled text names every cause; an interrupt raised in the probe itself says so."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGTERM): the candidate was stopped and rolled back"
    if isinstance(exc, SystemExit):
        return "the process exited: the candidate was stopped and rolled back"
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _interruption(exc.exceptions[0])
    return ("cancelled from outside the probe (Ctrl-C or SIGTERM to the job, a service shutting down, or a "
            "cancel request): the candidate was stopped and rolled back")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def run_probe(
    *,
    probe_id: str,
    budget: RiskBudget,
    executor: Executor,
    monitor: Monitor,
    journal: Journal | None = None,
    key_json: dict[str, Any] | None = None,
    owner: str | None = None,
    progress: Callable[[ProbeProgress], None] | None = None,
    slo_latency_p99_ms: float | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    rollback_grace_s: float = ROLLBACK_GRACE_S,
    schedule_seed: int | None = None,
    structure: TimeStructure | None = None,
    prior: SlowdownPrior | None = None,
) -> ProbeResult:
    """Run one bounded probe and return its result; the candidate is always rolled back.

    ``schedule_seed`` seeds the random pair order and window lengths (default: from ``probe_id``);
    a simulated probe passes its simulator seed so that a seeded run is reproducible.
    ``structure``: what the two profiles declare about their phases (:class:`~canary.probe.plan.TimeStructure`),
    from which the probe's coverage horizon is chosen; ``None``: unknown, the policy's horizon.
    ``prior``: what is predicted about the slowdown before the probe (:class:`~canary.probe.judge.SlowdownPrior`);
    it shapes the judge's bets, never its level (docs/judge-prior.md).

    Raises :class:`RollbackFailed` (a ``ProbeError``, exit 4) when the candidate could not be proven
    gone; cancellation and ``KeyboardInterrupt`` propagate after a shielded rollback."""
    if not probe_id:
        raise ValueError("probe_id must not be empty")
    if not 0 < rollback_grace_s <= 2.0:
        raise ValueError("rollback_grace_s must lie in (0, 2] s")
    run = _Run(
        probe_id=probe_id,
        budget=budget,
        executor=executor,
        monitor=monitor,
        journal=journal,
        key_json=dict(key_json or {}),
        owner=owner or default_owner(),
        progress=progress,
        slo_latency_p99_ms=slo_latency_p99_ms,
        lease_s=lease_s,
        rollback_grace_s=rollback_grace_s,
        schedule_seed=schedule_seed if schedule_seed is not None else zlib.crc32(probe_id.encode()),
        structure=structure,
        prior=prior,
    )
    return await run.execute()
