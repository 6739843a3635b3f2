"""The simulator's physics: what a workload asks of the device, and how co-runners slow it.

Pure: no IO, no clock, no randomness. Two halves:

- :func:`derive_traits` turns a :class:`~canary.profile.WorkloadProfile` into the numbers the
  simulator runs on (:class:`Traits`): SM share from the occupancy rules, DRAM intensity, duty
  cycle and phases, kernel granularity, serving service time.
- :func:`busy_time_factors` is the contention model: for the workloads busy at one instant, how many
  seconds each needs per second of work it would do alone on the whole device.

Units: a workload's *work* is measured in seconds it would take alone on the whole device, so a
factor of 2.0 means it progresses at half speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from canary.errors import InputError

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import KernelSpec, WorkloadProfile

Kind = Literal["serving", "batch"]

# The profile does not say how busy time is spread inside a long phase; the simulator cuts a phase
# into busy-then-idle cycles no longer than this, so a 60 s phase at 50% duty does not become one
# 30 s burst. A cycle is also the unit "step" for batch throughput.
MAX_CYCLE_S = 1.0

# Mean kernel duration where the profile gives none. Orion's V100 training traces
# (canary/sim/data/orion-kernels/*_fb1.csv) have mean kernel durations of 29-123 µs; 50 µs sits in
# that range. Only the ratio of two workloads' kernel durations matters (see serialization), so two
# workloads that both fall back to it are treated alike.
DEFAULT_KERNEL_TIME_US = 50.0

# Where a profile declares neither duty cycle nor phases, the workload is simulated as always busy:
# the worst case for its neighbours, never the optimistic one.
UNKNOWN_DUTY_CYCLE = 1.0
# Where neither the profile nor its kernels give a DRAM intensity: half memory-bound. Chosen as the
# middle of the range; the certificate never relies on it (the probe measures).
UNKNOWN_DRAM_INTENSITY = 0.5
# Resident warps per occupied SM where no kernel is declared (telemetry only).
UNKNOWN_WARP_OCCUPANCY = 0.5

# A serving profile without a request rate derives its service time from its latency SLO: the p99
# budget is this many service times (an M/D/1 queue at 60% load has p99 ≈ 4-5 service times).
SLO_SERVICE_TIMES = 5.0


@dataclass(frozen=True)
class ContentionParams:
    """The simulator's few global contention parameters.

    ``serialization_weight`` (0..1): when SMs are oversubscribed, how far kernels of different
    workloads run one after another at kernel granularity (1) rather than sharing SMs in proportion
    to demand (0). ``interference_per_share``: extra time per unit of co-runner SM share (L2,
    issue slots, scheduler) — 0.1 means a co-runner holding every SM costs 10%.
    ``dram_efficiency`` (0..1]: the fraction of peak DRAM bandwidth the device delivers when several
    workloads stream at once (row-buffer and bank conflicts). Fitted on Gavel (see
    ``canary.sim.calibration``); the three below are not fitted (no data) and are documented
    assumptions.

    ``timeslice_ms``: the driver's time slice between contexts (not documented by the vendor; 2 ms
    is an assumed order of magnitude). ``context_switch_us``: dead time at each switch (assumed). ``priority_wait_fraction``: how much of a lower-priority co-runner's kernel a
    higher-priority workload still waits for (its running blocks retire; its queued ones do not
    go first).
    """

    serialization_weight: float
    interference_per_share: float
    dram_efficiency: float
    timeslice_ms: float = 2.0
    context_switch_us: float = 25.0
    priority_wait_fraction: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 <= self.serialization_weight <= 1.0:
            raise ValueError("serialization_weight must be within [0, 1]")
        if self.interference_per_share < 0:
            raise ValueError("interference_per_share must be >= 0")
        if not 0.0 < self.dram_efficiency <= 1.0:
            raise ValueError("dram_efficiency must be within (0, 1]")
        if self.timeslice_ms <= 0 or self.context_switch_us < 0:
            raise ValueError("timeslice_ms must be > 0 and context_switch_us >= 0")
        if not 0.0 <= self.priority_wait_fraction <= 1.0:
            raise ValueError("priority_wait_fraction must be within [0, 1]")


@dataclass(frozen=True)
class KernelResidency:
    """What one kernel's blocks hold on each SM they occupy (from the occupancy rules)."""

    name: str
    blocks_per_sm: int
    registers_per_block: int
    shared_memory_per_block_bytes: int
    warps_per_block: int
    sm_share: float  # fraction of the device's block slots its grid takes (the residency share)
    sms_covered: float  # fraction of the device's SMs holding at least one of its blocks
    persistent: bool


@dataclass(frozen=True)
class PhaseTraits:
    """One phase as the simulator runs it: cycles of ``cycle_s`` with busy fraction ``duty_cycle``."""

    name: str
    duration_s: float
    cycle_s: float
    duty_cycle: float
    dram_intensity: float
    sm_share: float


@dataclass(frozen=True)
class Traits:
    """A workload as the simulator sees it. Shares are fractions of the whole device."""

    name: str
    kind: Kind
    phases: tuple[PhaseTraits, ...]
    kernel_time_us: float
    warp_occupancy: float  # resident warps / max warps on the SMs it occupies, while busy
    shared_memory_fraction: float  # of the device's shared memory its blocks hold while busy
    sm_active_fraction: float | None  # SMs with ≥1 resident warp while busy; None: the phase's sm_share
    residency: tuple[KernelResidency, ...]
    persistent: bool
    memory_bytes: int
    service_time_s: float | None = None  # serving: work per request (alone, whole device)
    request_rate_rps: tuple[float, ...] | None = None  # serving: arrival rate per phase
    assumptions: tuple[str, ...] = field(default=())

    @property
    def mean_duty_cycle(self) -> float:
        total = sum(p.duration_s for p in self.phases)
        return sum(p.duty_cycle * p.duration_s for p in self.phases) / total


def _kernel_residency(spec: DeviceSpec, kernel: KernelSpec) -> KernelResidency:
    from canary.occupancy import kernel_occupancy

    occ = kernel_occupancy(spec, kernel)
    if occ.active_blocks_per_sm < 1:
        raise InputError(
            f"kernel {kernel.name!r} cannot run on {spec.name}: not one block fits on an SM",
            field="kernels",
        )
    slots = occ.active_blocks_per_sm * spec.sm_count
    if kernel.grid_blocks is None:
        # An undeclared grid is taken to fill the device: the conservative reading for neighbours.
        share = 1.0
        blocks = occ.active_blocks_per_sm
    else:
        share = min(1.0, kernel.grid_blocks / slots)
        # Blocks spread over min(grid, SMs) SMs; each occupied SM holds at most the occupancy limit.
        blocks = min(occ.active_blocks_per_sm, math.ceil(kernel.grid_blocks / spec.sm_count))
    return KernelResidency(
        name=kernel.name,
        blocks_per_sm=blocks,
        registers_per_block=occ.allocated_registers_per_block,
        shared_memory_per_block_bytes=occ.allocated_shared_memory_per_block,
        warps_per_block=occ.warps_per_block,
        sm_share=share,
        sms_covered=1.0 if kernel.grid_blocks is None else min(1.0, kernel.grid_blocks / spec.sm_count),
        persistent=kernel.persistent,
    )


def _weights(kernels: tuple[KernelSpec, ...]) -> list[float]:
    """Time weights of the kernels: declared ``gpu_time_share``, the rest share what is left."""
    declared = sum(k.gpu_time_share for k in kernels if k.gpu_time_share is not None)
    undeclared = [k for k in kernels if k.gpu_time_share is None]
    rest = max(0.0, 1.0 - declared) / len(undeclared) if undeclared else 0.0
    weights = [k.gpu_time_share if k.gpu_time_share is not None else rest for k in kernels]
    total = sum(weights)
    if total <= 0:
        return [1.0 / len(kernels)] * len(kernels)
    return [w / total for w in weights]


def derive_traits(
    profile: WorkloadProfile,
    spec: DeviceSpec,
    *,
    request_rate_rps: float | None = None,
    kernel_time_us: float | None = None,
) -> Traits:
    """The simulator's view of ``profile`` on ``spec``.

    Unknown numbers are replaced by the documented assumptions above (each one is listed in
    ``Traits.assumptions``); a serving profile with neither a request rate nor a latency SLO raises
    :class:`InputError` because its load cannot be derived.
    """
    assumptions: list[str] = []
    residency: tuple[KernelResidency, ...] = ()
    warp_occupancy = UNKNOWN_WARP_OCCUPANCY
    shared_memory_fraction = 0.0
    sm_active_fraction: float | None = None
    kernel_sm_share: float | None = None
    kernel_dram: float | None = None
    if profile.kernels and spec.vendor == "nvidia":
        residency = tuple(_kernel_residency(spec, k) for k in profile.kernels)
        weights = _weights(profile.kernels)
        kernel_sm_share = sum(w * r.sm_share for w, r in zip(weights, residency, strict=True))
        warp_occupancy = sum(
            w * min(1.0, r.blocks_per_sm * r.warps_per_block / spec.max_warps_per_sm)
            for w, r in zip(weights, residency, strict=True)
        )
        sm_active_fraction = sum(w * r.sms_covered for w, r in zip(weights, residency, strict=True))
        # A persistent kernel holds its shared memory for the whole busy time, whatever its time
        # share; other kernels hold theirs only while they run.
        shared_memory_fraction = min(
            1.0,
            sum(
                (1.0 if r.persistent else w)
                * r.sm_share
                * min(
                    1.0, r.blocks_per_sm * r.shared_memory_per_block_bytes / spec.shared_memory_per_sm_bytes
                )
                for w, r in zip(weights, residency, strict=True)
            ),
        )
        drams = [(w, k.dram_intensity) for w, k in zip(weights, profile.kernels, strict=True)]
        known = [(w, d) for w, d in drams if d is not None]
        if known:
            kernel_dram = sum(w * d for w, d in known) / sum(w for w, _ in known)
    elif profile.kernels:
        assumptions.append(f"SM share of kernels on {spec.vendor} not modelled; phases or 1.0 used")
    persistent = any(r.persistent for r in residency)

    dram = profile.dram_intensity if profile.dram_intensity is not None else kernel_dram
    if dram is None and not profile.phases:
        dram = UNKNOWN_DRAM_INTENSITY
        assumptions.append(f"DRAM intensity unknown: assumed {UNKNOWN_DRAM_INTENSITY}")
    sm_default = kernel_sm_share
    if sm_default is None:
        sm_default = 1.0
        if not any(p.sm_share is not None for p in profile.phases):
            assumptions.append("SM share unknown: assumed the whole device")

    phases: list[PhaseTraits] = []
    if profile.phases:
        for phase in profile.phases:
            # A phase's own DRAM intensity wins when it was written; Phase defaults it to 0.0, which
            # here is read as "not said" and falls back to the profile's or the kernels'.
            if "dram_intensity" in phase.model_fields_set:
                phase_dram = phase.dram_intensity
            elif dram is not None:
                phase_dram = dram
            else:
                phase_dram = UNKNOWN_DRAM_INTENSITY
                if f"DRAM intensity unknown: assumed {UNKNOWN_DRAM_INTENSITY}" not in assumptions:
                    assumptions.append(f"DRAM intensity unknown: assumed {UNKNOWN_DRAM_INTENSITY}")
            phases.append(
                PhaseTraits(
                    name=phase.name,
                    duration_s=phase.duration_s,
                    cycle_s=min(phase.duration_s, MAX_CYCLE_S),
                    duty_cycle=phase.duty_cycle,
                    dram_intensity=phase_dram,
                    sm_share=phase.sm_share if phase.sm_share is not None else sm_default,
                )
            )
    else:
        duty = profile.duty_cycle
        if duty is None:
            duty = UNKNOWN_DUTY_CYCLE
            assumptions.append("duty cycle unknown: simulated as always busy")
        phases.append(
            PhaseTraits(
                name="steady",
                duration_s=MAX_CYCLE_S,
                cycle_s=MAX_CYCLE_S,
                duty_cycle=duty,
                dram_intensity=dram if dram is not None else UNKNOWN_DRAM_INTENSITY,
                sm_share=sm_default,
            )
        )

    if kernel_time_us is None:
        kernel_time_us = DEFAULT_KERNEL_TIME_US
        assumptions.append(f"kernel duration unknown: assumed {DEFAULT_KERNEL_TIME_US} µs")
    elif kernel_time_us <= 0:
        raise InputError("kernel_time_us must be positive", field="kernel_time_us")

    kind: Kind = "serving" if profile.workload_class == "online-inference" else "batch"
    service_time_s: float | None = None
    rates: tuple[float, ...] | None = None
    if kind == "serving":
        total = sum(p.duration_s for p in phases)
        mean_duty = sum(p.duty_cycle * p.duration_s for p in phases) / total
        slo_p99_ms = profile.slo.latency_p99_ms if profile.slo is not None else None
        if request_rate_rps is not None and request_rate_rps <= 0:
            raise InputError("request_rate_rps must be positive", field="request_rate_rps")
        # The service time is a property of the workload (from its SLO where it has one); a given
        # request rate only sets how often requests come, so a throttled canary sends fewer
        # requests of the same size rather than fewer, bigger ones.
        if slo_p99_ms is not None:
            service_time_s = slo_p99_ms / 1000.0 / SLO_SERVICE_TIMES
            assumptions.append(f"service time = SLO p99 / {SLO_SERVICE_TIMES:g}")
        elif request_rate_rps is not None and mean_duty > 0:
            service_time_s = mean_duty / request_rate_rps
            assumptions.append("service time = duty cycle / request rate (no latency SLO)")
        else:
            raise InputError(
                f"profile {profile.name}: an online-inference workload needs slo.latency_p99_ms, or a "
                "request rate and a non-zero duty cycle, to simulate its requests",
                field="slo.latency_p99_ms",
            )
        if request_rate_rps is None:
            rates = tuple(p.duty_cycle / service_time_s for p in phases)
        elif mean_duty > 0:
            # Phases keep their relative load: the rate scales with each phase's duty cycle.
            rates = tuple(request_rate_rps * p.duty_cycle / mean_duty for p in phases)
        else:
            rates = tuple(request_rate_rps for _ in phases)
    return Traits(
        name=profile.name,
        kind=kind,
        phases=tuple(phases),
        kernel_time_us=kernel_time_us,
        warp_occupancy=warp_occupancy,
        shared_memory_fraction=shared_memory_fraction,
        sm_active_fraction=sm_active_fraction,
        residency=residency,
        persistent=persistent,
        memory_bytes=profile.memory.peak_bytes,
        service_time_s=service_time_s,
        request_rate_rps=rates,
        assumptions=tuple(assumptions),
    )


@dataclass(frozen=True)
class Busy:
    """One busy workload at one instant, as the contention model needs it."""

    key: str
    sm_share: float  # demand, fraction of the whole device
    sm_cap: float  # the most SMs it may use (MPS %, green partition, MIG instance), fraction of device
    pool: str  # SMs are contended only within a pool (green partitions are disjoint pools)
    pool_capacity: float  # fraction of the device's SMs in this pool
    bandwidth_fraction: float  # fraction of the device's DRAM bandwidth its domain gets (MIG)
    dram_intensity: float
    kernel_time_us: float
    priority: int
    residency: tuple[KernelResidency, ...] = ()


def isolated_factor(b: Busy) -> float:
    """Time per unit of work alone in its regime (≥ 1 when its SMs or bandwidth are capped)."""
    allotted = min(b.sm_share, b.sm_cap, b.pool_capacity)
    compute = b.sm_share / allotted if allotted > 0 else math.inf
    memory = max(1.0, b.dram_intensity / b.bandwidth_fraction) if b.dram_intensity > 0 else 1.0
    return (1.0 - b.dram_intensity) * compute + b.dram_intensity * memory


def _fits_beside(
    spec: DeviceSpec, holder: tuple[KernelResidency, ...], guest: tuple[KernelResidency, ...]
) -> bool:
    """Whether one block of each guest kernel fits on an SM beside the holder's persistent blocks."""
    held = [r for r in holder if r.persistent]
    if not held or not guest:
        return True
    regs = sum(r.blocks_per_sm * r.registers_per_block for r in held)
    smem = sum(r.blocks_per_sm * r.shared_memory_per_block_bytes for r in held)
    warps = sum(r.blocks_per_sm * r.warps_per_block for r in held)
    blocks = sum(r.blocks_per_sm for r in held)
    for g in guest:
        if (
            regs + g.registers_per_block > spec.registers_per_sm
            or smem + g.shared_memory_per_block_bytes > spec.shared_memory_per_sm_bytes
            or warps + g.warps_per_block > spec.max_warps_per_sm
            or blocks + 1 > spec.max_blocks_per_sm
        ):
            return False
    return True


def blocked_by_persistent(spec: DeviceSpec, busy: list[Busy]) -> set[str]:
    """Workloads whose kernels cannot get a block onto any SM because a busy persistent kernel of
    another workload, covering every SM of their pool, leaves too little room (hard co-residency)."""
    blocked: set[str] = set()
    for holder in busy:
        if not any(r.persistent for r in holder.residency):
            continue
        covered = sum(r.sm_share for r in holder.residency if r.persistent)
        for guest in busy:
            if guest.key == holder.key or guest.pool != holder.pool:
                continue
            if covered >= holder.pool_capacity - 1e-9 and not _fits_beside(
                spec, holder.residency, guest.residency
            ):
                blocked.add(guest.key)
    return blocked


def busy_time_factors(
    busy: list[Busy], params: ContentionParams, spec: DeviceSpec | None = None
) -> dict[str, float]:
    """Seconds each busy workload needs per second of whole-device-alone work, while exactly these
    workloads are busy concurrently (streams, MPS, green contexts, or one MIG instance each).

    ``math.inf`` means the workload makes no progress now (its kernels cannot become resident).

    Equations (docs/simulator.md):

    - allotted SMs ``a_i = min(s_i, cap_i, pool)``; alone-inflation ``g_i = s_i / a_i``;
    - per pool, oversubscription ``A = Σ a_j`` over its busy members. If ``A > pool``:
      ``f_sm_i = (1-γ)·A/pool + γ·(1 + Σ_{j≠i} w_ij·o_ij·k_j/k_i)`` with overlap
      ``o_ij = min(1, (a_i + a_j - pool)/min(a_i, a_j))``, else ``f_sm_i = 1``; ``w_ij`` is 1 at equal
      priority, ``ρ`` (priority_wait_fraction) when i has the higher priority, ``2 − ρ`` when lower;
    - DRAM: ``D = Σ m_j`` over the domain; ``f_mem = max(1, D/(η·bw))`` when several are busy
      (``η`` = dram_efficiency), ``max(1, m_i/bw)`` alone;
    - interference ``f_int_i = 1 + α·Σ_{j≠i} a_j``;
    - ``t_i = ((1-m_i)·g_i·f_sm_i + m_i·f_mem)·f_int_i``.
    """
    if not busy:
        return {}
    blocked = blocked_by_persistent(spec, busy) if spec is not None else set()
    active = [b for b in busy if b.key not in blocked]
    allot = {b.key: min(b.sm_share, b.sm_cap, b.pool_capacity) for b in active}
    pools: dict[str, list[Busy]] = {}
    for b in active:
        pools.setdefault(b.pool, []).append(b)
    demand = sum(b.dram_intensity for b in active)
    bandwidth = min(b.bandwidth_fraction for b in active) if active else 1.0
    factors: dict[str, float] = {key: math.inf for key in blocked}
    gamma = params.serialization_weight
    for b in active:
        a_i = allot[b.key]
        g_i = b.sm_share / a_i if a_i > 0 else math.inf
        members = pools[b.pool]
        total = sum(allot[m.key] for m in members)
        f_sm = 1.0
        if total > b.pool_capacity + 1e-12 and len(members) > 1:
            serial = 1.0
            for other in members:
                if other.key == b.key:
                    continue
                a_j = allot[other.key]
                overlap = min(1.0, max(0.0, (a_i + a_j - b.pool_capacity) / max(1e-12, min(a_i, a_j))))
                # CUDA: a larger number is a lower priority. What the higher-priority workload no
                # longer waits for, the lower-priority one waits for in addition.
                if b.priority < other.priority:
                    wait = params.priority_wait_fraction
                elif b.priority > other.priority:
                    wait = 2.0 - params.priority_wait_fraction
                else:
                    wait = 1.0
                serial += wait * overlap * other.kernel_time_us / b.kernel_time_us
            f_sm = max(1.0, (1.0 - gamma) * total / b.pool_capacity + gamma * serial)
        if len(active) > 1:
            f_mem = max(1.0, demand / (params.dram_efficiency * bandwidth))
        else:
            f_mem = max(1.0, b.dram_intensity / b.bandwidth_fraction)
        co_share = sum(allot[o.key] for o in active if o.key != b.key)
        f_int = 1.0 + params.interference_per_share * co_share
        m_i = b.dram_intensity
        factors[b.key] = ((1.0 - m_i) * g_i * f_sm + m_i * f_mem) * f_int
    return factors
