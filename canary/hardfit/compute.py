"""SM co-residency: can a candidate block become resident beside the resident's blocks?

Applies where kernels of resident and candidate run on the same SMs at the same time (``mps``,
``streams``) and must: a resident with persistent kernels (they never leave the SMs) or a
latency-critical candidate (it cannot wait for the resident's kernels to drain).

Per SM, the resident's blocks hold registers, shared memory, warps and block slots exactly as the
occupancy rules of ``cuda_occupancy.h`` allocate them (``canary.occupancy.block_footprint``);
what is left must hold one block of each candidate kernel. Registers are allocated per warp in
256-register units from one of four sub-partitions; warps spread over the sub-partitions, so the
fullest sub-partition is what a new block's warps must fit beside (for a lone kernel this is the
reference rule ⌊4·⌊(regs/SM/4)/regs-per-warp⌋/warps⌋, so for one kernel beside copies of
itself the answer equals the reference's blocks-per-SM limit exactly). Shared memory is compared against the
largest carveout the device allows: a *no* is certain; a *yes* assumes the driver could configure
that carveout, which the certificate's detail says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.certificate import Finding, FitVerdict
from canary.hardfit._context import FitContext, finding
from canary.occupancy import OccupancyResult, barrier_slots_per_sm, kernel_occupancy, unmodelled_reason

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import KernelSpec

SUBPARTITIONS = 4


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class _Kernel:
    """A kernel's per-block footprint and its standalone occupancy on one device."""

    warps: int
    registers_per_warp: int
    shared_bytes: int
    barriers: int
    active_blocks_per_sm: int
    limiting: frozenset[str]
    occupancy: OccupancyResult


_CACHE: dict[tuple[str, int, int, int, int, int], _Kernel] = {}


def _kernel(spec: DeviceSpec, k: KernelSpec) -> _Kernel:
    key = (spec.name, k.registers_per_thread, k.threads_per_block, k.static_shared_bytes, k.dynamic_shared_bytes,
           k.barriers)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    occ = kernel_occupancy(spec, k)
    # The reference's per-block allocation is registers-per-warp × warps, and its shared memory
    # includes the per-block reserve and the allocation granularity: the block's footprint.
    result = _Kernel(
        occ.warps_per_block,
        occ.allocated_registers_per_block // occ.warps_per_block,
        occ.allocated_shared_memory_per_block,
        k.barriers,
        occ.active_blocks_per_sm,
        occ.limiting,
        occ,
    )
    if spec.catalogued:
        _CACHE[key] = result
    return result


@value_methods
@dataclass(eq=False, repr=False)
class _SmLoad:
    """What resident blocks hold on the fullest SM.

    Registers live in four sub-partitions; a block's warps are dealt to the sub-partition with the
    fewest warps (round robin), each taking its granularity-rounded register allocation there."""

    blocks: int = 0
    warps: int = 0
    shared_bytes: int = 0
    barriers: int = 0
    sms_covered: int = 0
    by: tuple[str, ...] = ()
    subpartition_warps: list[int] = field(default_factory=lambda: [0] * SUBPARTITIONS)
    subpartition_registers: list[int] = field(default_factory=lambda: [0] * SUBPARTITIONS)

    def add(self, k: _Kernel, blocks: int, sms: int, label: str) -> None:
        self.blocks += blocks
        self.warps += blocks * k.warps
        self.shared_bytes += blocks * k.shared_bytes
        self.barriers += blocks * k.barriers
        self.sms_covered += sms
        self.by = (*self.by, f"{label}×{blocks}/SM")
        # Deal the warps one by one to the sub-partition with the fewest (lowest index on ties):
        # whole rounds of four first, then the remainder one at a time.
        n = blocks * k.warps
        low = min(self.subpartition_warps)
        while n > 0 and any(w != low for w in self.subpartition_warps):
            i = self.subpartition_warps.index(low)
            self.subpartition_warps[i] += 1
            self.subpartition_registers[i] += k.registers_per_warp
            n -= 1
            low = min(self.subpartition_warps)
        rounds, rest = divmod(n, SUBPARTITIONS)
        for i in range(SUBPARTITIONS):
            extra = rounds + (1 if i < rest else 0)
            self.subpartition_warps[i] += extra
            self.subpartition_registers[i] += extra * k.registers_per_warp

    def candidate_warp_room(self, registers_per_sm: int, registers_per_warp: int) -> int:
        """How many warps of this register size still fit across the four sub-partitions."""
        per_sub = registers_per_sm // SUBPARTITIONS
        if registers_per_warp == 0:
            return 1 << 30
        return sum(max(0, per_sub - used) // registers_per_warp for used in self.subpartition_registers)

    def free_registers(self, registers_per_sm: int) -> int:
        per_sub = registers_per_sm // SUBPARTITIONS
        return sum(max(0, per_sub - used) for used in self.subpartition_registers)


def _usable_sms(spec: DeviceSpec, mps_pct: int | None) -> int:
    if mps_pct is None:
        return spec.sm_count
    return max(1, math.floor(spec.sm_count * mps_pct / 100))


def _applies(ctx: FitContext) -> bool:
    if not ctx.regime.concurrent:
        return False
    if ctx.candidate.latency_critical:
        return True
    if "residents" in ctx.snapshot.unknown_reasons or ctx.hbm.unlisted_context is not False:
        return True
    return any(r.profile is None or any(k.persistent for k in r.profile.kernels) or not r.profile.kernels
               for r in ctx.snapshot.residents)


def _evaluate(spec: DeviceSpec, kernels: tuple[KernelSpec, ...], load: _SmLoad) -> list[Finding]:
    """The worst finding per SM resource for one block of each candidate kernel beside ``load``.

    Kernels that cannot launch at all are ``check_launch``'s findings, not repeated here."""
    free_sms = spec.sm_count - load.sms_covered
    max_warps = spec.max_threads_per_sm // spec.warp_size
    smem_sm = spec.shared_memory_per_sm_bytes
    barrier_slots = barrier_slots_per_sm(spec)
    # Findings are built only for the worst kernel per resource: building one per kernel and
    # resource costs more than the arithmetic itself.
    worst_margin: dict[str, tuple[float, str, int, int, str, KernelSpec]] = {}
    launchable = 0
    for k in kernels:
        kk = _kernel(spec, k)
        if kk.active_blocks_per_sm == 0:
            continue
        launchable += 1
        if free_sms > 0:
            continue  # an SM with no resident block takes it, as the occupancy rules allow
        room = load.candidate_warp_room(spec.registers_per_sm, kk.registers_per_warp)
        need_regs = kk.warps * kk.registers_per_warp
        # Registers fit when the block's warps fit in the sub-partitions' leftovers; `available`
        # shows the registers left, below demand whenever the warps do not fit.
        free_regs = load.free_registers(spec.registers_per_sm)
        regs_available = free_regs if room >= kk.warps else min(free_regs, need_regs - 1)
        rows: list[tuple[str, int, int, str]] = [
            ("registers", need_regs, regs_available, "registers"),
            ("shared_memory", kk.shared_bytes, smem_sm - load.shared_bytes, "bytes"),
            ("warps", kk.warps, max_warps - load.warps, "warps"),
            ("blocks", 1, spec.max_blocks_per_sm - load.blocks, "blocks"),
        ]
        if barrier_slots is not None and kk.barriers > 0:
            rows.append(("barriers", kk.barriers, barrier_slots - load.barriers, "barriers"))
        for resource, demand, available, unit in rows:
            margin = (available - demand) / max(demand, 1)
            if resource not in worst_margin or margin < worst_margin[resource][0]:
                worst_margin[resource] = (margin, resource, demand, available, unit, k)
    if launchable == 0:
        return []
    if free_sms > 0:
        return [finding("blocks", 1, free_sms, "SMs", "yes", "declared + occupancy rules",
                        f"{free_sms} of {spec.sm_count} SMs hold no resident block ({', '.join(load.by) or 'none'})")]
    worst = []
    for r in ("registers", "shared_memory", "warps", "blocks", "barriers"):
        if r not in worst_margin:
            continue
        _, resource, demand, available, unit, k = worst_margin[r]
        verdict: FitVerdict = "yes" if demand <= available else "no"
        source = f"{k.source} + occupancy rules"
        if resource == "shared_memory" and "static_shared_bytes" not in k.model_fields_set:
            # ptxas prints no "bytes smem" for a kernel without static shared memory, so an absent value is
            # 0 by that convention — said as such, not as a number the profile declared.
            source = f"{k.source}; static smem not given, 0 assumed as ptxas omits zero + occupancy rules"
        worst.append(finding(resource, demand, max(available, 0), unit, verdict, source,
                             f"candidate kernel {k.name} beside resident blocks ({', '.join(load.by)}) on every SM",
                             subject=k.name, shortfall="now"))
    return worst


def check_sm_coresidency(ctx: FitContext) -> list[Finding]:
    """Hard limits come from persistent resident kernels only: their blocks never leave the SMs.
    A non-persistent kernel's blocks drain, so a latency-critical candidate that cannot fit beside
    one while it runs *waits* — a delay stage 2 measures — and the hard fit says so in a caveat."""
    if not _applies(ctx):
        return []
    spec = ctx.spec
    if not spec.catalogued:
        return [finding("sm_coresidency", None, None, "blocks", "unknown", "catalog",
                        f"{spec.name} is not in the catalog: its registers, shared memory, warps and block slots "
                        "per SM are unknown")]
    if spec.vendor != "nvidia":
        return [finding("sm_coresidency", None, None, "blocks", "unknown", "catalog",
                        f"co-residency rules for {spec.vendor} devices are not modelled for concurrent regimes")]
    unmodelled = unmodelled_reason(spec)
    if unmodelled is not None:
        return [finding("sm_coresidency", None, None, "blocks", "unknown", "occupancy rules",
                        f"{unmodelled}: how blocks share its SMs is unknown")]
    persistent = _SmLoad()
    running = _SmLoad()
    unknown: list[str] = []
    if "residents" in ctx.snapshot.unknown_reasons:
        unknown.append(f"the device's residents are unknown: {ctx.snapshot.unknown_reasons['residents']}")
    elif ctx.hbm.unlisted_context:
        unknown.append("memory in use that no listed process accounts for belongs to a context whose kernels "
                       "are unknown")
    elif ctx.hbm.unlisted_context is None:
        unknown.append(f"whether an unlisted context holds the device is unknown ({ctx.hbm.unlisted_reason})")
    for resident in ctx.snapshot.residents:
        if resident.profile is None:
            unknown.append(f"resident {resident.name} has no profile: its registers, shared memory and warps are unknown")
            continue
        if not resident.profile.kernels:
            unknown.append(f"resident {resident.name}'s profile declares no kernels")
            continue
        usable = _usable_sms(spec, resident.mps_active_thread_pct)
        worst: tuple[_Kernel, int, int, str] | None = None
        for k in resident.profile.kernels:
            if not (k.persistent or ctx.candidate.latency_critical):
                continue
            kk = _kernel(spec, k)
            if k.grid_blocks is None:
                if k.persistent:
                    unknown.append(f"resident {resident.name} kernel {k.name}: grid_blocks not declared, "
                                   "so its blocks per SM are unknown")
                continue
            per_sm = min(kk.active_blocks_per_sm, math.ceil(k.grid_blocks / usable))
            sms = min(usable, k.grid_blocks)
            label = f"{resident.name}/{k.name}"
            if k.persistent:
                persistent.add(kk, per_sm, sms, label)
                running.add(kk, per_sm, sms, label)
            elif worst is None or per_sm * kk.warps > worst[1] * worst[0].warps:
                # Non-persistent kernels of one resident run one at a time: count the heaviest.
                worst = (kk, per_sm, sms, label)
        if worst is not None:
            running.add(*worst)
    if unknown:
        return [finding("resident_kernels", "resident kernel resources", None, "kernels", "unknown",
                        "declared", "; ".join(unknown))]
    if not ctx.candidate.kernels:
        return [finding("candidate_kernels", "candidate kernel resources", None, "kernels", "unknown", "declared",
                        "the candidate's profile declares no kernels, so SM co-residency cannot be checked")]
    hard = _evaluate(spec, ctx.candidate.kernels, persistent)
    if ctx.candidate.latency_critical and running.by != persistent.by:
        transient = _evaluate(spec, ctx.candidate.kernels, running)
        blocked = [f for f in transient if f.verdict == "no"]
        if blocked:
            f = blocked[0]
            ctx.caveats.append(
                f"while resident kernels run ({', '.join(b for b in running.by if b not in persistent.by)}), "
                f"candidate kernel {f.subject} has no room on their SMs ({f.resource}: needs {f.demand}, "
                f"{f.available} left) and waits for their blocks to drain; stage 2 measures that delay")
    return hard


def _launch_shortfalls_cuda(spec: DeviceSpec, k: KernelSpec, occ: OccupancyResult) -> list[tuple[str, int, int, str, str]]:
    """Per-block limits one block of ``k`` exceeds, as (resource, demand, limit, unit, why).

    The occupancy rules give 0 blocks per SM exactly when one of these holds (``cuda_occupancy.h``:
    cudaOccMaxBlocksPerSMRegsLimit / WarpsLimit / SmemLimit, and the barrier limit on cc ≥ 9)."""
    out: list[tuple[str, int, int, str, str]] = []
    if occ.block_limit_registers == 0:
        per_warp = occ.allocated_registers_per_block // occ.warps_per_block
        assumed = per_warp * (-(-occ.warps_per_block // 4) * 4)
        if k.registers_per_thread > 255:
            out.append(("registers", k.registers_per_thread, 255, "registers/thread", "over the ISA's per-thread limit"))
        else:
            out.append(("registers", max(assumed, occ.allocated_registers_per_block), spec.registers_per_block,
                        "registers", f"{k.threads_per_block} threads × {k.registers_per_thread} registers, allocated "
                        f"{per_warp} per warp over {-(-occ.warps_per_block // 4) * 4} warp slots (4 sub-partitions), "
                        f"exceed the {spec.registers_per_block} registers a block may hold"))
    if occ.block_limit_warps == 0:
        out.append(("warps", k.threads_per_block, spec.max_threads_per_block, "threads",
                    f"a block of {k.threads_per_block} threads exceeds the {spec.max_threads_per_block}-thread limit"))
    if occ.block_limit_shared_memory == 0:
        limit = spec.shared_memory_per_block_optin_bytes
        if (spec.compute_capability or (0, 0))[0] >= 8:
            limit += spec.reserved_shared_memory_per_block_bytes
        out.append(("shared_memory", occ.allocated_shared_memory_per_block, limit, "bytes",
                    f"static {k.static_shared_bytes} + dynamic {k.dynamic_shared_bytes} + per-block reserve "
                    f"{spec.reserved_shared_memory_per_block_bytes} bytes exceed the opt-in per-block limit"))
    if occ.block_limit_barriers == 0:
        slots = barrier_slots_per_sm(spec) or 0
        out.append(("barriers", k.barriers, slots, "barriers", "more block barriers than an SM holds"))
    return out


def check_launch(ctx: FitContext) -> list[Finding]:
    """Per-block limits hold in every regime: a kernel no block of which fits on an SM cannot run
    at all, whoever else is on the device. One finding per limit a candidate kernel exceeds, or one
    *yes* naming how many kernels were checked; *unknown* where the device's limits are unknown."""
    spec, kernels = ctx.spec, ctx.candidate.kernels
    if not kernels:
        return []
    if not spec.catalogued:
        return [finding("candidate_kernels", "one block of each kernel", None, "blocks", "unknown", "catalog",
                        f"{spec.name} is not in the catalog: its per-block limits (threads, registers, shared "
                        "memory) are unknown, so whether the candidate's kernels can launch is unknown")]
    out: list[Finding] = []
    if spec.vendor == "amd":
        cdna = spec.cdna
        assert cdna is not None
        for k in kernels:
            if k.threads_per_block > cdna.max_workgroup_size:
                out.append(finding("warps", k.threads_per_block, cdna.max_workgroup_size, "work-items", "no",
                                   f"{k.source} + catalog", f"kernel {k.name}: a workgroup of {k.threads_per_block} "
                                   f"work-items exceeds {cdna.max_workgroup_size}", subject=k.name,
                                   shortfall="never"))
            lds = k.static_shared_bytes + k.dynamic_shared_bytes
            if lds > cdna.lds_per_cu_bytes:
                out.append(finding("shared_memory", lds, cdna.lds_per_cu_bytes, "bytes", "no", f"{k.source} + catalog",
                                   f"kernel {k.name}: {lds} bytes of LDS exceed the CU's {cdna.lds_per_cu_bytes}",
                                   subject=k.name, shortfall="never"))
    elif (unmodelled := unmodelled_reason(spec)) is not None:
        # A catalogued device the occupancy rules have no tables for: a fact about the world, not bad input.
        return [finding("candidate_kernels", "one block of each kernel", None, "blocks", "unknown", "occupancy rules",
                        f"{unmodelled}: whether the candidate's kernels can launch is unknown")]
    else:
        for k in kernels:
            kk = _kernel(spec, k)
            if kk.active_blocks_per_sm > 0:
                continue
            for resource, demand, limit, unit, why in _launch_shortfalls_cuda(spec, k, kk.occupancy):
                out.append(finding(resource, demand, limit, unit, "no", f"{k.source} + occupancy rules",
                                   f"kernel {k.name} cannot launch on {spec.name} at all: {why}", subject=k.name,
                                   shortfall="never"))
    if out:
        return out
    return [finding("candidate_kernels", "one block of each kernel", "fits an SM", "blocks", "yes",
                    "declared + occupancy rules",
                    f"every one of the candidate's {len(kernels)} kernel(s) fits the per-block limits of {spec.name}")]
