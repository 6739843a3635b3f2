"""The event-driven engine: workloads as flows of work whose speed changes only at events.

Between two events (a burst starts or ends, a request arrives or completes, a phase or a time slice
ends) the set of busy workloads is constant, so every workload progresses at a constant rate given
by :func:`canary.sim.model.busy_time_factors`. The engine jumps from event to event; it never
steps a fixed clock, so a long horizon costs events, not ticks.

Randomness: every flow owns a ``numpy.random.Generator`` seeded by the device's seed and the flow's
placement ordinal, so placing, removing and re-placing reproduces the same streams.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from canary.sim.model import Busy, ContentionParams, Traits, busy_time_factors, isolated_factor

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec

_EPS = 1e-12

# Noise: multiplicative, mean-preserving lognormal. Training steps vary a few percent from step to
# step; host-side gaps (data loading) vary more; a serving request's work varies with its input.
BUSY_NOISE_SIGMA = 0.03
IDLE_NOISE_SIGMA = 0.05
SERVICE_NOISE_SIGMA = 0.2

RegimeKind = Literal["timeslice", "concurrent"]


def _lognormal(rng: np.random.Generator, sigma: float) -> float:
    return float(math.exp(rng.normal(-0.5 * sigma * sigma, sigma)))


@dataclass
class Placement:
    """Where a flow sits: its SM cap and pool, and its MIG domain with that domain's bandwidth."""

    sm_cap: float = 1.0
    pool: str = "device"
    pool_capacity: float = 1.0
    domain: str = "device"
    bandwidth_fraction: float = 1.0


@dataclass
class WindowStats:
    """What a flow did inside the current window."""

    latencies_ms: list[float] = field(default_factory=list)
    completed: int = 0
    progress: float = 0.0  # batch: steps including the fraction of the current one
    busy_s: float = 0.0


class Flow:
    """One placed workload's state in the engine."""

    def __init__(
        self,
        key: str,
        traits: Traits,
        *,
        priority: int,
        placement: Placement,
        rng: np.random.Generator,
        now_s: float,
    ) -> None:
        self.key = key
        self.traits = traits
        self.priority = priority
        self.placement = placement
        self.rng = rng
        self.stats = WindowStats()
        self._busy_cache: dict[int, Busy] = {}
        self.phase_index = 0
        # batch state
        self.cycles_left = 0
        self.busy_left = 0.0
        self.idle_left = 0.0
        self.cycle_work = 0.0
        self.cycle_idle = 0.0
        # serving state
        self.queue: deque[tuple[float, float]] = deque()
        self.head_left = 0.0
        self.phase_left_s = traits.phases[0].duration_s
        self.next_arrival_s = math.inf
        if traits.kind == "batch":
            self._enter_phase(0)
        else:
            self._schedule_arrival(now_s)

    # -- phases -----------------------------------------------------------------------------
    def _enter_phase(self, index: int) -> None:
        self.phase_index = index % len(self.traits.phases)
        phase = self.traits.phases[self.phase_index]
        self.cycles_left = max(1, round(phase.duration_s / phase.cycle_s))
        self._start_cycle()

    def _start_cycle(self) -> None:
        phase = self.traits.phases[self.phase_index]
        self.cycle_work = phase.duty_cycle * phase.cycle_s * _lognormal(self.rng, BUSY_NOISE_SIGMA)
        self.cycle_idle = (1.0 - phase.duty_cycle) * phase.cycle_s * _lognormal(self.rng, IDLE_NOISE_SIGMA)
        self.busy_left = self.cycle_work
        self.idle_left = self.cycle_idle

    def _schedule_arrival(self, now_s: float) -> None:
        assert self.traits.request_rate_rps is not None
        rate = self.traits.request_rate_rps[self.phase_index]
        self.next_arrival_s = now_s + float(self.rng.exponential(1.0 / rate)) if rate > 0 else math.inf

    # -- state ------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        if self.traits.kind == "batch":
            return self.busy_left > _EPS
        return bool(self.queue)

    def as_busy(self) -> Busy:
        cached = self._busy_cache.get(self.phase_index)
        if cached is not None:
            return cached
        phase = self.traits.phases[self.phase_index]
        busy = Busy(
            key=self.key,
            sm_share=max(phase.sm_share, 1e-6),
            sm_cap=self.placement.sm_cap,
            pool=self.placement.pool,
            pool_capacity=self.placement.pool_capacity,
            bandwidth_fraction=self.placement.bandwidth_fraction,
            dram_intensity=phase.dram_intensity,
            kernel_time_us=self.traits.kernel_time_us,
            priority=self.priority,
            residency=self.traits.residency,
        )
        self._busy_cache[self.phase_index] = busy
        return busy

    def time_to_event(self, now_s: float, factor: float) -> float:
        if self.traits.kind == "batch":
            if self.busy_left > _EPS:
                return self.busy_left * factor
            return self.idle_left
        times = [self.next_arrival_s - now_s, self.phase_left_s]
        if self.queue:
            times.append(self.head_left * factor)
        return max(0.0, min(times))

    def advance(self, dt: float, factor: float) -> None:
        if self.traits.kind == "batch":
            if self.busy_left > _EPS:
                done = dt / factor if math.isfinite(factor) else 0.0
                self.busy_left = max(0.0, self.busy_left - done)
                self.stats.busy_s += dt
            else:
                self.idle_left = max(0.0, self.idle_left - dt)
            return
        self.phase_left_s -= dt
        if self.queue:
            self.stats.busy_s += dt
            if math.isfinite(factor):
                self.head_left = max(0.0, self.head_left - dt / factor)

    def settle(self, now_s: float) -> None:
        """Process every event due at ``now_s``."""
        if self.traits.kind == "batch":
            for _ in range(4):  # a zero-length idle gap may end a cycle and start the next at once
                if self.busy_left > _EPS:
                    return
                if self.idle_left > _EPS:
                    return
                self.stats.completed += 1
                self.stats.progress += 1.0
                self.cycles_left -= 1
                if self.cycles_left <= 0:
                    self._enter_phase(self.phase_index + 1)
                else:
                    self._start_cycle()
            return
        if self.queue and self.head_left <= _EPS:
            arrived, _ = self.queue.popleft()
            self.stats.latencies_ms.append((now_s - arrived) * 1000.0)
            self.stats.completed += 1
            if self.queue:
                self.head_left = self.queue[0][1]
        if self.next_arrival_s <= now_s + _EPS:
            assert self.traits.service_time_s is not None
            work = self.traits.service_time_s * _lognormal(self.rng, SERVICE_NOISE_SIGMA)
            self.queue.append((self.next_arrival_s, work))
            if len(self.queue) == 1:
                self.head_left = work
            self._schedule_arrival(self.next_arrival_s)
        if self.phase_left_s <= _EPS:
            self.phase_index = (self.phase_index + 1) % len(self.traits.phases)
            self.phase_left_s = self.traits.phases[self.phase_index].duration_s
            self._schedule_arrival(now_s)

    def cycle_fraction(self) -> float:
        """How far a batch flow is through its current step (0..1), for fractional throughput."""
        if self.traits.kind != "batch":
            return 0.0
        duty = self.traits.phases[self.phase_index].duty_cycle
        work_part = (1.0 - self.busy_left / self.cycle_work) if self.cycle_work > 0 else 1.0
        idle_part = (1.0 - self.idle_left / self.cycle_idle) if self.cycle_idle > 0 else 1.0
        if self.busy_left > _EPS:
            return duty * work_part
        return duty + (1.0 - duty) * idle_part


@dataclass
class TelemetryAccumulator:
    """Time integrals over a window; divided by the window length at the end."""

    any_kernel_s: float = 0.0
    sm_active_s: float = 0.0
    warps_s: float = 0.0
    dram_s: float = 0.0
    shared_memory_s: float = 0.0
    shared_memory_peak: float = 0.0


class Engine:
    """Runs flows on one device under one regime kind."""

    def __init__(self, spec: DeviceSpec, params: ContentionParams, kind: RegimeKind) -> None:
        self.spec = spec
        self.params = params
        self.kind = kind
        self.now_s = 0.0
        self.flows: dict[str, Flow] = {}
        self.telemetry = TelemetryAccumulator()
        self._memo: dict[tuple[tuple[str, int], ...], dict[str, float]] = {}
        # timeslice scheduler state
        self._owner: str | None = None
        self._last_owner: str | None = None
        self._slice_left_s = 0.0
        self._switch_left_s = 0.0

    def add(self, flow: Flow) -> None:
        self.flows[flow.key] = flow
        self._memo.clear()

    def remove(self, key: str) -> None:
        self.flows.pop(key, None)
        self._memo.clear()
        if self._owner == key:
            self._owner = None
            self._slice_left_s = 0.0

    # -- scheduling -------------------------------------------------------------------------
    def _timeslice_factors(self, busy: list[Flow]) -> dict[str, float]:
        keys = [f.key for f in busy]
        if self._owner not in keys:
            self._owner = None
        if self._owner is None and keys:
            self._pick_next(keys)
        elif self._owner is not None and self._slice_left_s <= _EPS:
            others = [k for k in keys if k != self._owner]
            if others:
                self._pick_next(keys)
            else:
                self._slice_left_s = self.params.timeslice_ms / 1000.0
        factors = {k: math.inf for k in keys}
        if self._owner is not None and self._switch_left_s <= _EPS:
            owner = self.flows[self._owner]
            factors[self._owner] = isolated_factor(owner.as_busy())
        return factors

    def _pick_next(self, busy_keys: list[str]) -> None:
        order = list(self.flows)
        start = (
            order.index(self._owner) + 1
            if self._owner in order
            else (order.index(self._last_owner) + 1 if self._last_owner in order else 0)
        )
        for i in range(len(order)):
            candidate = order[(start + i) % len(order)]
            if candidate in busy_keys:
                if candidate != self._last_owner and self._last_owner is not None:
                    self._switch_left_s = self.params.context_switch_us / 1e6
                self._owner = candidate
                self._last_owner = candidate
                self._slice_left_s = self.params.timeslice_ms / 1000.0
                return

    def _concurrent_factors(self, busy: list[Flow]) -> dict[str, float]:
        # The factors depend only on which flows are busy and in which phase: memoised, since a
        # long run revisits the same few combinations at every event.
        memo_key = tuple((f.key, f.phase_index) for f in busy)
        cached = self._memo.get(memo_key)
        if cached is not None:
            return cached
        factors = self._compute_concurrent_factors(busy)
        self._memo[memo_key] = factors
        return factors

    def _compute_concurrent_factors(self, busy: list[Flow]) -> dict[str, float]:
        by_domain: dict[str, list[Busy]] = {}
        for f in busy:
            by_domain.setdefault(f.placement.domain, []).append(f.as_busy())
        factors: dict[str, float] = {}
        for members in by_domain.values():
            factors.update(busy_time_factors(members, self.params, self.spec))
        return factors

    # -- running ----------------------------------------------------------------------------
    def run_until(self, end_s: float) -> None:
        while self.now_s < end_s - _EPS:
            busy = [f for f in self.flows.values() if f.busy]
            if self.kind == "timeslice":
                factors = self._timeslice_factors(busy)
            else:
                factors = self._concurrent_factors(busy)
            dt = end_s - self.now_s
            for f in self.flows.values():
                dt = min(dt, f.time_to_event(self.now_s, factors.get(f.key, 1.0)))
            if self.kind == "timeslice" and self._owner is not None:
                if self._switch_left_s > _EPS:
                    dt = min(dt, self._switch_left_s)
                else:
                    dt = min(dt, self._slice_left_s)
            dt = max(dt, 0.0)
            self._integrate(busy, factors, dt)
            for f in self.flows.values():
                f.advance(dt, factors.get(f.key, 1.0))
            if self.kind == "timeslice" and self._owner is not None:
                if self._switch_left_s > _EPS:
                    self._switch_left_s = max(0.0, self._switch_left_s - dt)
                else:
                    self._slice_left_s -= dt
            self.now_s += dt
            for f in list(self.flows.values()):
                f.settle(self.now_s)

    def _integrate(self, busy: list[Flow], factors: dict[str, float], dt: float) -> None:
        if dt <= 0:
            return
        running = [f for f in busy if math.isfinite(factors.get(f.key, math.inf))]
        t = self.telemetry
        if not running:
            return
        t.any_kernel_s += dt
        sm = 0.0
        warps = 0.0
        dram = 0.0
        smem = 0.0
        for f in running:
            b = f.as_busy()
            allotted = min(b.sm_share, b.sm_cap, b.pool_capacity)
            # NVML/DCGM "SM active": SMs with at least one resident warp, not block slots taken.
            covered = f.traits.sm_active_fraction if f.traits.sm_active_fraction is not None else b.sm_share
            sm += covered * allotted / max(b.sm_share, 1e-9)
            warps += allotted * f.traits.warp_occupancy
            dram += b.dram_intensity / factors[f.key]
            smem += allotted / max(b.sm_share, 1e-9) * f.traits.shared_memory_fraction
        t.sm_active_s += min(1.0, sm) * dt
        t.warps_s += min(1.0, warps) * dt
        t.dram_s += min(1.0, dram) * dt
        t.shared_memory_s += min(1.0, smem) * dt
        t.shared_memory_peak = max(t.shared_memory_peak, min(1.0, smem))
