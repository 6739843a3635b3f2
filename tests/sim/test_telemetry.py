"""Telemetry as NVML/DCGM report it, and why utilisation is no admission proof."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from canary.catalog import DeviceSpec
from canary.profile import KernelSpec, Phase, WorkloadProfile
from canary.sim import ContentionParams, SimDevice, SimWindow, true_pair_slowdown

ProfileFactory = Callable[..., WorkloadProfile]

PLAIN = ContentionParams(serialization_weight=0.5, interference_per_share=0.0, dram_efficiency=1.0)


def _value(window: SimWindow, field: str) -> float:
    measured = getattr(window.telemetry, field)
    assert measured is not None, field
    assert measured.source == "simulated"
    assert measured.window_s == window.duration_s
    return float(measured.value)


def _narrow_persistent(spec: DeviceSpec) -> KernelSpec:
    """2 warps per block, one block per SM, and every byte of shared memory the SM has."""
    return KernelSpec(
        name="ring_worker",
        registers_per_thread=32,
        threads_per_block=64,
        dynamic_shared_bytes=spec.shared_memory_per_block_optin_bytes,
        grid_blocks=spec.sm_count,
        persistent=True,
    )


def test_persistent_narrow_kernel_low_utilisation_full_shared_memory(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    """The counterexample: NVML says 35% busy and 3% occupancy, yet while it runs not one byte of
    shared memory is free on any SM, so a candidate kernel that needs shared memory cannot start."""
    holder = make_profile("holder", duty_cycle=0.35, dram_intensity=0.1, kernels=(_narrow_persistent(v100),))
    dev = SimDevice(v100, seed=2, regime="mps:100", params=PLAIN)
    dev.place(holder)
    w = dev.run_window(5.0)
    assert _value(w, "utilization_gpu_pct") == pytest.approx(35.0, abs=3.0)
    assert _value(w, "sm_active_pct") == pytest.approx(35.0, abs=3.0)
    assert _value(w, "sm_occupancy_pct") < 2.0  # 2 of 64 warps while busy, 35% of the time
    assert w.shared_memory_held_peak_pct == pytest.approx(100.0)
    assert w.shared_memory_held_pct == pytest.approx(35.0, abs=3.0)

    tiling = KernelSpec(
        name="tiled_gemm", registers_per_thread=64, threads_per_block=256, static_shared_bytes=32 * 1024
    )
    candidate = make_profile("gemm", duty_cycle=1.0, dram_intensity=0.0, kernels=(tiling,))
    blocked = true_pair_slowdown(
        v100, holder, candidate, regime="mps:100", seed=2, duration_s=5.0, params=PLAIN
    )
    assert blocked.candidate_slowdown_pct is not None
    # The candidate only runs while the holder's bursts are over: it loses ~35% of its time.
    assert blocked.candidate_slowdown_pct == pytest.approx(100.0 * (1 / 0.65 - 1), abs=8.0)


def test_one_tiny_kernel_reads_as_full_utilisation(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    tiny = KernelSpec(name="poll", registers_per_thread=16, threads_per_block=32, grid_blocks=1)
    busy = make_profile("poller", duty_cycle=1.0, dram_intensity=0.0, kernels=(tiny,))
    dev = SimDevice(v100, seed=0, params=PLAIN)
    dev.place(busy)
    w = dev.run_window(2.0)
    assert _value(w, "utilization_gpu_pct") == pytest.approx(100.0)
    # One block on one SM: 1 of 80 SMs active, and that SM nearly empty.
    assert _value(w, "sm_active_pct") == pytest.approx(100.0 / v100.sm_count, abs=0.01)
    assert _value(w, "sm_occupancy_pct") < 0.1


def test_idle_device_reads_zero_and_memory_is_reported(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    dev = SimDevice(v100, seed=0)
    dev.place(make_profile("parked", duty_cycle=0.0, peak_gib=3))
    w = dev.run_window(1.0)
    assert _value(w, "utilization_gpu_pct") == 0.0
    assert _value(w, "dram_active_pct") == 0.0
    assert w.memory_used_bytes == 3 << 30


def test_dram_active_saturates_under_two_streams(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    dev = SimDevice(v100, seed=0, regime="streams", params=PLAIN)
    dev.place(make_profile("s1", duty_cycle=1.0, dram_intensity=0.8, sm_share=0.3))
    alone = dev.run_window(1.0)
    dev.place(make_profile("s2", duty_cycle=1.0, dram_intensity=0.8, sm_share=0.3), role="candidate")
    shared = dev.run_window(1.0)
    assert _value(alone, "dram_active_pct") == pytest.approx(80.0, abs=1.0)
    assert _value(shared, "dram_active_pct") == pytest.approx(100.0, abs=1.0)


def test_phases_make_bursts_visible_window_by_window(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    """A 0.2 s burst then 0.8 s idle: windows aligned with the phases read 100% then 0%; a window
    over the whole cycle reads the 20% duty cycle."""
    bursty = make_profile(
        "bursty",
        duty_cycle=None,
        dram_intensity=None,
        phases=(
            Phase(name="burst", duration_s=0.2, duty_cycle=1.0, dram_intensity=0.5),
            Phase(name="quiet", duration_s=0.8, duty_cycle=0.0),
        ),
    )
    dev = SimDevice(v100, seed=0, params=PLAIN)
    dev.place(bursty)
    # Bursts vary by a few percent (seeded noise), so the windows keep clear of the edges.
    burst = dev.run_window(0.15)
    dev.run_window(0.1)
    quiet = dev.run_window(0.7)
    dev.run_window(0.05)
    whole = dev.run_window(10.0)
    assert _value(burst, "utilization_gpu_pct") == pytest.approx(100.0)
    assert _value(burst, "dram_active_pct") == pytest.approx(50.0)
    assert _value(quiet, "utilization_gpu_pct") == 0.0
    assert _value(whole, "utilization_gpu_pct") == pytest.approx(20.0, abs=2.0)
