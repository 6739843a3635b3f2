"""The analytical estimator: the resident's slowdown from the two declared profiles alone.

Per busy phase of the resident, how much longer its work takes while the candidate is busy — time
slices, or SM oversubscription and DRAM demand beyond the device under concurrent regimes — weighted
by the candidate's duty cycle; a serving resident adds the queueing that longer service times cause
at the phase's load (M/D/1). The worst busy phase counts (for serving, a burst breaks the SLO;
for throughput it is the layer's rule as the benchmark has always scored it). This is the benchmark's no-probe "+phase/time structure" layer
(``canary.bench.policies.PlusPhases`` calls :func:`predicted_slowdown_pct`).

The model gives a point. Its interval before calibration is the point scaled by 1 ± ``REL_WIDTH``
plus ``ABS_WIDTH_PCT`` points each side: a stated prior width, which calibration on recorded outcomes
widens or keeps (docs/estimators.md). A pair with an unknown duty cycle or DRAM use has no estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary.estimate.base import Estimate, EstimateQuery, NoEstimate

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import WorkloadProfile
    from canary.regime import Regime

NAME = "analytical"
REL_WIDTH = 0.5
ABS_WIDTH_PCT = 2.0


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


def pair_slowdown_pct(candidate: WorkloadProfile, resident: WorkloadProfile, spec: DeviceSpec,
                      regime: Regime) -> float | None:
    """The resident's predicted slowdown next to the candidate (percent; ``inf`` when the resident's
    queue saturates), or ``None`` when either profile leaves duty cycle or DRAM use unknown."""
    if regime.kind == "mig":
        return 0.0
    cand = _loads(candidate, spec.sm_count)
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
    loads = _loads(resident, spec.sm_count)
    if loads is None:
        return None
    serving = resident.workload_class == "online-inference"
    worst = 0.0
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
    return worst


def predicted_slowdown_pct(candidate: WorkloadProfile, residents: list[WorkloadProfile | None], spec: DeviceSpec,
                           regime: Regime) -> float | None:
    """The worst predicted slowdown over the residents; ``None`` when a resident is unprofiled or a
    profile leaves duty cycle or DRAM use unknown (the benchmark's "+phase/time structure" layer)."""
    worst = 0.0
    for resident in residents:
        if resident is None:
            return None
        one = pair_slowdown_pct(candidate, resident, spec, regime)
        if one is None:
            return None
        worst = max(worst, one)
    return worst


class AnalyticalEstimator:
    """The profiles' phase/time structure as an estimator (module docstring)."""

    name = NAME

    def estimate(self, query: EstimateQuery) -> Estimate | NoEstimate:
        resident = query.resident.profile
        if resident is None:
            return NoEstimate(NAME, f"resident {query.resident.name} has no profile")
        point = pair_slowdown_pct(query.candidate, resident, query.spec, query.regime)
        if point is None:
            return NoEstimate(NAME, "a profile leaves its duty cycle or DRAM intensity unknown")
        if not math.isfinite(point):
            return NoEstimate(NAME, f"the model saturates resident {query.resident.name}'s queue (no finite slowdown)")
        half = REL_WIDTH * abs(point) + ABS_WIDTH_PCT
        inputs = ("candidate phases/duty cycle/DRAM intensity/SM share", "resident phases/duty cycle/DRAM intensity/SM share",
                  f"{query.spec.name} SM count", f"regime {query.regime}")
        return Estimate(NAME, point - half, point + half, point, inputs,
                        f"profiles' phase/time model: {point:.1f}% (prior width ±{half:.1f} points)")
