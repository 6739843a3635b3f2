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

from canary.certificate import Finding, FitVerdict
from canary.hardfit._context import FitContext, finding

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import KernelSpec

SUBPARTITIONS = 4


@dataclass(frozen=True)
class _Kernel:
    """A kernel's per-block footprint and its standalone occupancy on one device."""

    warps: int
    registers_per_warp: int
    shared_bytes: int
    active_blocks_per_sm: int
    limiting: frozenset[str]


_CACHE: dict[tuple[str, int, int, int, int], _Kernel] = {}


def _kernel(spec: DeviceSpec, k: KernelSpec) -> _Kernel:
    key = (spec.name, k.registers_per_thread, k.threads_per_block, k.static_shared_bytes, k.dynamic_shared_bytes)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    from canary.occupancy import cuda_occupancy

    occ = cuda_occupancy(
        spec,
        registers_per_thread=k.registers_per_thread,
        threads_per_block=k.threads_per_block,
        static_shared_bytes=k.static_shared_bytes,
        dynamic_shared_bytes=k.dynamic_shared_bytes,
    )
    # The reference's per-block allocation is registers-per-warp × warps, and its shared memory
    # includes the per-block reserve and the allocation granularity: the block's footprint.
    result = _Kernel(
        occ.warps_per_block,
        occ.allocated_registers_per_block // occ.warps_per_block,
        occ.allocated_shared_memory_per_block,
        occ.active_blocks_per_sm,
        occ.limiting,
    )
    _CACHE[key] = result
    return result


@dataclass
class _SmLoad:
    """What resident blocks hold on the fullest SM.

    Registers live in four sub-partitions; a block's warps are dealt to the sub-partition with the
    fewest warps (round robin), each taking its granularity-rounded register allocation there."""

    blocks: int = 0
    warps: int = 0
    shared_bytes: int = 0
    sms_covered: int = 0
    by: tuple[str, ...] = ()
    subpartition_warps: list[int] = field(default_factory=lambda: [0] * SUBPARTITIONS)
    subpartition_registers: list[int] = field(default_factory=lambda: [0] * SUBPARTITIONS)

    def add(self, k: _Kernel, blocks: int, sms: int, label: str) -> None:
        self.blocks += blocks
        self.warps += blocks * k.warps
        self.shared_bytes += blocks * k.shared_bytes
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
    if "residents" in ctx.snapshot.unknown_reasons:
        return True
    return any(r.profile is None or any(k.persistent for k in r.profile.kernels) or not r.profile.kernels
               for r in ctx.snapshot.residents)


def _evaluate(spec: DeviceSpec, kernels: tuple[KernelSpec, ...], load: _SmLoad) -> tuple[list[Finding], list[Finding]]:
    """(kernels that cannot launch at all, the worst finding per SM resource) beside ``load``."""
    cannot: list[Finding] = []
    free_sms = spec.sm_count - load.sms_covered
    max_warps = spec.max_threads_per_sm // spec.warp_size
    smem_sm = spec.shared_memory_per_sm_bytes
    # Findings are built only for the worst kernel per resource: building one per kernel and
    # resource costs more than the arithmetic itself.
    worst_margin: dict[str, tuple[float, str, int, int, str, KernelSpec]] = {}
    for k in kernels:
        kk = _kernel(spec, k)
        if kk.active_blocks_per_sm == 0:
            lim = sorted(kk.limiting)[0] if kk.limiting else "blocks"
            cannot.append(finding(lim, k.threads_per_block, 0, "threads", "no", k.source,
                                  f"kernel {k.name} cannot launch on {spec.name} at all "
                                  f"(limited by {', '.join(sorted(kk.limiting))})", subject=k.name))
            continue
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
        for resource, demand, available, unit in rows:
            margin = (available - demand) / max(demand, 1)
            if resource not in worst_margin or margin < worst_margin[resource][0]:
                worst_margin[resource] = (margin, resource, demand, available, unit, k)
    worst = []
    for r in ("registers", "shared_memory", "warps", "blocks"):
        if r not in worst_margin:
            continue
        _, resource, demand, available, unit, k = worst_margin[r]
        verdict: FitVerdict = "yes" if demand <= available else "no"
        worst.append(finding(resource, demand, max(available, 0), unit, verdict, f"{k.source} + occupancy rules",
                             f"candidate kernel {k.name} beside resident blocks ({', '.join(load.by)}) on every SM",
                             subject=k.name))
    if free_sms > 0 and not cannot:
        worst = [finding("blocks", 1, free_sms, "SMs", "yes", "declared + occupancy rules",
                         f"{free_sms} of {spec.sm_count} SMs hold no resident block ({', '.join(load.by) or 'none'})")]
    return cannot, worst


def check_sm_coresidency(ctx: FitContext) -> list[Finding]:
    """Hard limits come from persistent resident kernels only: their blocks never leave the SMs.
    A non-persistent kernel's blocks drain, so a latency-critical candidate that cannot fit beside
    one while it runs *waits* — a delay stage 2 measures — and the hard fit says so in a caveat."""
    if not _applies(ctx):
        return []
    spec = ctx.spec
    if spec.vendor != "nvidia":
        return [finding("sm_coresidency", None, None, "blocks", "unknown", "catalog",
                        f"co-residency rules for {spec.vendor} devices are not modelled for concurrent regimes")]
    persistent = _SmLoad()
    running = _SmLoad()
    unknown: list[str] = []
    if "residents" in ctx.snapshot.unknown_reasons:
        unknown.append(f"the device's residents are unknown: {ctx.snapshot.unknown_reasons['residents']}")
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
    cannot, hard = _evaluate(spec, ctx.candidate.kernels, persistent)
    if ctx.candidate.latency_critical and running.by != persistent.by:
        _, transient = _evaluate(spec, ctx.candidate.kernels, running)
        blocked = [f for f in transient if f.verdict == "no"]
        if blocked:
            f = blocked[0]
            ctx.caveats.append(
                f"while resident kernels run ({', '.join(b for b in running.by if b not in persistent.by)}), "
                f"candidate kernel {f.subject} has no room on their SMs ({f.resource}: needs {f.demand}, "
                f"{f.available} left) and waits for their blocks to drain; stage 2 measures that delay")
    return [*cannot, *hard]
