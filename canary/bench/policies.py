"""The ablation: admission policies from utilisation-only to the full engine.

Each policy is a small class with ``decide(view) -> Decision``. A policy sees only what a real
scheduler would see (``ScenarioView``): window-averaged NVML/DCGM-style telemetry measured before
the candidate arrives, the snapshot with declared profiles, and — for the full engine — its own
probe samples. A missing counter or profile yields ``unknown``, never a pass.

Layers (each adds evidence to the one before):

1. ``UtilizationOnly``: admit below a GPU-utilisation threshold.
2. ``PlusMemory``: and only when the candidate's peak fits under the operator's memory ceiling.
3. ``PlusOccupancy``: and only below an SM-occupancy (DCGM) threshold.
4. ``PlusStaticResources``: stage 1 (``canary.hardfit.check``) decides what it can; the thresholds
   of layer 3 judge interference.
5. ``PlusPhases``: stage 1, then a phase-aware prediction of the resident's slowdown from the
   declared profiles replaces the average-utilisation thresholds.
6. ``FullEngine``: stage 1 → evidence cache → bounded canary on the simulator (``admit_async``).

Thresholds are either the operators' (``OPERATOR_UTIL_CEILING_PCT``, from the target ranges in the
seed documents: online inference 50–80%, batch 80–95%, training 90–100%, mixed 60–80% — a device
below the lower end of its resident's range is taken to have room) or tuned to their best value on
the suite by the runner.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from canary.bench.truth import INTERFERENCE, slowdown_bound_pct

if TYPE_CHECKING:
    from canary.admission import Request
    from canary.profile import WorkloadProfile
    from canary.snapshot import Telemetry

Verdict = Literal["admit", "reject", "unknown"]

OPERATOR_UTIL_CEILING_PCT: dict[str, float] = {"online-inference": 50.0, "batch": 80.0, "training": 90.0}
OPERATOR_MIXED_CEILING_PCT = 60.0  # a resident whose class is unknown: the "mixed" range
# Seed item 003: keep 5–10% of memory for the CUDA context and fragmentation; operators pack up to 90%.
OPERATOR_MEMORY_CEILING_PCT = 90.0


@dataclass(frozen=True)
class ScenarioView:
    """What a scheduler knows when the candidate asks. ``telemetry`` fields are ``None`` where the
    counter cannot be read; ``telemetry_window_s`` is the averaging window behind them."""

    scenario_id: str
    request: Request
    telemetry: Telemetry
    telemetry_window_s: float
    db_url: str
    seed: int
    clock: Callable[[], dt.datetime]


@dataclass(frozen=True)
class Decision:
    """A policy's answer. ``time_to_admission_s`` is simulated time (the telemetry window a
    threshold needs, or the probe's simulated seconds); ``exposure`` counts requests or launches
    the candidate served before the answer. ``error``: the policy failed on this scenario (the
    message), which the report lists; such a decision is neither a false admit nor a false reject."""

    verdict: Verdict
    limiting_resource: str | None
    time_to_admission_s: float
    exposure: int
    confidence: float | None = None
    decided_by: str = ""
    reason: str = ""
    error: str | None = None
    # For the engine's canary decisions: the rule that decided the probe (judge, guard, slo, stall,
    # futility, budget); for a cached decision "cache".
    rule: str | None = None
    # For the engine's canary decisions: the probe's summary (``ProbeSummary`` fields, JSON-ready,
    # without its random id), so the benchmark can say what decided and on which data.
    probe: dict[str, Any] | None = None


def _resident_ceiling(req: Request) -> float:
    """The operator's utilisation ceiling for the device: the strictest of its residents' classes."""
    ceilings = [OPERATOR_UTIL_CEILING_PCT[r.profile.workload_class] if r.profile is not None
                else OPERATOR_MIXED_CEILING_PCT for r in req.snapshot.residents]
    return min(ceilings) if ceilings else 100.0


def _memory_check(view: ScenarioView) -> Decision | None:
    """Reject when used + candidate peak exceeds the operator's ceiling; ``unknown`` when memory use is
    unknown; ``None`` when it fits."""
    snap = view.request.snapshot
    total, used = snap.memory_total_bytes, snap.memory_used_bytes
    if total is None or used is None:
        return Decision("unknown", "hbm", view.telemetry_window_s, 0, decided_by="memory",
                        reason="memory use not reported")
    need = view.request.candidate.memory.peak_bytes
    if used + need > total * OPERATOR_MEMORY_CEILING_PCT / 100:
        return Decision("reject", "hbm", view.telemetry_window_s, 0, decided_by="memory",
                        reason=f"used {used} + peak {need} bytes > {OPERATOR_MEMORY_CEILING_PCT:g}% of {total}")
    return None


def _threshold(view: ScenarioView, field: str, limit_pct: float, resource: str) -> Decision | None:
    measured = getattr(view.telemetry, field)
    if measured is None:
        return Decision("unknown", resource, view.telemetry_window_s, 0, decided_by=resource,
                        reason=f"{field} is not available")
    if measured.value >= limit_pct:
        return Decision("reject", resource, view.telemetry_window_s, 0, decided_by=resource,
                        reason=f"{field} {measured.value:.1f} >= {limit_pct:g}")
    return None


def _admit(view: ScenarioView, why: str) -> Decision:
    return Decision("admit", None, view.telemetry_window_s, 0, decided_by="threshold", reason=why)


class UtilizationOnly:
    """Admit while GPU utilisation is below a threshold (``None``: the operator's per-class ceiling)."""

    layer = "utilization"

    def __init__(self, util_pct: float | None = None) -> None:
        self.util_pct = util_pct

    @property
    def name(self) -> str:
        return f"util-only ({_label(self.util_pct)})"

    def _util_limit(self, view: ScenarioView) -> float:
        return self.util_pct if self.util_pct is not None else _resident_ceiling(view.request)

    def decide(self, view: ScenarioView) -> Decision:
        return _threshold(view, "utilization_gpu_pct", self._util_limit(view), "utilization") or _admit(
            view, "utilisation below threshold")


class PlusMemory(UtilizationOnly):
    layer = "memory"

    @property
    def name(self) -> str:
        return f"+memory ({_label(self.util_pct)})"

    def decide(self, view: ScenarioView) -> Decision:
        return _memory_check(view) or super().decide(view)


class PlusOccupancy(PlusMemory):
    """Also require DCGM SM occupancy below a threshold (``None``: the same operator ceiling)."""

    layer = "occupancy"

    def __init__(self, util_pct: float | None = None, occupancy_pct: float | None = None) -> None:
        super().__init__(util_pct)
        self.occupancy_pct = occupancy_pct

    @property
    def name(self) -> str:
        if self.util_pct is None and self.occupancy_pct is None:
            return "+occupancy (operator)"
        return f"+occupancy (tuned util<{_num(self.util_pct)}, occ<{_num(self.occupancy_pct)})"

    def interference_decision(self, view: ScenarioView) -> Decision:
        occ_limit = self.occupancy_pct if self.occupancy_pct is not None else _resident_ceiling(view.request)
        return (_threshold(view, "utilization_gpu_pct", self._util_limit(view), "utilization")
                or _threshold(view, "sm_occupancy_pct", occ_limit, "sm_occupancy")
                or _admit(view, "utilisation and occupancy below thresholds"))

    def decide(self, view: ScenarioView) -> Decision:
        return _memory_check(view) or self.interference_decision(view)


def stage1_decision(view: ScenarioView) -> Decision | None:
    """Stage 1's own decision (reject on a hard misfit, unknown when it cannot tell, admit on an
    empty device or into a MIG instance), or ``None`` when interference is left to judge."""
    from canary.hardfit import check

    req = view.request
    hard = check(req.snapshot, req.spec, req.candidate, req.policy, req.regime)
    lim = hard.limiting_finding
    if hard.verdict == "no":
        return Decision("reject", hard.limiting_resource, 0.0, 0, confidence=1.0, decided_by="hard-fit",
                        reason=lim.detail if lim else "")
    if hard.verdict == "unknown":
        return Decision("unknown", hard.limiting_resource, 0.0, 0, decided_by="hard-fit",
                        reason=lim.detail if lim else "")
    if not req.snapshot.residents or req.regime.kind == "mig":
        return Decision("admit", None, 0.0, 0, confidence=1.0, decided_by="hard-fit",
                        reason="fits; nothing shares the SMs")
    return None


class PlusStaticResources(PlusOccupancy):
    """Stage 1 (static kernel resources, HBM, MIG, MPS, compute mode), then layer 3's thresholds."""

    layer = "static"

    @property
    def name(self) -> str:
        return super().name.replace("+occupancy", "+static kernel resources")

    def decide(self, view: ScenarioView) -> Decision:
        return stage1_decision(view) or self.interference_decision(view)


@dataclass(frozen=True)
class _Load:
    duty: float
    dram: float
    sm_share: float
    seconds: float


def _sm_share(profile: WorkloadProfile, sm_count: int) -> float:
    """Fraction of SMs the profile's kernels cover (time-weighted), 1.0 without kernels."""
    if not profile.kernels:
        return 1.0
    shares = [min(1.0, (k.grid_blocks or sm_count) / sm_count) for k in profile.kernels]
    weights = [k.gpu_time_share if k.gpu_time_share is not None else 1.0 for k in profile.kernels]
    return sum(s * w for s, w in zip(shares, weights, strict=True)) / sum(weights)


def _kernel_dram(profile: WorkloadProfile) -> float | None:
    """DRAM intensity weighted over the declared kernels' GPU time; ``None`` when no kernel says."""
    known = [(k.gpu_time_share if k.gpu_time_share is not None else 1.0, k.dram_intensity)
             for k in profile.kernels if k.dram_intensity is not None]
    total = sum(w for w, _ in known)
    if not known or total <= 0:
        return None
    return sum(w * d for w, d in known if d is not None) / total


def _loads(profile: WorkloadProfile, sm_count: int) -> list[_Load] | None:
    """The declared phases (or one steady phase); ``None`` when duty cycle or DRAM use is unknown."""
    default_sm = _sm_share(profile, sm_count)
    if profile.phases:
        return [_Load(p.duty_cycle, profile.dram_intensity if profile.dram_intensity is not None else p.dram_intensity,
                      p.sm_share if p.sm_share is not None else default_sm, p.duration_s) for p in profile.phases]
    duty, dram = profile.effective_duty_cycle(), profile.effective_dram_intensity()
    if dram is None:
        dram = _kernel_dram(profile)
    if duty is None or dram is None:
        return None
    return [_Load(duty, dram, default_sm, 1.0)]


def _queue_factor(load: float) -> float:
    """Mean latency of an M/D/1 queue in service times; ``inf`` at or beyond saturation."""
    return math.inf if load >= 1.0 else 1.0 + load / (2.0 * (1.0 - load))


def predicted_slowdown_pct(req: Request) -> float | None:
    """The resident's slowdown predicted from declared phases: per busy phase, how much longer its
    work takes while the candidate is busy (time slices, or SM oversubscription and DRAM demand
    beyond the device under concurrent regimes), weighted by the candidate's duty cycle; serving
    residents add the queueing that longer service times cause at the phase's load. The worst
    phase counts for serving (a burst breaks the SLO), the busy-time average for throughput.
    ``None`` when a resident is unprofiled or its duty cycle or DRAM use is unknown."""
    spec, regime = req.spec, req.regime
    if regime.kind == "mig":
        return 0.0
    cand = _loads(req.candidate, spec.sm_count)
    if cand is None:
        return None
    c_total = sum(c.seconds for c in cand)
    c_duty = sum(c.duty * c.seconds for c in cand) / c_total
    c_dram = sum(c.dram * c.duty * c.seconds for c in cand) / max(1e-9, c_duty * c_total)
    c_sm = max(c.sm_share for c in cand)
    if regime.kind == "mps" and regime.mps_pct is not None:
        c_sm = min(c_sm, regime.mps_pct / 100)
    if regime.kind == "green" and regime.green_sms is not None:
        c_sm = min(c_sm, regime.green_sms / spec.sm_count)
    worst = 0.0
    for resident in req.snapshot.residents:
        weighted, busy_total = 0.0, 0.0
        if resident.profile is None:
            return None
        loads = _loads(resident.profile, spec.sm_count)
        if loads is None:
            return None
        serving = resident.profile.workload_class == "online-inference"
        for p in loads:
            if p.duty <= 0:
                continue
            if regime.kind == "timeslice":
                stretch = 1.0 + c_duty
            else:
                sm = max(1.0, p.sm_share + c_sm)
                dram = max(1.0, p.dram + c_dram)
                stretch = 1.0 + c_duty * ((1.0 - p.dram) * sm + p.dram * dram - 1.0)
            ratio = stretch * _queue_factor(p.duty * stretch) / _queue_factor(p.duty) if serving else stretch
            slowdown = (ratio - 1.0) * 100.0
            worst = max(worst, slowdown)
            weighted += slowdown * p.duty * p.seconds
            busy_total += p.duty * p.seconds
        if not serving and busy_total > 0:
            worst = max(worst, weighted / busy_total)
    return worst


class PlusPhases:
    """Stage 1, then the phase-aware slowdown prediction against the policy's bound."""

    layer = "phases"
    name = "+phase/time structure"

    def decide(self, view: ScenarioView) -> Decision:
        first = stage1_decision(view)
        if first is not None:
            return first
        req = view.request
        predicted = predicted_slowdown_pct(req)
        if predicted is None:
            return Decision("unknown", INTERFERENCE, 0.0, 0, decided_by="phases",
                            reason="a resident's phases or duty cycle are unknown")
        bound = min(slowdown_bound_pct(req.policy, r.profile) for r in req.snapshot.residents)
        if predicted > bound:
            return Decision("reject", INTERFERENCE, 0.0, 0, decided_by="phases",
                            reason=f"predicted resident slowdown {predicted:.1f}% > bound {bound:g}%")
        return Decision("admit", None, 0.0, 0, decided_by="phases",
                        reason=f"predicted resident slowdown {predicted:.1f}% <= bound {bound:g}%")


class FullEngine:
    """The engine itself: ``canary.admission.admit_async`` with the evidence cache and the canary
    on the simulator. Each admission's reservation is released afterwards so that scenarios do not
    book memory against each other."""

    layer = "engine"
    name = "+pairwise evidence (full engine)"

    def decide(self, view: ScenarioView) -> Decision:
        import anyio

        from canary.admission import admit_async

        async def go() -> Decision:
            cert = await admit_async(view.request, db_url=view.db_url, probe=True, seed=view.seed, now=view.clock)
            self._release(view, [r.id for r in cert.resource_reservations])
            probe = cert.probe if cert.decided_by == "canary" else None
            limiting = cert.limiting_resource
            if limiting is None and cert.verdict != "admit" and cert.decided_by in ("canary", "cache"):
                limiting = INTERFERENCE
            return Decision(
                cert.verdict, limiting,
                time_to_admission_s=probe.time_used_s if probe is not None else 0.0,
                exposure=probe.exposure_used if probe is not None else 0,
                confidence=cert.confidence, decided_by=cert.decided_by, reason=cert.reason,
                rule=(probe.decided_by_rule if probe is not None else ("cache" if cert.decided_by == "cache" else None)),
                probe=probe.model_dump(mode="json", exclude={"probe_id"}) if probe is not None else None)

        return anyio.run(go)

    @staticmethod
    def _release(view: ScenarioView, ids: list[str]) -> None:
        if not ids:
            return
        from evidence_store.engine import open_store, session_scope
        from evidence_store.reservations import release

        engine = open_store(view.db_url)
        try:
            with session_scope(engine) as session:
                for rid in ids:
                    release(session, rid, now=view.clock())
        finally:
            engine.dispose()


def _num(value: float | None) -> str:
    return "operator" if value is None else f"{value:g}%"


def _label(util_pct: float | None) -> str:
    return "operator" if util_pct is None else f"tuned util<{util_pct:g}%"

