"""An independent boundary table for stage 1: every resource exactly at its limit and one unit past it.

Each row states its expectation and a one-line derivation from first principles — NVIDIA's
documentation (CUDA programming guide, MIG and MPS user guides, NVML reference), the rules of
``cuda_occupancy.h`` worked by hand (and re-checked against the compiled header in
``test_hand_derived_blocks_per_sm_match_the_compiled_header``), AMD's CDNA3 ISA — never from canary's
own output. Device numbers are the catalog's cited ones (H100 SXM: 132 SMs, 65,536 registers per SM
and per block, 228 KiB shared memory per SM, 227 KiB opt-in per block, 1 KiB reserved per block,
32 blocks and 64 warps per SM).

Policy ``default``: headroom max(1 GiB, 5 % of total), per-context cost 512 MiB, assumed driver
reserve 1 GiB (used only when neither snapshot nor catalog states one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from canary.catalog import DeviceSpec, lookup
from canary.catalog._spec import uncatalogued_spec
from canary.certificate import FitVerdict, HardFit
from canary.hardfit import check, parse_regime
from canary.policy import Policy, load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DevicePartition, DeviceSnapshot, MigInstance, MigState, MpsState, Resident

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
POLICY = load_policy("default")
CTX = 512 * MiB  # policy default: per_context_overhead_bytes
ALL_MIG = ("1g.5gb", "1g.10gb", "1g.20gb", "2g.10gb", "2g.20gb", "3g.20gb", "3g.40gb", "4g.20gb", "4g.40gb",
           "7g.80gb", "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
SHARING = SharingModes(timeslice=True, streams=True, mps_active_thread_pct=100, mig_profiles=ALL_MIG, green_sms=8)


def cand(peak: int = GiB, *, kernels: tuple[KernelSpec, ...] = (), deadline_ms: float | None = None,
         latency_critical: bool = False, name: str = "cand") -> WorkloadProfile:
    return WorkloadProfile(name=name, version="1", sharing=SHARING, kernels=kernels, latency_critical=latency_critical,
                           memory=MemoryEnvelope(reserved_bytes=min(peak, GiB), peak_bytes=peak,
                                                 acquire_deadline_ms=deadline_ms))


def snap(device: str = "h100-sxm", **kw: Any) -> DeviceSnapshot:
    total = kw.pop("total", "catalog")
    if total == "catalog":
        total = lookup(device).memory_bytes if device in _CATALOGUED else None
    base: dict[str, Any] = dict(device_type=device, compute_mode="DEFAULT", mig=MigState(enabled=False),
                                mps=MpsState(running=False, clients=0), memory_total_bytes=total,
                                memory_used_bytes=0, memory_reserved_bytes=600 * MiB, green_partitions_sms=())
    base.update(kw)
    return DeviceSnapshot(**base)


_CATALOGUED = ("h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "v100-sxm2-16gb", "t4", "b200", "mi300x")


def bare(name: str, gib: float) -> Resident:
    return Resident(name=name, observed_memory_bytes=int(gib * GiB))


def mig(device: str, *instances: tuple[str, int]) -> DeviceSnapshot:
    spec = lookup(device)
    insts = tuple(MigInstance(profile=p, start=s, size=spec.mig_profile(p).memory_slices) for p, s in instances)
    return snap(device, mig=MigState(enabled=True, instances=insts))


def kernel(regs: int, threads: int, *, static: int = 0, dynamic: int = 0, barriers: int = 1,
           persistent: bool = False, grid: int | None = None, name: str = "k") -> KernelSpec:
    return KernelSpec(name=name, registers_per_thread=regs, threads_per_block=threads, static_shared_bytes=static,
                      dynamic_shared_bytes=dynamic, barriers=barriers, persistent=persistent, grid_blocks=grid)


def beside(device: str, k: KernelSpec, blocks_per_sm: int, cand_kernel: KernelSpec | None = None) -> tuple[DeviceSnapshot, WorkloadProfile]:
    """A persistent resident holding ``blocks_per_sm`` blocks of ``k`` on every SM (grid = blocks × SMs),
    under MPS at 100 %; the candidate launches ``cand_kernel`` (default: ``k`` itself)."""
    spec = lookup(device)
    resident_kernel = k.model_copy(update={"persistent": True, "grid_blocks": blocks_per_sm * spec.sm_count,
                                           "name": "resident"})
    res = WorkloadProfile(name="res", version="1", sharing=SHARING, kernels=(resident_kernel,),
                          memory=MemoryEnvelope(reserved_bytes=GiB, peak_bytes=GiB))
    s = snap(device, mps=MpsState(running=True, clients=1, max_clients=48, pinned_memory_limit_bytes=spec.memory_bytes),
             memory_used_bytes=GiB,
             residents=(Resident(name="res", profile=res, observed_memory_bytes=GiB, mps_active_thread_pct=100),))
    return s, cand(kernels=(cand_kernel or k.model_copy(update={"name": "cand"}),))


def profiled(name: str, peak: int, observed: int, *, reclaimable: int = 0, reclaim_ms: float | None = None) -> Resident:
    p = WorkloadProfile(name=name, version="1", sharing=SHARING,
                        memory=MemoryEnvelope(reserved_bytes=min(observed, peak), peak_bytes=peak,
                                              reclaimable_bytes=reclaimable, reclaim_deadline_ms=reclaim_ms))
    return Resident(name=name, profile=p, observed_memory_bytes=observed)


@dataclass(frozen=True)
class Case:
    snapshot: DeviceSnapshot
    candidate: WorkloadProfile
    regime: str
    resource: str
    verdict: FitVerdict
    why: str
    reserved_by_others: int | None = 0
    policy: Policy = POLICY
    spec: DeviceSpec | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def row(case_id: str, s: DeviceSnapshot, c: WorkloadProfile, regime: str, resource: str, verdict: FitVerdict,
        why: str, **kw: Any) -> Any:
    return pytest.param(Case(s, c, regime, resource, verdict, why, **kw), id=case_id)


# ------------------------------------------------------------------------------------------ HBM
# H100 SXM, 80 GiB observed total; headroom max(1 GiB, 5 % × 80 GiB) = 4 GiB.
H_AVAIL = 80 * GiB - 600 * MiB - 4 * GiB  # idle: total − reserve (NVML v2 reserved) − headroom
HBM_ROWS = [
    row("hbm-idle-at-limit", snap(), cand(H_AVAIL - CTX), "timeslice", "hbm", "yes",
        "80Gi − 600Mi reserve − 4Gi headroom = peak + 512Mi context, to the byte"),
    row("hbm-idle-one-past", snap(), cand(H_AVAIL - CTX + 1), "timeslice", "hbm", "no",
        "one byte more than total − reserve − headroom − context"),
    row("hbm-bare-resident-at-limit", snap(memory_used_bytes=20 * GiB, residents=(bare("p", 20),)),
        cand(H_AVAIL - 20 * GiB - CTX), "timeslice", "hbm", "yes",
        "NVML v2 used (20Gi) is the resident's own 20Gi: reserve counted once"),
    row("hbm-bare-resident-one-past", snap(memory_used_bytes=20 * GiB, residents=(bare("p", 20),)),
        cand(H_AVAIL - 20 * GiB - CTX + 1), "timeslice", "hbm", "no", "one byte past the row above"),
    row("hbm-reserve-not-twice-at-limit", snap(memory_used_bytes=25 * GiB, residents=(bare("p", 20),)),
        cand(H_AVAIL - 25 * GiB - CTX), "timeslice", "hbm", "yes",
        "v2 used 25Gi = 20Gi listed + 5Gi unlisted; free = 80 − 0.6 − 25; the reserve is not in used"),
    row("hbm-reserve-not-twice-one-past", snap(memory_used_bytes=25 * GiB, residents=(bare("p", 20),)),
        cand(H_AVAIL - 25 * GiB - CTX + 1), "timeslice", "hbm", "no",
        "subtracting the reserve from used again would wrongly admit up to 600Mi more"),
    row("hbm-nvml-v1-used-holds-reserve-at-limit",
        snap(memory_used_bytes=20 * GiB + 600 * MiB, memory_reserved_bytes=None, memory_used_includes_reserve=True,
             residents=(bare("p", 20),)),
        cand(H_AVAIL - 20 * GiB - CTX), "timeslice", "hbm", "yes",
        "NVML v1 used = reserved + allocated: total − used = free, no reserve subtracted on top"),
    row("hbm-nvml-v1-one-past",
        snap(memory_used_bytes=20 * GiB + 600 * MiB, memory_reserved_bytes=None, memory_used_includes_reserve=True,
             residents=(bare("p", 20),)),
        cand(H_AVAIL - 20 * GiB - CTX + 1), "timeslice", "hbm", "no", "one byte past the row above"),
    row("hbm-peak-above-observed-at-limit", snap(memory_used_bytes=20 * GiB, residents=(profiled("r", 30 * GiB, 20 * GiB),)),
        cand(H_AVAIL - 30 * GiB - CTX), "timeslice", "hbm", "yes",
        "a resident may grow to its declared 30Gi peak: footprint = max(peak, observed)"),
    row("hbm-peak-above-observed-one-past", snap(memory_used_bytes=20 * GiB, residents=(profiled("r", 30 * GiB, 20 * GiB),)),
        cand(H_AVAIL - 30 * GiB - CTX + 1), "timeslice", "hbm", "no", "one byte past the row above"),
    row("hbm-reclaim-deadline-equal-counts",
        snap(memory_used_bytes=30 * GiB, residents=(profiled("r", 30 * GiB, 30 * GiB, reclaimable=10 * GiB, reclaim_ms=500),)),
        cand(H_AVAIL - 30 * GiB + 10 * GiB - CTX, deadline_ms=500), "timeslice", "hbm", "yes",
        "10Gi given back within 500 ms ≤ the candidate's 500 ms acquire deadline count as available"),
    row("hbm-reclaim-deadline-one-ms-short",
        snap(memory_used_bytes=30 * GiB, residents=(profiled("r", 30 * GiB, 30 * GiB, reclaimable=10 * GiB, reclaim_ms=500),)),
        cand(H_AVAIL - 30 * GiB + 10 * GiB - CTX, deadline_ms=499), "timeslice", "hbm", "no",
        "the resident needs 500 ms, the candidate waits 499: nothing is reclaimable in time"),
    row("hbm-reclaim-one-byte-past",
        snap(memory_used_bytes=30 * GiB, residents=(profiled("r", 30 * GiB, 30 * GiB, reclaimable=10 * GiB, reclaim_ms=500),)),
        cand(H_AVAIL - 30 * GiB + 10 * GiB - CTX + 1, deadline_ms=500), "timeslice", "hbm", "no",
        "one byte past the reclaim-at-limit row"),
    row("hbm-reclaim-without-deadline",
        snap(memory_used_bytes=30 * GiB, residents=(profiled("r", 30 * GiB, 30 * GiB, reclaimable=10 * GiB),)),
        cand(H_AVAIL - 30 * GiB + 10 * GiB - CTX, deadline_ms=60_000), "timeslice", "hbm", "no",
        "a resident that promises no reclaim deadline gives nothing back in time, however long the wait"),
    row("hbm-reservations-at-limit", snap(), cand(H_AVAIL - 8 * GiB - CTX), "timeslice", "hbm", "yes",
        "another admission booked 8Gi in the store", reserved_by_others=8 * GiB),
    row("hbm-reservations-one-past", snap(), cand(H_AVAIL - 8 * GiB - CTX + 1), "timeslice", "hbm", "no",
        "one byte past the booked row", reserved_by_others=8 * GiB),
    row("hbm-policy-reserve-at-limit", snap(memory_reserved_bytes=None), cand(80 * GiB - GiB - 4 * GiB - CTX),
        "timeslice", "hbm", "yes", "no observed reserve, none in the catalog: the policy's assumed 1Gi"),
    row("hbm-policy-reserve-one-past", snap(memory_reserved_bytes=None), cand(80 * GiB - GiB - 4 * GiB - CTX + 1),
        "timeslice", "hbm", "no", "one byte past the policy-reserve row"),
    row("hbm-headroom-floor-at-limit", snap("v100-sxm2-16gb", memory_reserved_bytes=400 * MiB),
        cand(16 * GiB - 400 * MiB - GiB - CTX), "timeslice", "hbm", "yes",
        "5 % of 16Gi is 0.8Gi < the 1Gi floor: headroom is 1Gi"),
    row("hbm-headroom-floor-one-past", snap("v100-sxm2-16gb", memory_reserved_bytes=400 * MiB),
        cand(16 * GiB - 400 * MiB - GiB - CTX + 1), "timeslice", "hbm", "no", "one byte past the floor row"),
    row("hbm-mig-instance-at-limit", mig("h100-sxm"),
        cand(42412802048 - 42412802048 * 5 // 100 - CTX), "mig:3g.40gb", "hbm", "yes",
        "3g.40gb holds 42,412,802,048 bytes (nvidia-smi mig -lgip 40448 MiB); headroom 5 % of that"),
    row("hbm-mig-instance-one-past", mig("h100-sxm"),
        cand(42412802048 - 42412802048 * 5 // 100 - CTX + 1), "mig:3g.40gb", "hbm", "no", "one byte past"),
    row("hbm-mi300x-at-limit", snap("mi300x", memory_reserved_bytes=None, compute_mode=None, source="rocm"),
        cand(192 * GiB - GiB - 192 * GiB * 5 // 100 - CTX), "timeslice", "hbm", "yes",
        "MI300X 192Gi (amdsmi VRAM total); no reserve reported or catalogued: policy 1Gi; headroom 9.6Gi"),
    row("hbm-mi300x-one-past", snap("mi300x", memory_reserved_bytes=None, compute_mode=None, source="rocm"),
        cand(192 * GiB - GiB - 192 * GiB * 5 // 100 - CTX + 1), "timeslice", "hbm", "no", "one byte past"),
]

# ------------------------------------------------------------------------------------------ MIG
# MIG user guide placement tables (nvidia-smi mig -lgipp): 1-slice profiles start at 0..6, 2-slice
# at 0/2/4 (2g) or 0/2/4/6 (1g.2-slice), 3g at 0/4 (size 4), 4g at 0 (size 4), 7g at 0 (size 8).
MIG_ROWS = [
    row("mig-a100-40-fragmented-3g", mig("a100-40gb", ("1g.5gb", 1), ("1g.5gb", 5)), cand(GiB), "mig:3g.20gb",
        "mig_placement", "no", "6 of 8 slices free, but 3g.20gb starts only at 0 or 4 and both ranges are hit"),
    row("mig-a100-40-3g-at-4", mig("a100-40gb", ("1g.5gb", 1), ("1g.5gb", 2)), cand(GiB), "mig:3g.20gb",
        "mig_placement", "yes", "slices [4,8) are free: 3g.20gb starts at 4"),
    row("mig-a100-40-seventh-1g", mig("a100-40gb", *(("1g.5gb", i) for i in range(6))), cand(GiB), "mig:1g.5gb",
        "mig_placement", "yes", "six 1g.5gb at 0..5: the seventh and last start, 6, is free"),
    row("mig-a100-40-eighth-1g", mig("a100-40gb", *(("1g.5gb", i) for i in range(7))), cand(GiB), "mig:1g.5gb",
        "mig_placement", "no", "seven 1g.5gb fill starts 0..6; slice 7 is no start for a 1-slice profile"),
    row("mig-a100-40-eighth-1g-count", mig("a100-40gb", *(("1g.5gb", i) for i in range(7))), cand(GiB), "mig:1g.5gb",
        "mig_instances", "no", "1g.5gb allows at most 7 instances"),
    row("mig-a100-80-2g-full", mig("a100-80gb", ("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)), cand(GiB),
        "mig:2g.20gb", "mig_placement", "no", "2g.20gb starts at 0/2/4 only: slices 6-7 are free but no start"),
    row("mig-a100-80-1g20-at-6", mig("a100-80gb", ("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)), cand(GiB),
        "mig:1g.20gb", "mig_placement", "yes", "1g.20gb (2 memory slices) may start at 6"),
    row("mig-a100-80-3g-beside-4g", mig("a100-80gb", ("4g.40gb", 0)), cand(GiB), "mig:3g.40gb",
        "mig_placement", "yes", "4g.40gb holds [0,4); 3g.40gb starts at 4"),
    row("mig-a100-80-4g-beside-3g", mig("a100-80gb", ("3g.40gb", 4)), cand(GiB), "mig:4g.40gb",
        "mig_placement", "yes", "3g.40gb at 4 holds [4,8); 4g.40gb starts at 0"),
    row("mig-a100-80-4g-blocked", mig("a100-80gb", ("1g.10gb", 3)), cand(GiB), "mig:4g.40gb",
        "mig_placement", "no", "4g.40gb needs [0,4) and slice 3 is taken"),
    row("mig-h100-3g-fragmented", mig("h100-sxm", ("1g.10gb", 0), ("1g.10gb", 4)), cand(GiB), "mig:3g.40gb",
        "mig_placement", "no", "3g.40gb at 0 or 4 (size 4): both hit a 1g.10gb; 6 free slices do not help"),
    row("mig-h100-2g-at-2", mig("h100-sxm", ("1g.10gb", 0), ("1g.10gb", 4)), cand(GiB), "mig:2g.20gb",
        "mig_placement", "yes", "2g.20gb at 2 covers [2,4), free"),
    row("mig-h100-full-7g", mig("h100-sxm", ("7g.80gb", 0)), cand(GiB), "mig:1g.10gb",
        "mig_placement", "no", "7g.80gb holds all 8 memory slices"),
    row("mig-h100-1g20-count", mig("h100-sxm", *(("1g.20gb", i) for i in (0, 2, 4, 6))), cand(GiB), "mig:1g.20gb",
        "mig_instances", "no", "1g.20gb allows at most 4 instances"),
    row("mig-h100-slices-gone", mig("h100-sxm", *(("1g.20gb", i) for i in (0, 2, 4, 6))), cand(GiB), "mig:1g.10gb",
        "mig_slices", "no", "four 2-slice instances hold all 8 memory slices"),
    row("mig-h200-3g-at-4", mig("h200", ("3g.71gb", 0)), cand(GiB), "mig:3g.71gb",
        "mig_placement", "yes", "3g.71gb at 0 holds [0,4); the second placement at 4 is free"),
    row("mig-h200-3g-both", mig("h200", ("3g.71gb", 0), ("3g.71gb", 4)), cand(GiB), "mig:1g.18gb",
        "mig_placement", "no", "two 3g.71gb hold [0,8)"),
    row("mig-h200-4g-blocked", mig("h200", ("2g.35gb", 2)), cand(GiB), "mig:4g.71gb",
        "mig_placement", "no", "4g.71gb starts only at 0 (size 4); [2,4) is taken"),
    row("mig-h200-3g-past-1g-at-6", mig("h200", ("1g.18gb", 6)), cand(GiB), "mig:3g.71gb",
        "mig_placement", "yes", "3g.71gb at 4 would hit slice 6, but the start at 0 is free"),
    row("mig-h200-fragmented", mig("h200", ("1g.18gb", 2), ("1g.18gb", 6)), cand(GiB), "mig:3g.71gb",
        "mig_placement", "no", "slices 2 and 6 taken: [0,4) and [4,8) both blocked, 6 slices free"),
]

# ------------------------------------------------------------------------------------------ MPS
MPS = dict(memory_used_bytes=GiB, residents=(bare("p", 1),))
MPS_ROWS = [
    row("mps-clients-at-limit", snap(mps=MpsState(running=True, clients=47, max_clients=48,
                                                  pinned_memory_limit_bytes=40 * GiB), **MPS),
        cand(GiB), "mps:50", "mps_clients", "yes", "47 connected + the candidate = 48 = the client limit"),
    row("mps-clients-one-past", snap(mps=MpsState(running=True, clients=48, max_clients=48,
                                                 pinned_memory_limit_bytes=40 * GiB), **MPS),
        cand(GiB), "mps:50", "mps_clients", "no", "48 connected: a 49th client is refused (MPS guide: 48 per device)"),
    row("mps-clients-catalog-limit", snap(mps=MpsState(running=True, clients=47, pinned_memory_limit_bytes=40 * GiB),
                                          **MPS),
        cand(GiB), "mps:50", "mps_clients", "yes", "limit not observed: the catalog's 48 (MPS guide)"),
    row("mps-pinned-at-limit", snap(mps=MpsState(running=True, clients=1, max_clients=48,
                                                pinned_memory_limit_bytes=10 * GiB), **MPS),
        cand(10 * GiB), "mps:50", "mps_pinned_memory", "yes", "peak = CUDA_MPS_PINNED_DEVICE_MEM_LIMIT exactly"),
    row("mps-pinned-one-past", snap(mps=MpsState(running=True, clients=1, max_clients=48,
                                                pinned_memory_limit_bytes=10 * GiB), **MPS),
        cand(10 * GiB + 1), "mps:50", "mps_pinned_memory", "no", "one byte over the per-client limit"),
    row("mps-not-running", snap(mps=MpsState(running=False, clients=0), **MPS), cand(GiB), "mps:50",
        "mps_server", "no", "no MPS control daemon: the candidate cannot join as a client"),
]

# ------------------------------------------------------------------------------- SM co-residency
# Blocks per SM N derived by hand from cuda_occupancy.h (re-checked against the compiled header below);
# a persistent resident with N − 1 blocks per SM leaves room for one more (at the limit), with N none.
# Registers: per warp = ceil(regs × 32 / 256) × 256; per sub-partition 65536 / 4 = 16384.
COR = [
    # (id, device, kernel, N, limiting resource, derivation)
    ("h100-registers", "h100-sxm", kernel(64, 256), 4, "registers",
     "64×32 = 2048 regs/warp; 16384 / 2048 = 8 warps per sub-partition × 4 = 32 warps / 8 per block = 4"),
    ("h100-smem-reserve", "h100-sxm", kernel(32, 128, static=57344), 4, "shared_memory",
     "(57344 + 1 KiB sm_90 reserve) × 4 = 233472 = 228 KiB per SM exactly"),
    ("h100-smem-reserve-plus1", "h100-sxm", kernel(32, 128, static=57345), 3, "shared_memory",
     "57345 + 1024 rounds to 58496 (128-B granules); 233472 / 58496 = 3.99 → 3 (4 without the reserve)"),
    ("h100-warps", "h100-sxm", kernel(16, 1024), 2, "warps",
     "64 warps per SM / 32 per block = 2 (registers allow 4: 512 regs/warp, 32 warps per sub-partition)"),
    ("h100-blocks", "h100-sxm", kernel(16, 32), 32, "blocks", "one-warp blocks: warps allow 64, sm_90 caps 32 blocks"),
    ("h100-barriers", "h100-sxm", kernel(16, 32, barriers=4), 16, "barriers",
     "sm_90 holds 32 blocks × 2 = 64 barriers; 64 / 4 per block = 16"),
    ("b200-barriers", "b200", kernel(16, 32, barriers=4), 16, "barriers", "cc 10.0: 32 blocks × 2 barriers / 4 = 16"),
    ("a100-barriers-do-not-limit", "a100-80gb", kernel(16, 32, barriers=4), 32, "blocks",
     "before cc 9.0 the header applies no barrier limit: 32 blocks per SM"),
    ("a100-registers", "a100-80gb", kernel(64, 512), 2, "registers",
     "2048 regs/warp → 8 warps per sub-partition × 4 = 32 warps / 16 per block = 2"),
    ("v100-registers", "v100-sxm2-16gb", kernel(128, 256), 2, "registers",
     "128×32 = 4096 regs/warp → 4 per sub-partition × 4 = 16 warps / 8 per block = 2"),
    ("v100-smem", "v100-sxm2-16gb", kernel(32, 128, static=49152), 2, "shared_memory",
     "cc 7.0 reserves nothing per block: 96 KiB / 48 KiB = 2"),
    ("t4-blocks", "t4", kernel(16, 32), 16, "blocks", "cc 7.5 caps 16 blocks per SM (32 warps would allow 32)"),
]
COR_ROWS = []
for cid, dev, k, n, res, why in COR:
    s_at, c_at = beside(dev, k, n - 1)
    s_past, c_past = beside(dev, k, n)
    COR_ROWS.append(row(f"cores-{cid}-at-limit", s_at, c_at, "mps:100", res, "yes",
                        f"{n - 1} resident blocks per SM + 1 = {n}: {why}"))
    COR_ROWS.append(row(f"cores-{cid}-one-past", s_past, c_past, "mps:100", res, "no",
                        f"{n} resident blocks per SM leave no room: {why}"))
# Two different kernels: a resident 1024×32 block holds 8192 of each sub-partition's 16384 registers.
_res_1024 = kernel(32, 1024)
COR_ROWS += [
    row("cores-h100-mixed-regs-at-limit", *beside("h100-sxm", _res_1024, 1, kernel(32, 1024, name="c")), "mps:100",
        "registers", "yes", "8192 left per sub-partition / 1024 regs per warp = 8 warps × 4 = 32 = the block's warps"),
    row("cores-h100-mixed-regs-one-past", *beside("h100-sxm", _res_1024, 1, kernel(33, 1024, name="c")), "mps:100",
        "registers", "no", "33 regs → 1056 → 1280 per warp; 8192 / 1280 = 6 warps × 4 = 24 < 32"),
]

# ----------------------------------------------------------------------------- launchability
LAUNCH_ROWS = [
    row("launch-h100-regs-at-limit", snap(), cand(kernels=(kernel(64, 1024),)), "timeslice", "candidate_kernels", "yes",
        "1024 threads × 64 regs = 2048/warp × 32 warps = 65536 = registers per block"),
    row("launch-h100-regs-one-past", snap(), cand(kernels=(kernel(65, 1024),)), "timeslice", "registers", "no",
        "65 regs → 2080 → 2304 per warp × 32 = 73728 > 65536: not one block fits"),
    row("launch-h100-regs-green", snap(), cand(kernels=(kernel(65, 1024),)), "green:16", "registers", "no",
        "per-block limits hold in every regime (green contexts)"),
    row("launch-h100-regs-mig", mig("h100-sxm"), cand(kernels=(kernel(65, 1024),)), "mig:3g.40gb", "registers", "no",
        "per-block limits hold in every regime (a MIG instance has the same SMs)"),
    row("launch-h100-smem-at-limit", snap(), cand(kernels=(kernel(32, 128, dynamic=232448),)), "timeslice",
        "candidate_kernels", "yes", "dynamic 227 KiB = opt-in limit; + 1 KiB reserve = 228 KiB = per-block limit"),
    row("launch-h100-smem-one-past", snap(), cand(kernels=(kernel(32, 128, dynamic=232449),)), "timeslice",
        "shared_memory", "no", "one byte over the 227 KiB opt-in maximum of dynamic shared memory"),
    row("launch-a100-smem-at-limit", snap("a100-80gb"), cand(kernels=(kernel(32, 128, dynamic=166912),)), "timeslice",
        "candidate_kernels", "yes", "A100 opt-in 163 KiB = 166912 bytes"),
    row("launch-a100-smem-one-past", snap("a100-80gb"), cand(kernels=(kernel(32, 128, dynamic=166913),)), "timeslice",
        "shared_memory", "no", "one byte over A100's 163 KiB opt-in"),
    row("launch-v100-smem-at-limit", snap("v100-sxm2-16gb"), cand(kernels=(kernel(32, 128, dynamic=98304),)),
        "timeslice", "candidate_kernels", "yes", "V100 opt-in 96 KiB, no per-block reserve"),
    row("launch-v100-smem-one-past", snap("v100-sxm2-16gb"), cand(kernels=(kernel(32, 128, dynamic=98305),)),
        "timeslice", "shared_memory", "no", "one byte over V100's 96 KiB"),
    row("launch-h100-barriers-16", snap(), cand(kernels=(kernel(16, 32, barriers=16),)), "timeslice",
        "candidate_kernels", "yes", "16 barriers per block: 64 / 16 = 4 blocks per SM"),
    row("launch-mi300x-lds-at-limit", snap("mi300x", source="rocm", compute_mode=None),
        cand(kernels=(kernel(32, 256, static=65536),)), "timeslice", "candidate_kernels", "yes",
        "CDNA3: 64 KiB LDS per CU; a workgroup may use all of it"),
    row("launch-mi300x-lds-one-past", snap("mi300x", source="rocm", compute_mode=None),
        cand(kernels=(kernel(32, 256, static=65537),)), "timeslice", "shared_memory", "no",
        "one byte over the CU's 64 KiB LDS"),
]

# ------------------------------------------------------------------------------- green contexts
# H100 (cc 9.0): partitions of at least 8 SMs, in multiples of 8 (CUDA driver API, CUdevSmResource).
GREEN_ROWS = [
    row("green-h100-all-groups", snap(), cand(), "green:128", "green_sms", "yes", "132 SMs hold 16 whole groups of 8 = 128"),
    row("green-h100-one-group-past", snap(), cand(), "green:129", "green_sms", "no", "129 rounds up to 136 > 128"),
    row("green-h100-half-held-at-limit", snap(green_partitions_sms=(64,)), cand(), "green:64", "green_sms", "yes",
        "68 SMs left hold 8 groups = 64"),
    row("green-h100-half-held-one-past", snap(green_partitions_sms=(64,)), cand(), "green:65", "green_sms", "no",
        "65 rounds up to 72 > 64"),
    row("green-resident-partition-counts", snap(residents=(Resident(name="g", observed_memory_bytes=0, green_sms=64),)),
        cand(), "green:65", "green_sms", "no", "a resident in a 64-SM partition holds it even if the list omits it"),
]

# -------------------------------------------------------------------------------- compute modes
CM_ROWS = [
    row("cm-default-listed", snap(memory_used_bytes=GiB, residents=(bare("p", 1),)), cand(), "timeslice", "compute_mode",
        "yes", "DEFAULT: any number of contexts (nvidia-smi -c)"),
    row("cm-exclusive-empty", snap(compute_mode="EXCLUSIVE_PROCESS"), cand(), "timeslice", "compute_mode", "yes",
        "EXCLUSIVE_PROCESS, nothing in use: the candidate is the one context"),
    row("cm-exclusive-listed", snap(compute_mode="EXCLUSIVE_PROCESS", memory_used_bytes=GiB, residents=(bare("p", 1),)),
        cand(), "timeslice", "compute_mode", "no", "EXCLUSIVE_PROCESS: one context per device, a resident holds it"),
    row("cm-exclusive-unlisted", snap(compute_mode="EXCLUSIVE_PROCESS", memory_used_bytes=2 * GiB), cand(), "timeslice",
        "compute_mode", "no", "2Gi in use with no listed process: a context in another namespace holds the device"),
    row("cm-exclusive-unlisted-mps-client", snap(compute_mode="EXCLUSIVE_PROCESS", memory_used_bytes=2 * GiB,
                                                 mps=MpsState(running=True, clients=1, max_clients=48,
                                                              pinned_memory_limit_bytes=40 * GiB)),
        cand(), "mps:50", "compute_mode", "yes", "MPS clients share the server's one context"),
    row("cm-default-unlisted", snap(memory_used_bytes=2 * GiB), cand(), "timeslice", "unlisted_context", "unknown",
        "DEFAULT: the hidden context is a resident without a profile"),
    row("cm-prohibited", snap(compute_mode="PROHIBITED"), cand(), "timeslice", "compute_mode", "no",
        "PROHIBITED: no CUDA context at all"),
    row("cm-mi300x-no-compute-mode", snap("mi300x", compute_mode=None, source="rocm", memory_reserved_bytes=None,
                                          memory_used_bytes=GiB, residents=(bare("p", 1),)),
        cand(), "timeslice", "compute_mode", "yes", "AMD has no exclusive compute mode: ROCm devices are shared"),
]

# ----------------------------------------------------------------------- AMD partitions (MI300X)
# MI300X: 8 XCDs × 38 CUs = 304; SPX/DPX/QPX/CPX make 1/2/4/8 logical devices (amdsmi.h); NPS4 makes
# four 48 GiB memory partitions (AMD Instinct partitioning quick start).
AMD = dict(source="rocm", compute_mode=None, memory_reserved_bytes=None)
NPS4_48 = 48 * GiB
AMD_ROWS = [
    row("amd-cpx-logical-device", snap("mi300x", partition=DevicePartition(compute="CPX", memory="NPS4"), **AMD),
        cand(), "timeslice", "amd_partition", "yes", "CPX: one XCD = 38 of 304 CUs per logical device"),
    row("amd-nps4-catalog-total-at-limit",
        snap("mi300x", total=None, partition=DevicePartition(compute="CPX", memory="NPS4"), **AMD),
        cand(NPS4_48 - GiB - NPS4_48 * 5 // 100 - CTX), "timeslice", "hbm", "yes",
        "no observed total: NPS4's 48Gi partition, not the 192Gi device; policy reserve 1Gi; headroom 5 %"),
    row("amd-nps4-catalog-total-one-past",
        snap("mi300x", total=None, partition=DevicePartition(compute="CPX", memory="NPS4"), **AMD),
        cand(NPS4_48 - GiB - NPS4_48 * 5 // 100 - CTX + 1), "timeslice", "hbm", "no", "one byte past"),
    row("amd-nps-unknown-no-total", snap("mi300x", total=None, **AMD), cand(), "timeslice", "hbm", "unknown",
        "neither an observed total nor the NPS mode: the whole-device figure may be 4× too large"),
]

# ------------------------------------------------------------------------------------- unknowns
def _persistent_without_grid() -> tuple[DeviceSnapshot, WorkloadProfile]:
    s, c = beside("h100-sxm", kernel(32, 128), 1)
    resident = s.residents[0]
    assert resident.profile is not None
    gridless = resident.profile.model_copy(update={"kernels": (kernel(32, 128, persistent=True, name="resident"),)})
    return s.model_copy(update={"residents": (resident.model_copy(update={"profile": gridless}),)}), c


UNCAT = uncatalogued_spec("NVIDIA H300 Prototype", "nvidia", memory_bytes=96 * GiB)
UNKNOWN_ROWS = [
    row("unk-compute-mode", snap(compute_mode=None), cand(), "timeslice", "compute_mode", "unknown",
        "the snapshot does not say the compute mode"),
    row("unk-reservations", snap(), cand(), "timeslice", "hbm", "unknown", "the store could not be read",
        reserved_by_others=None),
    row("unk-reservations-still-no", snap(), cand(H_AVAIL - CTX + 1), "timeslice", "hbm", "no",
        "does not fit even with no reservations at all", reserved_by_others=None),
    row("unk-residents-unlisted", snap(unknown_reasons={"residents": "cuda:N sees only its own context"}), cand(),
        "timeslice", "hbm", "unknown", "the backend could not list processes"),
    row("unk-resident-memory", snap(residents=(Resident(name="ghost"),)), cand(), "timeslice", "hbm", "unknown",
        "a resident with neither a profile nor observed memory"),
    row("unk-used-memory", snap(memory_used_bytes=None), cand(), "timeslice", "unlisted_context", "unknown",
        "without used memory, a process nobody listed cannot be ruled out"),
    row("unk-used-memory-exclusive", snap(memory_used_bytes=None, compute_mode="EXCLUSIVE_PROCESS"), cand(),
        "timeslice", "compute_mode", "unknown", "EXCLUSIVE_PROCESS and whether someone holds the one context is unknown"),
    row("unk-driver-reserve", snap(memory_reserved_bytes=None), cand(), "timeslice", "hbm", "unknown",
        "no reserve in snapshot, catalog or policy",
        policy=POLICY.model_copy(update={"assumed_driver_reserve_bytes": None})),
    row("unk-mig-mode", snap(mig=MigState(enabled=None)), cand(), "mig:3g.40gb", "mig_placement", "unknown",
        "MIG mode not reported"),
    row("unk-mig-instances", snap(mig=MigState(enabled=True), unknown_reasons={"mig.instances": "no permission"}),
        cand(), "mig:1g.10gb", "mig_placement", "unknown",
        "MIG is on but its instances could not be listed: an empty list is not a free device"),
    row("unk-mig-profile-memory", mig("h100-pcie"), cand(), "mig:3g.40gb", "hbm", "unknown",
        "no lgip memory column for H100 PCIe 3g.40gb: instance memory unknown"),
    row("unk-mps-state", snap(mps=MpsState(running=None)), cand(), "mps:50", "mps_server", "unknown",
        "MPS control daemon state not reported (NVML cannot)"),
    row("unk-mps-pinned", snap(mps=MpsState(running=True, clients=1, max_clients=48), **MPS), cand(), "mps:50",
        "mps_pinned_memory", "unknown", "whether CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is set is unknown"),
    row("unk-green-partitions", snap(green_partitions_sms=None), cand(), "green:8", "green_sms", "unknown",
        "partitions belong to processes and NVML cannot see them"),
    row("unk-unprofiled-resident-kernels", snap(mps=MpsState(running=True, clients=1, max_clients=48,
                                                             pinned_memory_limit_bytes=40 * GiB), **MPS),
        cand(kernels=(kernel(32, 128),), latency_critical=True), "mps:50", "resident_kernels", "unknown",
        "a resident without a profile: its registers, shared memory and warps are unknown"),
    row("unk-persistent-resident-without-grid", *_persistent_without_grid(), "mps:100", "resident_kernels", "unknown",
        "a persistent kernel without grid_blocks: its blocks per SM are unknown"),
    row("unk-candidate-without-kernels", beside("h100-sxm", kernel(32, 128), 1)[0], cand(latency_critical=True),
        "mps:100", "candidate_kernels", "unknown", "a latency-critical candidate that declares no kernels"),
    row("unk-mps-client-count", snap(mps=MpsState(running=True, clients=None, max_clients=48,
                                                  pinned_memory_limit_bytes=40 * GiB), **MPS),
        cand(), "mps:50", "mps_clients", "unknown", "how many MPS clients are connected is not reported"),
    row("unk-total-uncatalogued", snap("NVIDIA H300 Prototype", total=None, source="nvml"), cand(), "timeslice",
        "hbm", "unknown", "no observed total and no catalog entry: the equation has no left side", spec=UNCAT),
    row("unk-uncatalogued-launch", snap("NVIDIA H300 Prototype", total=96 * GiB, source="nvml"),
        cand(kernels=(kernel(32, 128),)), "timeslice", "candidate_kernels", "unknown",
        "not in the catalog: per-block limits unknown", spec=UNCAT),
    row("unk-uncatalogued-hbm-decided", snap("NVIDIA H300 Prototype", total=96 * GiB, source="nvml"),
        cand(96 * GiB - 600 * MiB - 96 * GiB * 5 // 100 - CTX), "timeslice", "hbm", "yes",
        "HBM is settled by NVML's own total and reserve", spec=UNCAT),
    row("unk-uncatalogued-hbm-one-past", snap("NVIDIA H300 Prototype", total=96 * GiB, source="nvml"),
        cand(96 * GiB - 600 * MiB - 96 * GiB * 5 // 100 - CTX + 1), "timeslice", "hbm", "no",
        "one byte past NVML's own numbers", spec=UNCAT),
    row("unk-uncatalogued-mig", snap("NVIDIA H300 Prototype", total=96 * GiB, source="nvml",
                                     mig=MigState(enabled=True)), cand(), "mig:1g.12gb", "mig_placement", "unknown",
        "MIG placement tables come from the catalog", spec=UNCAT),
]

ROWS = [*HBM_ROWS, *AMD_ROWS, *MIG_ROWS, *MPS_ROWS, *COR_ROWS, *LAUNCH_ROWS, *GREEN_ROWS, *CM_ROWS, *UNKNOWN_ROWS]

_RANK = {"no": 2, "unknown": 1, "yes": 0}


def _verdict_of(hard: HardFit, resource: str) -> FitVerdict | None:
    found = [f.verdict for f in hard.findings if f.resource == resource]
    return max(found, key=lambda v: _RANK[v]) if found else None


@pytest.mark.parametrize("case", ROWS)
def test_boundary(case: Case) -> None:
    spec = case.spec or lookup(case.snapshot.device_type)
    hard = check(case.snapshot, spec, case.candidate, case.policy, parse_regime(case.regime),
                 reserved_bytes_by_others=case.reserved_by_others)
    got = _verdict_of(hard, case.resource)
    assert got == case.verdict, (case.why, [(f.resource, f.verdict, f.detail) for f in hard.findings])
    if case.verdict == "no":
        assert hard.verdict == "no"


HAND_DERIVED = [(dev, k, n, res) for _, dev, k, n, res, _ in COR] + [
    ("h100-sxm", kernel(64, 1024), 1, None),
    ("h100-sxm", kernel(65, 1024), 0, "registers"),
    ("h100-sxm", kernel(32, 128, dynamic=232448), 1, None),
    ("h100-sxm", kernel(32, 128, dynamic=232449), 0, "shared_memory"),
    ("a100-80gb", kernel(32, 128, dynamic=166913), 0, "shared_memory"),
    ("v100-sxm2-16gb", kernel(32, 128, dynamic=98305), 0, "shared_memory"),
    ("h100-sxm", kernel(16, 32, barriers=16), 4, "barriers"),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.harness.occupancy_reference import compile_reference, missing_reason

    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    return compile_reference(tmp_path_factory.mktemp("occref-boundaries"))


def test_hand_derived_blocks_per_sm_match_the_compiled_header(reference: Path) -> None:
    """The N of every co-residency and launch row above, worked by hand, is what NVIDIA's own
    cuda_occupancy.h computes (blocks per SM and the limiting factor)."""
    from tests.harness.occupancy_reference import FLAG_BITS, reference_line, run_reference

    lines = [reference_line(lookup(dev), k.registers_per_thread, k.threads_per_block, k.static_shared_bytes,
                            k.dynamic_shared_bytes, -1, k.barriers) for dev, k, _, _ in HAND_DERIVED]
    for (dev, k, n, res), ref in zip(HAND_DERIVED, run_reference(reference, lines), strict=True):
        assert ref[0] == 0, (dev, k)
        assert ref[1] == n, (dev, k, ref)
        if res is not None and n > 0:
            assert ref[2] & FLAG_BITS[res], (dev, k, ref)
