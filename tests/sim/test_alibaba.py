"""Production duty-cycle traces (Alibaba GenAI) replayed as simulated serving residents."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from canary.catalog import DeviceSpec
from canary.errors import InputError
from canary.sim import SimDevice
from canary.sim.alibaba import (
    AlibabaDataMissing,
    default_duty_cycle_path,
    load_duty_cycle_series,
    serving_profile_from_duty_series,
)


@pytest.fixture(scope="module")
def series() -> dict[str, list[tuple[float, float]]]:
    try:
        return load_duty_cycle_series()
    except AlibabaDataMissing as exc:
        pytest.skip(f"Alibaba GenAI trace absent: {exc}")


def test_trace_loads_per_pod_series(series: dict[str, list[tuple[float, float]]]) -> None:
    assert default_duty_cycle_path().name == "pod_gpu_duty_cycle_anon.tar.gz"
    assert len(series) == 143
    for samples in series.values():
        assert all(0.0 <= duty <= 1.0 for _, duty in samples)
        times = [t for t, _ in samples]
        assert times == sorted(times)


def test_replayed_pod_keeps_its_duty_cycle_and_runs(
    series: dict[str, list[tuple[float, float]]], v100: DeviceSpec
) -> None:
    pod, samples = max(series.items(), key=lambda kv: sum(d for _, d in kv[1]) / len(kv[1]))
    window = samples[:120]
    profile = serving_profile_from_duty_series(
        pod[:12],
        window,
        memory_bytes=4 << 30,
        latency_p99_ms=100.0,
        dram_intensity=0.4,
        seconds_per_sample=0.1,
    )
    total = sum(p.duration_s for p in profile.phases)
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(window) if b[0] > a[0])
    typical = gaps[len(gaps) // 2] if len(gaps) % 2 else (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2
    # Gaps in the trace are kept: the replay spans the trace's time, scaled to 0.1 s per typical gap.
    assert total == pytest.approx(0.1 * ((window[-1][0] - window[0][0]) / typical + 1))
    expected = profile.effective_duty_cycle()
    assert expected is not None and expected > 0.05
    dev = SimDevice(v100, seed=4, regime="timeslice")
    h = dev.place(profile)
    w = dev.run_window(total)
    assert w.requests_served[h] > 0
    assert w.telemetry.utilization_gpu_pct is not None
    # Poisson arrivals around the replayed duty cycle: within a quarter of it over the replay.
    assert w.telemetry.utilization_gpu_pct.value / 100.0 == pytest.approx(expected, rel=0.25)


def test_missing_trace_and_short_series_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(AlibabaDataMissing, match="not found"):
        load_duty_cycle_series(tmp_path / "absent.tar.gz")
    with pytest.raises(InputError, match="at least 2"):
        serving_profile_from_duty_series("p", [(0.0, 0.5)], memory_bytes=1, latency_p99_ms=10.0)
