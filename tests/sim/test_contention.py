"""The contention model through the whole simulator: time slices, MPS, DRAM sharing, MIG, queueing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from canary.catalog import DeviceSpec
from canary.profile import WorkloadProfile
from canary.sim import CALIBRATED, ContentionParams, SimDevice, true_pair_slowdown

ProfileFactory = Callable[..., WorkloadProfile]

# Mechanism tests fix the contention parameters, so a recalibration cannot change what they check;
# the calibrated values are exercised where only the ordering matters.
PLAIN = ContentionParams(serialization_weight=0.5, interference_per_share=0.0, dram_efficiency=1.0)


def _shared_throughputs(
    spec: DeviceSpec, regime: str, first: object, second: object, seconds: float = 3.0
) -> tuple[float, float, float]:
    dev = SimDevice(spec, seed=9, regime=regime, params=PLAIN)
    a = dev.place(first)  # type: ignore[arg-type]
    b = dev.place(second, role="candidate")  # type: ignore[arg-type]
    w = dev.run_window(seconds)
    assert w.telemetry.utilization_gpu_pct is not None
    return w.throughput[a], w.throughput[b], w.telemetry.utilization_gpu_pct.value


def test_timeslice_never_overlaps_but_mps_does(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    """Two always-busy workloads each needing 40% of the SMs: time-sliced they halve each other;
    under MPS (or streams) their kernels run side by side at full speed."""
    a = make_profile("a", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.4)
    b = make_profile("b", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.4)
    alone = 20.0  # 50 ms steps, always busy
    ts_a, ts_b, ts_util = _shared_throughputs(v100, "timeslice", a, b)
    mps_a, mps_b, mps_util = _shared_throughputs(v100, "mps:100", a, b)
    # The device's time is split, never shared (less the context-switch dead time).
    switch_loss = PLAIN.context_switch_us / 1000.0 / PLAIN.timeslice_ms
    assert ts_a + ts_b == pytest.approx(alone * (1 - switch_loss), rel=0.03)
    assert ts_a == pytest.approx(ts_b, rel=0.1)
    assert mps_a == pytest.approx(alone, rel=0.05)
    assert mps_b == pytest.approx(alone, rel=0.05)
    assert ts_util == pytest.approx(100.0 * (1 - switch_loss), abs=0.5)
    assert mps_util == pytest.approx(100.0, abs=1.0)


def test_mps_cap_limits_the_candidate(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    """``mps:25`` caps the candidate at 25% of the SMs: a workload that wants them all runs ~4x slower."""
    wide = make_profile("wide", duty_cycle=1.0, dram_intensity=0.0, sm_share=1.0)
    dev = SimDevice(v100, seed=1, regime="mps:25")
    c = dev.place(wide, role="candidate")
    w = dev.run_window(2.0)
    assert w.throughput[c] == pytest.approx(20.0 / 4, rel=0.05)
    assert w.telemetry.sm_active_pct is not None
    assert w.telemetry.sm_active_pct.value == pytest.approx(25.0, abs=0.5)


def test_dram_sharing_streaming_pairs_slow_each_other_compute_pairs_much_less(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    streaming = make_profile("stream", duty_cycle=1.0, dram_intensity=1.0, sm_share=0.3)
    streaming2 = make_profile("stream2", duty_cycle=1.0, dram_intensity=1.0, sm_share=0.3)
    compute = make_profile("compute", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.3)
    both = true_pair_slowdown(
        v100, streaming, streaming2, regime="streams", seed=2, duration_s=3.0, params=PLAIN
    )
    mixed = true_pair_slowdown(
        v100, compute, streaming, regime="streams", seed=2, duration_s=3.0, params=PLAIN
    )
    assert both.resident_slowdown_pct is not None and both.candidate_slowdown_pct is not None
    assert mixed.resident_slowdown_pct is not None and mixed.candidate_slowdown_pct is not None
    # Two streams over one memory bus: each gets at most half the bandwidth → at least 2x slower.
    assert both.resident_slowdown_pct >= 95.0
    assert both.candidate_slowdown_pct >= 95.0
    # Compute-bound beside a stream: disjoint needs, no contention at all.
    assert mixed.resident_slowdown_pct == pytest.approx(0.0, abs=3.0)
    assert mixed.candidate_slowdown_pct == pytest.approx(0.0, abs=3.0)
    # With the calibrated parameters the ordering holds too.
    both_cal = true_pair_slowdown(v100, streaming, streaming2, regime="streams", seed=2, duration_s=3.0)
    mixed_cal = true_pair_slowdown(v100, compute, streaming, regime="streams", seed=2, duration_s=3.0)
    assert CALIBRATED is not PLAIN
    assert both_cal.resident_slowdown_pct is not None and mixed_cal.resident_slowdown_pct is not None
    assert mixed_cal.resident_slowdown_pct < 0.5 * both_cal.resident_slowdown_pct


def test_mig_instances_are_isolated(a100: DeviceSpec, make_profile: ProfileFactory) -> None:
    """Two streaming workloads in separate 3g.40gb instances do not slow each other at all, though
    each runs slower than on the whole device (fewer SMs, fewer memory slices)."""
    streaming = make_profile("stream", duty_cycle=1.0, dram_intensity=0.8, sm_share=1.0)
    streaming2 = make_profile("stream2", duty_cycle=1.0, dram_intensity=0.8, sm_share=1.0)
    truth = true_pair_slowdown(a100, streaming, streaming2, regime="mig:3g.40gb", seed=4, duration_s=2.0)
    assert truth.resident_slowdown_pct == pytest.approx(0.0, abs=0.5)
    assert truth.candidate_slowdown_pct == pytest.approx(0.0, abs=0.5)
    whole = true_pair_slowdown(a100, streaming, streaming2, regime="streams", seed=4, duration_s=2.0)
    assert whole.resident_slowdown_pct is not None and whole.resident_slowdown_pct > 50.0
    assert truth.resident_throughput_alone < 0.6 * whole.resident_throughput_alone


def test_green_partitions_do_not_contend_for_sms(a100: DeviceSpec, make_profile: ProfileFactory) -> None:
    a = make_profile("a", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.4)
    b = make_profile("b", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.4)
    truth = true_pair_slowdown(a100, a, b, regime="green:48", seed=4, duration_s=2.0, params=PLAIN)
    # Disjoint SMs (48 for the candidate, 60 for the resident), neither oversubscribed: no slowdown.
    assert truth.resident_slowdown_pct == pytest.approx(0.0, abs=3.0)
    assert truth.candidate_slowdown_pct == pytest.approx(0.0, abs=3.0)
    timesliced = true_pair_slowdown(a100, a, b, regime="timeslice", seed=4, duration_s=2.0, params=PLAIN)
    assert timesliced.resident_slowdown_pct is not None
    assert timesliced.resident_slowdown_pct > 80.0


@pytest.mark.parametrize("regime", ["timeslice", "streams"])
def test_serving_p99_rises_with_contention(
    v100: DeviceSpec, make_profile: ProfileFactory, regime: str
) -> None:
    serving = make_profile(
        "serve", workload_class="online-inference", duty_cycle=0.3, dram_intensity=0.5, p99_ms=50
    )
    light = make_profile("light", duty_cycle=0.2, dram_intensity=0.5, sm_share=1.0)
    heavy = make_profile("heavy", duty_cycle=0.9, dram_intensity=0.5, sm_share=1.0)
    t_light = true_pair_slowdown(v100, serving, light, regime=regime, seed=8, duration_s=20.0)
    t_heavy = true_pair_slowdown(v100, serving, heavy, regime=regime, seed=8, duration_s=20.0)
    assert t_light.resident_p99_ms_alone == t_heavy.resident_p99_ms_alone  # same seed, same stream alone
    assert t_light.resident_p99_ms_alone is not None
    assert t_light.resident_p99_ms_shared is not None and t_heavy.resident_p99_ms_shared is not None
    assert t_light.resident_p99_ms_shared > t_light.resident_p99_ms_alone
    assert t_heavy.resident_p99_ms_shared > 1.3 * t_light.resident_p99_ms_shared
    assert t_heavy.resident_p50_ms_shared is not None
    assert t_heavy.resident_p99_ms_shared >= t_heavy.resident_p50_ms_shared


def test_low_priority_candidate_hurts_the_resident_less(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    """With oversubscribed SMs, a lower-priority candidate's queued kernels do not go first."""
    resident = make_profile("r", duty_cycle=1.0, dram_intensity=0.0, sm_share=1.0)
    candidate = make_profile("c", duty_cycle=1.0, dram_intensity=0.0, sm_share=1.0)
    same = true_pair_slowdown(
        v100, resident, candidate, regime="streams", seed=1, duration_s=2.0, params=PLAIN
    )
    low = true_pair_slowdown(
        v100,
        resident,
        candidate,
        regime="streams",
        seed=1,
        duration_s=2.0,
        candidate_priority=1,
        params=PLAIN,
    )
    assert same.resident_slowdown_pct is not None and low.resident_slowdown_pct is not None
    assert low.resident_slowdown_pct < same.resident_slowdown_pct - 10.0
    assert low.candidate_slowdown_pct is not None and same.candidate_slowdown_pct is not None
    assert low.candidate_slowdown_pct > same.candidate_slowdown_pct
