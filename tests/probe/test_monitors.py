"""Monitors: the Prometheus histogram arithmetic, and both real monitors against a loopback server."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from canary.errors import ProbeError
from canary.probe import make_monitor
from canary.probe.monitors.prometheus import (
    parse_buckets,
    quantile_samples,
    unit_scale_to_ms,
    window_histogram,
)
from tests.support.helpers import free_port, profile, resident_profile, start_server
from tests.support.timing import HANG_S

VLLM_TEXT = """# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.1",model_name="a"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="a"} 6.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a"} 7.0
vllm:e2e_request_latency_seconds_sum{model_name="a"} 2.0
vllm:e2e_request_latency_seconds_count{model_name="a"} 7.0
vllm:e2e_request_latency_seconds_bucket{le="0.1",model_name="b"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="b"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="b"} 1.0
vllm:e2e_request_latency_seconds_sum{model_name="b"} 0.05
vllm:e2e_request_latency_seconds_count{model_name="b"} 1.0
"""


def test_parse_buckets_sums_label_sets() -> None:
    assert parse_buckets(VLLM_TEXT, "vllm:e2e_request_latency_seconds") == {0.1: 3.0, 0.5: 7.0, math.inf: 8.0}


def test_parse_buckets_missing_metric_is_a_clear_error() -> None:
    with pytest.raises(ProbeError, match="no histogram buckets named nope_bucket"):
        parse_buckets(VLLM_TEXT, "nope")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({0.1: 1, 0.5: 2, math.inf: 2}, {0.1: 3, 0.5: 6, math.inf: 7}, [(0.1, 2), (0.5, 2), (math.inf, 1)]),
        ({0.1: 5, math.inf: 5}, {0.1: 5, math.inf: 5}, [(0.1, 0), (math.inf, 0)]),
        ({0.1: 5, math.inf: 9}, {0.1: 1, math.inf: 2}, None),  # counter reset
        ({0.1: 5, math.inf: 9}, {0.2: 5, math.inf: 9}, None),  # layout changed
    ],
)
def test_window_histogram_table(
    before: dict[float, float], after: dict[float, float], expected: list[tuple[float, int]] | None
) -> None:
    assert window_histogram(before, after) == expected


def test_quantile_samples_interpolate_within_buckets_and_cap_the_inf_bucket() -> None:
    samples = quantile_samples([(0.1, 2), (0.5, 2), (math.inf, 1)], 1000.0)
    assert len(samples) == 5
    assert samples == sorted(samples)
    assert samples[0] == pytest.approx(25.0)  # rank 0.5 of 2 in [0, 0.1] s
    assert 100.0 < samples[2] < 500.0
    assert samples[-1] == pytest.approx(500.0)  # +Inf bucket → highest finite bound (a lower bound)
    assert quantile_samples([(0.1, 0), (math.inf, 0)], 1000.0) == []


@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("vllm:e2e_request_latency_seconds", 1000.0),
        ("nv_inference_first_response_histogram_ms", 1.0),
        ("rpc_latency_microseconds", 0.001),
    ],
)
def test_unit_from_the_metric_name(name: str, scale: float) -> None:
    assert unit_scale_to_ms(name) == scale


def test_unknown_unit_is_refused() -> None:
    with pytest.raises(ProbeError, match="refusing to guess"):
        unit_scale_to_ms("request_latency")


@pytest.fixture
def server_port(tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    proc = start_server(port, "--work-ms", "3")
    yield port
    proc.kill()
    proc.wait()


@pytest.mark.anyio
async def test_http_monitor_times_real_requests(server_port: int) -> None:
    monitor = make_monitor(resident_profile(server_port))
    await monitor.open()
    try:
        window = await monitor.measure(1.0)  # 5 requests of 3 ms each fit many times over, even on a busy machine
    finally:
        await monitor.close()
    latencies = [float(v) for v in window.latencies_ms]  # type: ignore[arg-type]
    assert len(latencies) >= 5
    assert min(latencies) >= 3.0  # the server spends 3 ms per request


@pytest.mark.anyio
async def test_http_monitor_with_nothing_listening_gives_an_empty_window() -> None:
    monitor = make_monitor(resident_profile(free_port()))
    await monitor.open()
    try:
        window = await monitor.measure(0.2)
    finally:
        await monitor.close()
    assert list(window.latencies_ms) == []
    assert "failed request" in window.note


@pytest.mark.slow
@pytest.mark.anyio
async def test_prometheus_monitor_window_holds_the_requests_served_in_it(server_port: int) -> None:
    import anyio
    import httpx

    monitor = make_monitor(resident_profile(server_port, monitor="prometheus"))
    await monitor.open()
    served = anyio.Event()

    async def traffic() -> None:
        await anyio.sleep(0.15)  # after the window's first scrape
        async with httpx.AsyncClient(timeout=HANG_S) as client:
            for _ in range(12):
                await client.get(f"http://127.0.0.1:{server_port}/")
        served.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(traffic)
            # A long window, so that a busy machine still serves the 12 requests inside it.
            window = await monitor.measure(5.0)
            with anyio.fail_after(HANG_S):
                await served.wait()
    finally:
        await monitor.close()
    latencies = [float(v) for v in window.latencies_ms]  # type: ignore[arg-type]
    assert len(latencies) == 12
    # Each sample lies inside a bucket where the server itself counted requests (read from its own
    # exposition, not from the monitor): the server times its 3 ms of work, and on a busy machine
    # preemption can move a request to a later bucket, which the monitor must follow.
    text = httpx.get(f"http://127.0.0.1:{server_port}/metrics", timeout=HANG_S).text
    cumulative = [
        (float(le), float(count))
        for le, count in re.findall(r'request_latency_seconds_bucket\{le="([0-9.]+)"\} ([0-9.]+)', text)
    ]
    bounds, previous = [], 0.0
    for lower, (upper, count) in zip([0.0] + [le for le, _ in cumulative], cumulative, strict=False):
        if count > previous:
            bounds.append((lower * 1000, upper * 1000))
        previous = count
    assert bounds, text
    assert all(any(lo <= v <= hi for lo, hi in bounds) for v in latencies), (latencies, bounds)


def test_prometheus_profile_needs_metric_and_url() -> None:
    prof = profile("r", monitor="prometheus", metrics_url="http://127.0.0.1:9/metrics", latency_metric="lat")
    with pytest.raises(ProbeError, match="refusing to guess"):
        make_monitor(prof)
