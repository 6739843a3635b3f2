"""Ground truth per scenario, with full knowledge no scheduler has.

- ``physical`` (hard-fit families): does the candidate physically fit? Compute mode is the driver's
  rule (a second context is refused); MIG placement follows the catalog's placement table (NVIDIA's
  MIG user guide, transcribed with a citation per profile) against the instances that exist; HBM
  follows the simulator's out-of-memory check; SM co-residency of the ``hard-sm`` scenarios comes
  from NVIDIA's compiled occupancy calculator, precomputed into ``data/coresidency_truth.json`` by
  :mod:`canary.bench.coresidency_table` (other scenarios: the simulator's occupancy-rule residency).
  These families are consistency checks: compute mode, MIG and HBM truth follow the same rules or
  data stage 1 uses. A pair that fits is then judged like a ``simulated`` one.
- ``simulated``: the simulator runs resident alone, candidate alone and both together
  (``canary.sim.true_pair_slowdown``; an unprofiled resident via ``SimDevice.from_snapshot``) and
  the pair is safe when the resident's slowdown is within the bound the policy would apply.
- ``measured`` (Gavel): the resident's measured slowdown against the same bound.

Deterministic for a given seed; no clock reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary.errors import InputError

if TYPE_CHECKING:
    from canary.bench.scenarios import Scenario
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.sim.model import KernelResidency

TRUTH_DURATION_S = 60.0
INTERFERENCE = "interference"


@dataclass(frozen=True)
class Truth:
    """``safe``: may the pair share the device within the bound. ``resource``: what limits an unsafe
    pair — the physical resource for a hard misfit, ``interference`` for a slowdown beyond the
    bound, ``None`` for a safe pair. Slowdowns are ``None`` where not measured or not simulated
    (a hard misfit never runs)."""

    safe: bool
    resource: str | None
    kind: str
    bound_pct: float | None
    resident_slowdown_pct: float | None
    resident_p99_slowdown_pct: float | None
    detail: str


def slowdown_bound_pct(policy: Policy, resident: WorkloadProfile | None) -> float:
    """The bound the policy applies to a resident: its class budget, tightened by the resident's own
    SLO. For an unprofiled resident (class unknown) the strictest class budget of the policy."""
    if resident is None:
        return min(b.max_resident_slowdown_pct for b in policy.risk_budgets.values())
    bound = policy.budget_for(resident.workload_class).max_resident_slowdown_pct
    if resident.slo is not None and resident.slo.max_slowdown_pct is not None:
        bound = min(bound, resident.slo.max_slowdown_pct)
    return bound


def _mig_misfit(sc: Scenario) -> tuple[str, str] | None:
    """(resource, detail) when the MIG instance cannot be created, else ``None`` — from NVIDIA's MIG
    tables as transcribed in :mod:`canary.bench.mig_tables`, not from the catalog or stage 1's code."""
    from canary.bench.mig_tables import creation_blocker, table_for

    name = sc.placement.mig_profile
    assert name is not None
    table = table_for(sc.spec.name)
    existing = []
    for inst in sc.snapshot.mig.instances:
        listed = table.get(inst.profile)
        if listed is not None and listed.memory_slices != inst.size:
            raise ValueError(f"scenario {sc.id}: a {inst.profile} instance spans {listed.memory_slices} memory "
                             f"slices in NVIDIA's table, the snapshot says {inst.size}")
        existing.append((inst.profile, inst.start))
    return creation_blocker(sc.spec.name, name, existing)


def _coresidency_misfit(sc: Scenario) -> tuple[str, str] | None:
    """Under a concurrent regime, a resident's persistent blocks that cover every SM leave room for
    one candidate block or not: the simulator's residency (occupancy rules), resource by resource."""
    from canary.sim.model import derive_traits

    if sc.placement.kind not in ("mps", "streams", "green"):
        return None
    spec = sc.spec
    held: list[KernelResidency] = []
    for r in sc.snapshot.residents:
        if r.profile is None:
            continue
        traits = derive_traits(r.profile, spec)
        held.extend(k for k in traits.residency if k.persistent)
    if not held or sum(k.sm_share for k in held) < 1.0 - 1e-9:
        return None
    guest = derive_traits(sc.candidate, spec).residency
    regs = sum(k.blocks_per_sm * k.registers_per_block for k in held)
    smem = sum(k.blocks_per_sm * k.shared_memory_per_block_bytes for k in held)
    warps = sum(k.blocks_per_sm * k.warps_per_block for k in held)
    blocks = sum(k.blocks_per_sm for k in held)
    failing: dict[str, str] = {}
    for g in guest:
        rows = (
            ("registers", regs + g.registers_per_block, spec.registers_per_sm),
            ("shared_memory", smem + g.shared_memory_per_block_bytes, spec.shared_memory_per_sm_bytes),
            ("warps", warps + g.warps_per_block, spec.max_warps_per_sm),
            ("blocks", blocks + 1, spec.max_blocks_per_sm),
        )
        for resource, need, have in rows:
            if need > have and resource not in failing:
                failing[resource] = f"kernel {g.name}: {resource} per SM {need} > {have}"
    # Every shortfall is physical; the one named is the first in stage 1's stable order.
    for resource in ("registers", "shared_memory", "warps", "blocks"):
        if resource in failing:
            return resource, "; ".join(failing.values()) + " beside the persistent blocks"
    return None


def _hbm_misfit(sc: Scenario, seed: int) -> tuple[str, str] | None:
    from canary.sim import SimDevice, SimOutOfMemory

    dev = SimDevice.from_snapshot(sc.snapshot, sc.spec, seed=seed, regime=sc.regime)
    try:
        dev.place(sc.candidate, role="candidate")
    except SimOutOfMemory as exc:
        return "hbm", str(exc)
    return None


def physical_misfit(sc: Scenario, seed: int) -> tuple[str, str] | None:
    """The first physical reason the candidate cannot run beside the residents, or ``None``."""
    mode = sc.snapshot.compute_mode
    if mode == "PROHIBITED":
        return "compute_mode", "PROHIBITED: the driver refuses every compute context"
    if mode == "EXCLUSIVE_PROCESS" and sc.snapshot.residents:
        return "compute_mode", "EXCLUSIVE_PROCESS: the resident holds the only context"
    if sc.placement.kind == "mig":
        mig = _mig_misfit(sc)
        if mig is not None:
            return mig
        return None  # memory of the instance is the catalog's; checked by the simulator below
    hbm = _hbm_misfit(sc, seed)
    if hbm is not None:
        return hbm
    if sc.family == "hard-sm":
        return _reference_coresidency(sc)
    return _coresidency_misfit(sc)


def _reference_coresidency(sc: Scenario) -> tuple[str, str] | None:
    """The precomputed verdict of NVIDIA's occupancy calculator for a ``hard-sm`` scenario."""
    from canary.bench.coresidency_table import TABLE, load

    row = load()["scenarios"].get(sc.id)
    if row is None:
        raise InputError(f"scenario {sc.id} is not in {TABLE}: regenerate it with "
                         "python -m canary.bench.coresidency_table --write", field="truth")
    if row["fits"]:
        return None
    return str(row["resource"]), f"{row['detail']} (NVIDIA cuda_occupancy.h, compiled; precomputed table)"


def _unprofiled_slowdown(sc: Scenario, seed: int) -> tuple[float | None, float | None]:
    """Resident slowdown (throughput) of the first resident when it has no profile: the simulator
    runs its hidden load alone and beside the candidate with the same random stream."""
    from canary.sim import SimDevice

    def run(with_candidate: bool) -> float:
        dev = SimDevice.from_snapshot(sc.snapshot, sc.spec, seed=seed, regime=sc.regime)
        resident = dev.handles()[0]
        if with_candidate:
            dev.place(sc.candidate, role="candidate")
        window = dev.run_window(TRUTH_DURATION_S)
        return float(window.throughput[resident])

    alone, shared = run(False), run(True)
    if alone <= 0:
        return None, None
    slow = float("inf") if shared <= 0 else (alone / shared - 1.0) * 100.0
    return slow, None


def _mig_slowdown(sc: Scenario, seed: int) -> tuple[float | None, float | None]:
    """Resident slowdown when the candidate gets its own MIG instance and the resident keeps the
    instance profile it holds (``true_pair_slowdown`` would put both in the regime's profile)."""
    import numpy as np

    from canary.quantiles import quantile
    from canary.sim import SimDevice
    from canary.sim.truth import slowdown_pct

    first = sc.snapshot.residents[0]
    assert first.profile is not None
    held = first.mig_instance  # PROFILE or PROFILE@START: the snapshot's own instance
    serving = first.profile.workload_class == "online-inference"

    def run(with_candidate: bool) -> tuple[float | None, float | None]:
        dev = SimDevice(sc.spec, seed=seed, regime=sc.regime)
        h = dev.place(first.profile, role="resident", mig_instance_profile=held)  # type: ignore[arg-type]
        if with_candidate:
            dev.place(sc.candidate, role="candidate")
        w = dev.run_window(TRUTH_DURATION_S)
        if serving:
            lat = w.latencies_ms[h]
            return (float(np.mean(lat)) if lat else None), quantile(lat, 0.99)
        return w.throughput[h], None

    (a_mean, a_p99), (s_mean, s_p99) = run(False), run(True)
    slow = slowdown_pct(a_mean, s_mean, higher_is_better=not serving)
    p99 = slowdown_pct(a_p99, s_p99, higher_is_better=False) if serving else None
    return slow, p99


def ground_truth(sc: Scenario, policy: Policy, *, seed: int) -> Truth:
    """The truth of one scenario (see the module docstring)."""
    from canary.sim import true_pair_slowdown

    residents = sc.snapshot.residents
    if not residents:
        raise InputError(f"scenario {sc.id}: a pair needs a resident", field="residents")
    first = residents[0]
    bound = slowdown_bound_pct(policy, first.profile)
    if sc.truth_kind == "measured":
        if sc.gavel is None:
            raise InputError(f"scenario {sc.id}: measured truth needs a Gavel pair", field="gavel")
        measured = sc.gavel.slowdown_a_pct
        ok = measured <= bound
        return Truth(ok, None if ok else INTERFERENCE, "measured", bound, measured, None,
                     f"Gavel measured {measured:.1f}% vs bound {bound:g}%")
    misfit = physical_misfit(sc, seed)
    if misfit is not None:
        resource, detail = misfit
        return Truth(False, resource, "physical", bound, None, None, detail)
    slow: float | None
    p99: float | None
    if first.profile is None:
        slow, p99 = _unprofiled_slowdown(sc, seed)
    elif sc.placement.kind == "mig":
        slow, p99 = _mig_slowdown(sc, seed)
    else:
        if len(residents) > 1:
            raise InputError(f"scenario {sc.id}: simulated truth handles one resident outside MIG", field="residents")
        regime = sc.regime
        truth = true_pair_slowdown(sc.spec, first.profile, sc.candidate, regime=regime, seed=seed,
                                   duration_s=TRUTH_DURATION_S)
        slow, p99 = truth.resident_slowdown_pct, truth.resident_p99_slowdown_pct
    if slow is None:
        raise InputError(f"scenario {sc.id}: the simulator produced no resident slowdown", field="truth")
    safe = slow <= bound
    kind = "simulated" if sc.truth_kind != "physical" else "physical-fit, simulated interference"
    return Truth(safe, None if safe else INTERFERENCE, kind, bound, slow, p99,
                 f"simulated resident slowdown {slow:.1f}% vs bound {bound:g}%")
