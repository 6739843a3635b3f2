"""SimDevice: reproducibility, placement and removal, memory, regimes, snapshots."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from canary.catalog import DeviceSpec
from canary.errors import InputError
from canary.profile import WorkloadProfile
from canary.sim import SimDevice, SimOutOfMemory, SimPlacementError
from canary.snapshot import DeviceSnapshot, Resident

GiB = 1 << 30
ProfileFactory = Callable[..., WorkloadProfile]


def _run(spec: DeviceSpec, make_profile: ProfileFactory, seed: int) -> tuple[list[float], float]:
    dev = SimDevice(spec, seed=seed, regime="streams")
    serving = make_profile(
        "serve", workload_class="online-inference", duty_cycle=0.4, dram_intensity=0.3, p99_ms=40
    )
    batch = make_profile("train", duty_cycle=0.7, dram_intensity=0.4)
    h = dev.place(serving)
    c = dev.place(batch, role="candidate")
    w = dev.run_window(3.0)
    return w.latencies_ms[h], w.throughput[c]


def test_same_seed_same_run_different_seed_different_run(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    first = _run(v100, make_profile, seed=11)
    again = _run(v100, make_profile, seed=11)
    other = _run(v100, make_profile, seed=12)
    assert first == again
    assert len(first[0]) > 50
    assert first[0] != other[0]


def test_windows_advance_the_clock_and_remove_is_idempotent(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    dev = SimDevice(v100, seed=1)
    h = dev.place(make_profile("a", duty_cycle=0.5))
    assert dev.handles() == [h]
    dev.run_window(0.5)
    dev.run_window(0.25)
    assert dev.now_s == pytest.approx(0.75)
    dev.remove(h)
    dev.remove(h)
    assert dev.handles() == []
    assert dev.memory_used_bytes == 0


def test_candidate_off_on_off_on_costs_no_warmup(v100: DeviceSpec, make_profile: ProfileFactory) -> None:
    """The probe's pattern: a re-placed candidate runs at full speed from its first window."""
    dev = SimDevice(v100, seed=5, regime="streams")
    resident = dev.place(make_profile("r", duty_cycle=0.5, dram_intensity=0.2, sm_share=0.3))
    candidate_profile = make_profile("c", duty_cycle=1.0, dram_intensity=0.0, sm_share=0.3)
    rates = []
    for _ in range(3):
        dev.run_window(0.5)  # canary off
        c = dev.place(candidate_profile, role="candidate", priority=1)
        w = dev.run_window(0.5)  # canary on
        rates.append(w.throughput[c])
        assert w.requests_served[c] > 0
        dev.remove(c)
        assert dev.handles() == [resident]
    # Always busy, 50 ms steps, SMs not oversubscribed: 20 steps/s from the first window on.
    assert rates == pytest.approx([20.0, 20.0, 20.0], rel=0.08)


def test_placement_that_does_not_fit_raises_out_of_memory(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    dev = SimDevice(v100, seed=0)
    dev.place(make_profile("big", peak_gib=10))
    assert dev.memory_used_bytes == 10 * GiB
    with pytest.raises(SimOutOfMemory) as err:
        dev.place(make_profile("also-big", peak_gib=10), role="candidate")
    assert err.value.requested_bytes == 10 * GiB
    assert err.value.free_bytes == v100.memory_bytes - 10 * GiB
    assert "out of memory" in str(err.value)
    assert len(dev.handles()) == 1  # nothing half-placed


def test_mig_instance_memory_and_count_are_enforced(a100: DeviceSpec, make_profile: ProfileFactory) -> None:
    dev = SimDevice(a100, seed=0, regime="mig:3g.40gb")
    with pytest.raises(SimOutOfMemory):
        dev.place(make_profile("too-big", peak_gib=45))
    dev.place(make_profile("a", peak_gib=30))
    dev.place(make_profile("b", peak_gib=30), role="candidate")
    with pytest.raises(SimPlacementError, match="no free placement"):
        dev.place(make_profile("c", peak_gib=1))
    snap = dev.snapshot()
    assert snap.mig.enabled is True
    assert sorted((i.start, i.size) for i in snap.mig.instances) == [(0, 4), (4, 4)]


@pytest.mark.parametrize(
    ("regime", "problem"),
    [
        ("mps:0", "1..100"),
        ("mps:abc", "1..100"),
        ("mps:101", "1..100"),
        ("green:0", "SMs"),
        ("green:80", "SMs"),
        ("mig:9g.1tb", "no MIG profile"),
        ("fairshare", "unknown regime"),
        ("timeslice:3", "takes no argument"),
    ],
)
def test_bad_regimes_are_input_errors(v100: DeviceSpec, regime: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        SimDevice(v100, seed=0, regime=regime)


def test_serving_profile_without_rate_or_slo_is_an_input_error(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    dev = SimDevice(v100, seed=0)
    with pytest.raises(InputError, match=r"slo\.latency_p99_ms"):
        dev.place(make_profile("serve", workload_class="online-inference", duty_cycle=0.3))
    h = dev.place(
        make_profile("serve", workload_class="online-inference", duty_cycle=0.3), request_rate_rps=30.0
    )
    w = dev.run_window(4.0)
    assert w.throughput[h] == pytest.approx(30.0, rel=0.25)


def test_snapshot_round_trip_with_an_unprofiled_resident(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    snapshot = DeviceSnapshot(
        device_type=v100.name,
        memory_total_bytes=v100.memory_bytes,
        memory_used_bytes=6 * GiB,
        residents=(
            Resident(name="known", profile=make_profile("known", duty_cycle=0.5, peak_gib=2)),
            Resident(name="mystery", pid=4242, observed_memory_bytes=3 * GiB),
        ),
    )
    dev = SimDevice.from_snapshot(snapshot, v100, seed=3, regime="streams")
    # 2 GiB profiled + 3 GiB observed + 1 GiB the snapshot reports but nobody accounts for.
    assert dev.memory_used_bytes == 6 * GiB
    assumptions = dev.assumptions()
    mystery = next(h for h in dev.handles() if "mystery" in h)
    assert any("unprofiled" in a for a in assumptions[mystery])
    w = dev.run_window(1.0)
    assert w.telemetry.utilization_gpu_pct is not None
    assert w.telemetry.utilization_gpu_pct.value > 0
    out = dev.snapshot()
    assert out.source == "simulated"
    assert out.memory_used_bytes == 6 * GiB
    by_name = {r.name: r for r in out.residents}
    assert set(by_name) == {"known", "mystery"}
    assert by_name["known"].profile == snapshot.residents[0].profile
    assert by_name["mystery"].profile is None
    assert by_name["mystery"].observed_memory_bytes == 3 * GiB
    assert out.telemetry.utilization_gpu_pct == w.telemetry.utilization_gpu_pct


def test_resident_without_profile_or_memory_cannot_be_guessed(v100: DeviceSpec) -> None:
    snapshot = DeviceSnapshot(device_type=v100.name, residents=(Resident(name="ghost", pid=7),))
    with pytest.raises(InputError, match="ghost"):
        SimDevice.from_snapshot(snapshot, v100, seed=0)


def test_import_is_light() -> None:
    """``import canary.sim`` loads neither numpy nor the engine until a name is used."""
    code = "import sys, canary.sim; print('numpy' in sys.modules, 'canary.sim.engine' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


def test_a_throttled_rate_sends_fewer_requests_of_the_same_size(
    v100: DeviceSpec, make_profile: ProfileFactory
) -> None:
    """The probe throttles a serving canary with ``request_rate_rps``: fewer requests, same work each."""
    serving = make_profile(
        "serve", workload_class="online-inference", duty_cycle=0.5, dram_intensity=0.2, p99_ms=50
    )
    natural = SimDevice(v100, seed=6)
    h = natural.place(serving)
    w_natural = natural.run_window(20.0)
    throttled = SimDevice(v100, seed=6)
    t = throttled.place(serving, request_rate_rps=5.0)
    w_throttled = throttled.run_window(20.0)
    # SLO p99 50 ms → 10 ms of work per request; duty 0.5 → 50 requests/s when not throttled.
    assert w_natural.throughput[h] == pytest.approx(50.0, rel=0.1)
    assert w_throttled.throughput[t] == pytest.approx(5.0, rel=0.25)
    fastest_natural = min(w_natural.latencies_ms[h])
    fastest_throttled = min(w_throttled.latencies_ms[t])
    assert fastest_throttled == pytest.approx(fastest_natural, rel=0.5)
    assert max(w_throttled.latencies_ms[t]) < 40.0  # no queueing at 5% load


def test_snapshot_mig_instances_keep_their_start_slice() -> None:
    """A snapshot names an existing instance as PROFILE@START; the simulator places it exactly there."""
    from canary.backends import resolve_device
    from canary.sim.device import SimPlacementError
    from tests.support.paths import EXAMPLES

    dev = resolve_device(str(EXAMPLES / "snapshots" / "d-mig-no-placement.yaml"))
    sim = SimDevice.from_snapshot(dev.snapshot, dev.spec, seed=0, regime="mig:1g.10gb")
    starts = sorted(p.mig_placement.start for p in sim._placed.values() if p.mig_placement is not None)
    assert starts == [1, 5]
    with pytest.raises(SimPlacementError):
        sim._mig_domain("1g.10gb@5", "again")
