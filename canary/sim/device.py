"""``SimDevice``: one simulated GPU shared by several workloads, driven window by window.

The probe's ``sim`` executor and monitor and the benchmark use exactly this API::

    dev = SimDevice(spec, seed=7, regime="mps:50")
    h = dev.place(profile, role="candidate", priority=1)
    w = dev.run_window(1.0)          # advances the simulated clock
    w.latencies_ms[h], w.throughput[h], w.requests_served[h], w.telemetry
    dev.remove(h)                    # idempotent

Priorities follow CUDA: a larger number is a *lower* priority (the canary runs at the larger one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from canary.errors import InputError, OperationalError
from canary.regime import Regime, free_mig_placement, parse_mig_instance, parse_regime
from canary.sim.engine import Engine, Flow, Placement, RegimeKind
from canary.sim.model import (
    DEFAULT_KERNEL_TIME_US,
    MAX_CYCLE_S,
    ContentionParams,
    PhaseTraits,
    Traits,
    derive_traits,
)
from canary.sim.params import CALIBRATED

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec, MigPlacement, MigProfile
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot, Telemetry

Role = Literal["resident", "candidate"]

# An unprofiled resident's load is unknown. The simulator still has to run *something*: a busy
# batch workload whose duty cycle and DRAM intensity are drawn (seeded) from these ranges, holding
# every SM while busy. The duty range is wide on purpose: its low end is where production serving
# pods sit (Alibaba GenAI trace, ../shared/data/alibaba-genai-2026/pod_gpu_duty_cycle_anon: per-pod
# mean duty cycle median 5.8%, 90th percentile 11.6%, over 143 pods); its high end is a busy
# training job. The probe must find out the real effect, which is the point of an unknown resident.
UNPROFILED_DUTY_RANGE = (0.05, 0.9)
UNPROFILED_DRAM_RANGE = (0.1, 0.7)


class SimOutOfMemory(OperationalError):
    """A placement's peak memory does not fit what is free (an explicit OOM, never silent)."""

    def __init__(self, name: str, requested_bytes: int, free_bytes: int, where: str) -> None:
        self.requested_bytes = requested_bytes
        self.free_bytes = free_bytes
        super().__init__(
            f"simulated out of memory placing {name!r} on {where}: needs {requested_bytes} bytes at peak, "
            f"{free_bytes} bytes free"
        )


class SimPlacementError(OperationalError):
    """The regime has no room for another workload (no free MIG instance of the profile)."""


def engine_kind(regime: Regime) -> RegimeKind:
    """How the engine shares SMs in ``regime``: time slices, or concurrent kernels (MPS, streams,
    MIG and green partitions cap each flow's share instead)."""
    return "timeslice" if regime.kind == "timeslice" else "concurrent"


def simulable_regime(regime: Regime | str, spec: DeviceSpec) -> Regime:
    """``regime`` (text goes through the one parser, :func:`canary.regime.parse_regime`), checked
    that the simulator can model it on ``spec``, the MIG profile under its catalog name;
    ``InputError`` names the problem."""
    if isinstance(regime, str):
        regime = parse_regime(regime, field="regime")
    if regime.kind == "mig":
        assert regime.mig_profile is not None
        profile = spec.mig_profile(regime.mig_profile)  # raises UnknownMigProfile (an InputError) listing valid names
        if profile.sm_count is None or profile.memory_bytes is None:
            raise InputError(
                f"regime {str(regime)!r}: the catalog does not know the SM count or memory of {profile.name} on "
                f"{spec.name}; the simulator cannot model it",
                field="regime",
            )
        return Regime("mig", mig_profile=profile.name)
    if regime.kind == "green":
        sms = regime.green_sms
        assert sms is not None
        if not 1 <= sms < spec.sm_count:
            raise InputError(f"regime {str(regime)!r}: a green-context partition needs 1..{spec.sm_count - 1} SMs",
                             field="regime")
        if spec.green_min_partition_sms is not None and sms < spec.green_min_partition_sms:
            raise InputError(
                f"regime {str(regime)!r}: {spec.name} partitions hold at least {spec.green_min_partition_sms} SMs",
                field="regime",
            )
        if spec.green_sm_alignment is not None and sms % spec.green_sm_alignment:
            raise InputError(
                f"regime {str(regime)!r}: {spec.name} partitions come in multiples of {spec.green_sm_alignment} SMs",
                field="regime",
            )
    return regime


@dataclass(frozen=True)
class SimWindow:
    """What happened in one window of simulated time.

    ``latencies_ms[h]``: per-request latencies of requests completed in the window (empty for
    batch workloads). ``throughput[h]``: steps/s (batch, fractional steps counted) or requests/s
    (serving). ``requests_served[h]``: requests completed (serving) or whole steps completed
    (batch). ``shared_memory_held_pct``: the simulator's ground truth of SM shared memory held by
    resident blocks (time average and peak) — no NVML counter reports it, which is the point.
    """

    start_s: float
    duration_s: float
    latencies_ms: dict[str, list[float]]
    throughput: dict[str, float]
    requests_served: dict[str, int]
    busy_pct: dict[str, float]
    telemetry: Telemetry
    memory_used_bytes: int
    shared_memory_held_pct: float
    shared_memory_held_peak_pct: float


@dataclass
class _Placed:
    handle: str
    name: str
    role: Role
    priority: int
    profile: WorkloadProfile | None
    traits: Traits | None
    memory_bytes: int
    domain: str
    mig_profile: str | None = None
    mig_placement: MigPlacement | None = None
    mps_pct: int | None = None
    green_sms: int | None = None
    assumptions: tuple[str, ...] = field(default=())


class SimDevice:
    """A simulated device of model ``spec`` under one sharing regime, with a seeded clock.

    Every placement gets its own random stream, seeded by ``seed`` and its placement ordinal, so a
    run is reproducible given the same sequence of calls.
    """

    def __init__(
        self,
        spec: DeviceSpec,
        *,
        seed: int,
        regime: Regime | str = "timeslice",
        params: ContentionParams | None = None,
    ) -> None:
        self.spec = spec
        self.seed = int(seed)
        self.regime = simulable_regime(regime, spec)
        self.params = params if params is not None else CALIBRATED
        self._engine = Engine(spec, self.params, engine_kind(self.regime))
        self._placed: dict[str, _Placed] = {}
        self._ordinal = 0
        self._unattributed_bytes = 0
        self._last_telemetry: Telemetry | None = None
        self._pending_mig_placement: MigPlacement | None = None

    # -- construction from a snapshot -------------------------------------------------------
    @classmethod
    def from_snapshot(
        cls,
        snapshot: DeviceSnapshot,
        spec: DeviceSpec,
        *,
        seed: int,
        regime: Regime | str = "timeslice",
        params: ContentionParams | None = None,
    ) -> SimDevice:
        """A device holding the snapshot's residents.

        Profiled residents are placed from their profiles. An unprofiled resident holds its observed
        memory and runs an unknown-but-simulated load (see ``UNPROFILED_*``). Memory the snapshot
        reports as used but no resident accounts for is held as unattributed (no load). A resident
        with neither a profile nor observed memory, on a snapshot whose ``memory_used_bytes`` is
        unknown, raises ``InputError``: its memory cannot be guessed.
        """
        dev = cls(spec, seed=seed, regime=regime, params=params)
        attributed = 0
        for i, resident in enumerate(snapshot.residents):
            if resident.profile is not None:
                h = dev.place(
                    resident.profile,
                    role="resident",
                    mps_active_thread_pct=resident.mps_active_thread_pct,
                    mig_instance_profile=resident.mig_instance,
                    name=resident.name,
                )
                attributed += dev._placed[h].memory_bytes
            else:
                if resident.observed_memory_bytes is None and snapshot.memory_used_bytes is None:
                    raise InputError(
                        f"resident {resident.name!r} has neither a profile nor observed memory, and the "
                        "snapshot's memory_used_bytes is unknown: the simulator cannot place it",
                        field=f"residents[{i}].observed_memory_bytes",
                    )
                memory = resident.observed_memory_bytes or 0
                dev._place_unprofiled(resident.name, memory, resident.mps_active_thread_pct)
                attributed += memory
        if snapshot.memory_used_bytes is not None and snapshot.memory_used_bytes > attributed:
            extra = snapshot.memory_used_bytes - attributed
            free = dev._free_bytes_device()
            if extra > free:
                raise SimOutOfMemory("unattributed memory", extra, free, spec.name)
            dev._unattributed_bytes = extra
        return dev

    # -- placement --------------------------------------------------------------------------
    def _next_rng(self) -> np.random.Generator:
        self._ordinal += 1
        return np.random.default_rng([self.seed, self._ordinal])

    def _capacity_bytes(self) -> int:
        return self.spec.memory_bytes - (self.spec.driver_reserve_bytes or 0)

    def _free_bytes_device(self) -> int:
        held = sum(p.memory_bytes for p in self._placed.values() if p.domain == "device")
        return self._capacity_bytes() - held - self._unattributed_bytes

    def _mig_domain(self, profile_name: str, handle: str) -> tuple[str, MigProfile, MigPlacement]:
        """``PROFILE`` takes the first free placement; ``PROFILE@START`` (as snapshots name an
        existing instance) takes exactly that one (:func:`canary.regime.free_mig_placement`)."""
        name, wanted = parse_mig_instance(profile_name)
        profile = self.spec.mig_profile(name)
        if wanted is not None and wanted not in {p.start for p in profile.placements}:
            raise SimPlacementError(f"{profile.name} cannot start at memory slice {wanted} on {self.spec.name}")
        same = [p for p in self._placed.values() if p.mig_profile == profile.name]
        taken = [p.mig_placement for p in self._placed.values() if p.mig_placement is not None]
        if len(same) < profile.max_instances:
            spot = free_mig_placement(profile, taken, start=wanted)
            if spot is not None:
                return f"mig:{profile.name}:{handle}", profile, spot
        raise SimPlacementError(
            f"no free placement for MIG profile {profile.name} on {self.spec.name} "
            f"({len(same)} of at most {profile.max_instances} instances exist; "
            f"memory slices taken: {sorted((t.start, t.size) for t in taken)})"
        )

    def _placement_for(
        self, role: Role, handle: str, mps_pct: int | None, mig_profile: str | None
    ) -> tuple[Placement, int, str, str | None]:
        """(placement, memory capacity of its domain, domain label, MIG profile name)."""
        r = self.regime
        sm_total = self.spec.sm_count
        if r.kind == "mig" or mig_profile is not None:
            name = mig_profile if mig_profile is not None else r.mig_profile
            assert name is not None
            domain, prof, spot = self._mig_domain(name, handle)
            self._pending_mig_placement = spot
            if prof.sm_count is None or prof.memory_bytes is None:
                raise InputError(
                    f"MIG profile {prof.name} on {self.spec.name} has unknown SMs or memory",
                    field="mig_instance",
                )
            share = prof.sm_count / sm_total
            slices = self.spec.mig_memory_slices or prof.memory_slices
            placement = Placement(
                sm_cap=share,
                pool=domain,
                pool_capacity=share,
                domain=domain,
                bandwidth_fraction=prof.memory_slices / slices,
            )
            return placement, prof.memory_bytes, domain, prof.name
        if r.kind == "green":
            assert r.green_sms is not None
            if role == "candidate":
                share = r.green_sms / sm_total
                return Placement(sm_cap=share, pool="green", pool_capacity=share), 0, "device", None
            rest = (sm_total - r.green_sms) / sm_total
            return Placement(sm_cap=rest, pool="rest", pool_capacity=rest), 0, "device", None
        cap = 1.0
        if r.kind == "mps":
            pct = mps_pct if mps_pct is not None else (r.mps_pct if role == "candidate" else None)
            cap = (pct or 100) / 100.0
        elif mps_pct is not None:
            cap = mps_pct / 100.0
        return Placement(sm_cap=cap), 0, "device", None

    def _register(
        self,
        *,
        name: str,
        role: Role,
        priority: int,
        profile: WorkloadProfile | None,
        traits: Traits,
        mps_pct: int | None,
        mig_profile: str | None,
    ) -> str:
        handle = f"{role}:{name}#{self._ordinal + 1}"
        self._pending_mig_placement = None
        placement, domain_capacity, domain, mig_name = self._placement_for(role, handle, mps_pct, mig_profile)
        if domain == "device":
            free = self._free_bytes_device()
            where = self.spec.name
        else:
            free = domain_capacity
            where = f"{self.spec.name} MIG {mig_name}"
        if traits.memory_bytes > free:
            raise SimOutOfMemory(name, traits.memory_bytes, free, where)
        rng = self._next_rng()
        flow = Flow(handle, traits, priority=priority, placement=placement, rng=rng, now_s=self._engine.now_s)
        self._engine.add(flow)
        self._placed[handle] = _Placed(
            handle=handle,
            name=name,
            role=role,
            priority=priority,
            profile=profile,
            traits=traits,
            memory_bytes=traits.memory_bytes,
            domain=domain,
            mig_profile=mig_name,
            mig_placement=self._pending_mig_placement,
            mps_pct=mps_pct
            if mps_pct is not None
            else (self.regime.mps_pct if role == "candidate" else None),
            green_sms=self.regime.green_sms if self.regime.kind == "green" and role == "candidate" else None,
            assumptions=traits.assumptions,
        )
        return handle

    def place(
        self,
        profile: WorkloadProfile,
        *,
        role: Role = "resident",
        priority: int = 0,
        request_rate_rps: float | None = None,
        kernel_time_us: float | None = None,
        mps_active_thread_pct: int | None = None,
        mig_instance_profile: str | None = None,
        name: str | None = None,
    ) -> str:
        """Place ``profile`` now and return its handle.

        Raises :class:`SimOutOfMemory` if its peak memory does not fit, :class:`SimPlacementError`
        if the regime has no room, ``InputError`` if the profile cannot be simulated (a serving
        profile without SLO or rate). A placed workload starts at the start of its first phase: no
        warm-up is simulated (profiles have no warm-up phase unless they declare one).
        """
        if role not in ("resident", "candidate"):
            raise InputError(f"role must be 'resident' or 'candidate', got {role!r}", field="role")
        traits = derive_traits(
            profile, self.spec, request_rate_rps=request_rate_rps, kernel_time_us=kernel_time_us
        )
        return self._register(
            name=name or profile.name,
            role=role,
            priority=priority,
            profile=profile,
            traits=traits,
            mps_pct=mps_active_thread_pct,
            mig_profile=mig_instance_profile,
        )

    def _place_unprofiled(self, name: str, memory_bytes: int, mps_pct: int | None) -> str:
        draw = np.random.default_rng([self.seed, 0, len(self._placed)])
        duty = float(draw.uniform(*UNPROFILED_DUTY_RANGE))
        dram = float(draw.uniform(*UNPROFILED_DRAM_RANGE))
        traits = Traits(
            name=name,
            kind="batch",
            phases=(
                PhaseTraits(
                    name="unknown",
                    duration_s=MAX_CYCLE_S,
                    cycle_s=0.1,
                    duty_cycle=duty,
                    dram_intensity=dram,
                    sm_share=1.0,
                ),
            ),
            kernel_time_us=DEFAULT_KERNEL_TIME_US,
            warp_occupancy=0.5,
            shared_memory_fraction=0.0,
            sm_active_fraction=None,
            residency=(),
            persistent=False,
            memory_bytes=memory_bytes,
            assumptions=(
                f"unprofiled: load unknown, simulated as duty cycle {duty:.2f}, DRAM intensity {dram:.2f}, "
                "every SM while busy",
            ),
        )
        return self._register(
            name=name,
            role="resident",
            priority=0,
            profile=None,
            traits=traits,
            mps_pct=mps_pct,
            mig_profile=None,
        )

    def remove(self, handle: str) -> None:
        """Remove a placement; removing one that is gone is a no-op."""
        self._placed.pop(handle, None)
        self._engine.remove(handle)

    def handles(self) -> list[str]:
        return list(self._placed)

    def assumptions(self) -> dict[str, tuple[str, ...]]:
        """Per handle, what the simulator assumed where the profile said nothing."""
        return {h: p.assumptions for h, p in self._placed.items()}

    @property
    def memory_used_bytes(self) -> int:
        return sum(p.memory_bytes for p in self._placed.values()) + self._unattributed_bytes

    @property
    def now_s(self) -> float:
        return self._engine.now_s

    # -- running ----------------------------------------------------------------------------
    def run_window(self, duration_s: float) -> SimWindow:
        """Advance the clock by ``duration_s`` and report what happened inside the window."""
        from canary.snapshot import Measured, Telemetry

        if not duration_s > 0 or not math.isfinite(duration_s):
            raise InputError(f"window duration must be a positive number of seconds, got {duration_s}")
        engine = self._engine
        start = engine.now_s
        start_fraction: dict[str, float] = {}
        for key, flow in engine.flows.items():
            flow.stats = type(flow.stats)()
            start_fraction[key] = flow.cycle_fraction()
        engine.telemetry = type(engine.telemetry)()
        engine.run_until(start + duration_s)
        latencies: dict[str, list[float]] = {}
        throughput: dict[str, float] = {}
        served: dict[str, int] = {}
        busy: dict[str, float] = {}
        for key, flow in engine.flows.items():
            latencies[key] = list(flow.stats.latencies_ms)
            served[key] = flow.stats.completed
            busy[key] = 100.0 * flow.stats.busy_s / duration_s
            if flow.traits.kind == "batch":
                steps = flow.stats.progress + flow.cycle_fraction() - start_fraction[key]
                throughput[key] = steps / duration_s
            else:
                throughput[key] = flow.stats.completed / duration_s
        acc = engine.telemetry

        def measured(fraction: float) -> Measured:
            return Measured(value=round(100.0 * fraction, 6), window_s=duration_s, source="simulated")

        telemetry = Telemetry(
            utilization_gpu_pct=measured(acc.any_kernel_s / duration_s),
            sm_active_pct=measured(acc.sm_active_s / duration_s),
            sm_occupancy_pct=measured(acc.warps_s / duration_s),
            dram_active_pct=measured(acc.dram_s / duration_s),
        )
        self._last_telemetry = telemetry
        return SimWindow(
            start_s=start,
            duration_s=duration_s,
            latencies_ms=latencies,
            throughput=throughput,
            requests_served=served,
            busy_pct=busy,
            telemetry=telemetry,
            memory_used_bytes=self.memory_used_bytes,
            shared_memory_held_pct=100.0 * acc.shared_memory_s / duration_s,
            shared_memory_held_peak_pct=100.0 * acc.shared_memory_peak,
        )

    def snapshot(self) -> DeviceSnapshot:
        """The device as a backend would report it: source ``simulated``, residents with profiles
        (unprofiled ones keep only their observed memory) named as placed (the handle where two
        share a name), telemetry of the last window (none before the first window: unknown)."""
        from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState, Resident, Telemetry

        names = [p.name for p in self._placed.values()]
        residents = tuple(
            Resident(
                # The placement's own name where it is unique (a snapshot round-trips), else the handle.
                name=p.name if names.count(p.name) == 1 else p.handle,
                profile=p.profile,
                observed_memory_bytes=p.memory_bytes,
                mig_instance=p.mig_profile,
                mps_active_thread_pct=p.mps_pct,
                green_sms=p.green_sms,
            )
            for p in self._placed.values()
        )
        mig_instances = tuple(
            MigInstance(
                profile=p.mig_profile, start=p.mig_placement.start, size=p.mig_placement.size, holder=p.handle
            )
            for p in self._placed.values()
            if p.mig_profile is not None and p.mig_placement is not None
        )
        is_mps = self.regime.kind == "mps"
        return DeviceSnapshot(
            device_type=self.spec.name,
            compute_mode="DEFAULT",
            mig=MigState(enabled=self.regime.kind == "mig", instances=mig_instances),
            mps=MpsState(
                running=is_mps,
                clients=len(self._placed) if is_mps else 0,
                max_clients=self.spec.mps_max_clients,
            ),
            memory_total_bytes=self.spec.memory_bytes,
            memory_used_bytes=self.memory_used_bytes,
            memory_reserved_bytes=self.spec.driver_reserve_bytes,
            telemetry=self._last_telemetry if self._last_telemetry is not None else Telemetry(),
            residents=residents,
            green_partitions_sms=(self.regime.green_sms,) if self.regime.green_sms is not None else (),
            source="simulated",
        )
