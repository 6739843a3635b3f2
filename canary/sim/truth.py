"""The ground truth of a pair with full knowledge: long-horizon runs alone and together.

Alone and shared runs use the same seed, so each workload draws the same random stream in both
(common random numbers): the difference between them is the contention, not the noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from canary.quantiles import quantile
from canary.sim.device import SimDevice

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import WorkloadProfile
    from canary.sim.model import ContentionParams


def slowdown_pct(alone: float | None, shared: float | None, *, higher_is_better: bool) -> float | None:
    """Percent slowdown from ``alone`` to ``shared`` (throughput: alone/shared − 1; latency:
    shared/alone − 1); ``None`` when either is unknown or zero, and ``inf`` when the shared
    throughput is zero (no progress at all)."""
    if alone is None or shared is None or alone <= 0:
        return None
    if higher_is_better:
        return float("inf") if shared <= 0 else (alone / shared - 1.0) * 100.0
    return (shared / alone - 1.0) * 100.0


@dataclass(frozen=True)
class PairTruth:
    """Slowdowns of a pair under one regime. Serving workloads are judged on mean latency
    (``*_slowdown_pct``) with p50/p99 alongside; batch workloads on throughput (steps/s), and
    their latency fields are ``None``."""

    regime: str
    duration_s: float
    seed: int
    resident_slowdown_pct: float | None
    resident_throughput_alone: float
    resident_throughput_shared: float
    resident_p50_ms_alone: float | None
    resident_p50_ms_shared: float | None
    resident_p99_ms_alone: float | None
    resident_p99_ms_shared: float | None
    resident_p99_slowdown_pct: float | None
    candidate_slowdown_pct: float | None
    candidate_throughput_alone: float
    candidate_throughput_shared: float
    candidate_p99_ms_alone: float | None
    candidate_p99_ms_shared: float | None


@dataclass(frozen=True)
class _Run:
    throughput: float
    latencies_ms: list[float]
    serving: bool

    def mean_ms(self) -> float | None:
        return float(np.mean(self.latencies_ms)) if self.latencies_ms else None


def _slowdown(alone: _Run, shared: _Run) -> float | None:
    if alone.serving:
        return slowdown_pct(alone.mean_ms(), shared.mean_ms(), higher_is_better=False)
    return slowdown_pct(alone.throughput, shared.throughput, higher_is_better=True)


def true_pair_slowdown(
    spec: DeviceSpec,
    resident: WorkloadProfile,
    candidate: WorkloadProfile,
    *,
    regime: str,
    seed: int,
    duration_s: float = 120.0,
    resident_rate_rps: float | None = None,
    candidate_rate_rps: float | None = None,
    resident_kernel_time_us: float | None = None,
    candidate_kernel_time_us: float | None = None,
    candidate_priority: int = 0,
    params: ContentionParams | None = None,
) -> PairTruth:
    """Run resident alone, candidate alone and both together for ``duration_s`` each (same seed,
    same regime) and compare. A candidate alone is placed with role ``candidate`` so it keeps the
    regime's limits (MPS cap, green partition, MIG instance): its slowdown is the contention only."""

    def run(with_resident: bool, with_candidate: bool) -> dict[str, _Run]:
        dev = SimDevice(spec, seed=seed, regime=regime, params=params)
        handles: dict[str, str] = {}
        # The resident is always placed first so it draws the same random stream alone and shared.
        if with_resident:
            handles["resident"] = dev.place(
                resident,
                role="resident",
                request_rate_rps=resident_rate_rps,
                kernel_time_us=resident_kernel_time_us,
            )
        else:
            dev._ordinal += 1  # keep the candidate's stream identical with and without the resident
        if with_candidate:
            handles["candidate"] = dev.place(
                candidate,
                role="candidate",
                priority=candidate_priority,
                request_rate_rps=candidate_rate_rps,
                kernel_time_us=candidate_kernel_time_us,
            )
        window = dev.run_window(duration_s)
        out: dict[str, _Run] = {}
        for who, h in handles.items():
            profile = resident if who == "resident" else candidate
            out[who] = _Run(
                throughput=window.throughput[h],
                latencies_ms=window.latencies_ms[h],
                serving=profile.workload_class == "online-inference",
            )
        return out

    r_alone = run(True, False)["resident"]
    c_alone = run(False, True)["candidate"]
    shared = run(True, True)
    r_shared, c_shared = shared["resident"], shared["candidate"]
    r_p99_alone = quantile(r_alone.latencies_ms, 0.99)
    r_p99_shared = quantile(r_shared.latencies_ms, 0.99)
    return PairTruth(
        regime=regime,
        duration_s=duration_s,
        seed=seed,
        resident_slowdown_pct=_slowdown(r_alone, r_shared),
        resident_throughput_alone=r_alone.throughput,
        resident_throughput_shared=r_shared.throughput,
        resident_p50_ms_alone=quantile(r_alone.latencies_ms, 0.5),
        resident_p50_ms_shared=quantile(r_shared.latencies_ms, 0.5),
        resident_p99_ms_alone=r_p99_alone,
        resident_p99_ms_shared=r_p99_shared,
        resident_p99_slowdown_pct=slowdown_pct(r_p99_alone, r_p99_shared, higher_is_better=False),
        candidate_slowdown_pct=_slowdown(c_alone, c_shared),
        candidate_throughput_alone=c_alone.throughput,
        candidate_throughput_shared=c_shared.throughput,
        candidate_p99_ms_alone=quantile(c_alone.latencies_ms, 0.99),
        candidate_p99_ms_shared=quantile(c_shared.latencies_ms, 0.99),
    )
