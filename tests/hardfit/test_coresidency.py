"""SM co-residency agrees with the occupancy rules: one kernel beside b copies of itself fits
exactly when b + 1 blocks fit per SM by the reference calculator."""

from __future__ import annotations

import random

import pytest

from canary.catalog import lookup
from canary.hardfit import check, parse_regime
from canary.occupancy import cuda_occupancy
from canary.policy import load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigState, MpsState, Resident

POLICY = load_policy("default")


def _profile(name: str, kernel: KernelSpec, *, latency_critical: bool = False) -> WorkloadProfile:
    return WorkloadProfile(
        name=name, version="1", memory=MemoryEnvelope(reserved_bytes=1 << 30, peak_bytes=1 << 30),
        kernels=(kernel,), latency_critical=latency_critical,
        sharing=SharingModes(mps_active_thread_pct=100, streams=True),
    )


def _device(spec_name: str, resident: WorkloadProfile | None) -> DeviceSnapshot:
    spec = lookup(spec_name)
    return DeviceSnapshot(
        device_type=spec.name, compute_mode="DEFAULT", mig=MigState(enabled=False),
        mps=MpsState(running=True, clients=1, max_clients=48, pinned_memory_limit_bytes=spec.memory_bytes),
        memory_total_bytes=spec.memory_bytes, memory_used_bytes=1 << 30, memory_reserved_bytes=1 << 30,
        residents=() if resident is None else (Resident(name="r", profile=resident, observed_memory_bytes=1 << 30),),
    )


def _fits_beside(spec_name: str, kernel: KernelSpec, blocks_per_sm: int) -> bool:
    spec = lookup(spec_name)
    resident_kernel = kernel.model_copy(update={"persistent": True, "grid_blocks": blocks_per_sm * spec.sm_count,
                                                "name": "resident"})
    snap = _device(spec_name, _profile("res", resident_kernel))
    hard = check(snap, spec, _profile("cand", kernel), POLICY, parse_regime("mps:100"))
    sm = [f for f in hard.findings if f.resource in ("registers", "shared_memory", "warps", "blocks", "barriers")]
    assert sm, "co-residency must be checked beside a persistent resident"
    return all(f.verdict == "yes" for f in sm)


CUDA_DEVICES = ["v100-sxm2-16gb", "t4", "a100-80gb", "a10", "l4", "h100-sxm", "b200"]


@pytest.mark.parametrize("device", CUDA_DEVICES)
def test_coresidency_matches_occupancy_for_copies_of_one_kernel(device: str) -> None:
    spec = lookup(device)
    rng = random.Random(f"coresidency-{device}")
    checked = 0
    while checked < 60:
        threads = rng.choice([32, 64, 96, 128, 160, 256, 384, 512, 640, 1024])
        regs = rng.randint(8, 255)
        smem = rng.choice([0, 0, 1024, 4096, 16384, 40000])
        kernel = KernelSpec(name="k", registers_per_thread=regs, threads_per_block=threads,
                            static_shared_bytes=min(smem, spec.shared_memory_per_block_bytes))
        occ = cuda_occupancy(spec, registers_per_thread=regs, threads_per_block=threads,
                             static_shared_bytes=kernel.static_shared_bytes)
        if occ.active_blocks_per_sm < 1:
            continue
        limit = occ.active_blocks_per_sm
        assert _fits_beside(device, kernel, limit - 1), (device, regs, threads, smem, limit)
        assert not _fits_beside(device, kernel, limit), (device, regs, threads, smem, limit)
        checked += 1


def test_free_sms_admit_a_block_that_would_not_fit_beside_resident_blocks() -> None:
    spec = lookup("h100-sxm")
    heavy = KernelSpec(name="heavy", registers_per_thread=64, threads_per_block=1024, persistent=True,
                       grid_blocks=spec.sm_count // 2)
    cand = KernelSpec(name="c", registers_per_thread=128, threads_per_block=512)
    hard = check(_device("h100-sxm", _profile("res", heavy)), spec, _profile("cand", cand), POLICY,
                 parse_regime("mps:100"))
    assert hard.verdict == "yes"
    blocks = next(f for f in hard.findings if f.resource == "blocks")
    assert blocks.available == spec.sm_count - spec.sm_count // 2


def test_timeslice_never_checks_coresidency() -> None:
    spec = lookup("h100-sxm")
    heavy = KernelSpec(name="heavy", registers_per_thread=64, threads_per_block=1024, persistent=True,
                       grid_blocks=spec.sm_count * 2)
    hard = check(_device("h100-sxm", _profile("res", heavy)), spec, _profile("cand", heavy, latency_critical=True),
                 POLICY, parse_regime("timeslice"))
    assert not [f for f in hard.findings if f.resource in ("registers", "shared_memory", "warps", "blocks", "barriers")]


def test_persistent_resident_without_grid_is_unknown_not_free() -> None:
    spec = lookup("h100-sxm")
    k = KernelSpec(name="p", registers_per_thread=32, threads_per_block=256, persistent=True)
    hard = check(_device("h100-sxm", _profile("res", k)), spec, _profile("cand", k), POLICY, parse_regime("mps:50"))
    assert hard.verdict == "unknown"
    assert hard.limiting_resource == "resident_kernels"
    assert "grid_blocks" in hard.findings[-1].detail or any("grid_blocks" in f.detail for f in hard.findings)


def test_kernel_that_cannot_launch_alone_is_rejected() -> None:
    spec = lookup("h100-sxm")
    resident = KernelSpec(name="p", registers_per_thread=32, threads_per_block=256, persistent=True, grid_blocks=1)
    huge = KernelSpec(name="huge", registers_per_thread=255, threads_per_block=1024)
    hard = check(_device("h100-sxm", _profile("res", resident)), spec, _profile("cand", huge, latency_critical=True),
                 POLICY, parse_regime("mps:100"))
    assert hard.verdict == "no"
    assert hard.limiting_resource == "registers"


def test_the_kernel_footprint_used_by_stage_one_is_the_occupancy_footprint() -> None:
    from canary.hardfit.compute import _kernel
    from canary.occupancy import block_footprint

    rng = random.Random(3)
    for device in CUDA_DEVICES:
        spec = lookup(device)
        for _ in range(50):
            k = KernelSpec(name="k", registers_per_thread=rng.randint(1, 255), threads_per_block=rng.randint(1, 1024),
                           static_shared_bytes=rng.choice([0, 100, 4096]), dynamic_shared_bytes=rng.choice([0, 8192]))
            fp = block_footprint(spec, registers_per_thread=k.registers_per_thread, threads_per_block=k.threads_per_block,
                                 static_shared_bytes=k.static_shared_bytes, dynamic_shared_bytes=k.dynamic_shared_bytes)
            kk = _kernel(spec, k)
            assert (kk.warps, kk.registers_per_warp, kk.shared_bytes) == (fp.warps, fp.registers_per_warp,
                                                                         fp.shared_memory_bytes)
