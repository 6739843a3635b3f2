"""The ``prometheus`` monitor: windowed latency quantiles from a histogram's bucket deltas.

Serving stacks export request latency as a Prometheus histogram (vLLM:
``vllm:e2e_request_latency_seconds``; Triton: ``nv_inference_first_response_histogram_ms``). The
monitor scrapes ``metrics_url`` at the start and the end of a window and takes the difference of the
cumulative bucket counts (summed over label sets, e.g. per model), so the window holds exactly the
requests completed in it. It turns that window histogram into one latency per request by the
histogram quantile rule (linear interpolation inside a bucket, as ``histogram_quantile`` does):
request ``i`` of ``n`` gets the ``(i + 0.5)/n`` quantile. Means and p99 are then accurate to the
bucket resolution. Requests in the ``+Inf`` bucket get the highest finite bound (a lower bound).

The unit comes from the metric name (``_seconds``, ``_ms``/``_milliseconds``, ``_us``/``_microseconds``);
another name is refused rather than guessed. A counter that went backwards (the resident restarted)
gives an empty window with a note: no data, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from canary.errors import ProbeError
from canary.probe.interfaces import WindowSample
from canary.profile import WorkloadProfile

#: Pseudo-samples per window at most (the quantile grid is coarser beyond this).
MAX_SAMPLES_PER_WINDOW = 20_000


def unit_scale_to_ms(metric: str) -> float:
    name = metric.lower()
    if name.endswith(("_seconds", "_second", "_s")):
        return 1000.0
    if name.endswith(("_milliseconds", "_ms")):
        return 1.0
    if name.endswith(("_microseconds", "_us")):
        return 0.001
    raise ProbeError(
        f"latency metric {metric!r}: its unit is not in its name (expected _seconds, _ms or _us); "
        "refusing to guess"
    )


def parse_buckets(text: str, metric: str) -> dict[float, float]:
    """Cumulative bucket counts of ``metric`` by upper bound, summed over label sets.

    Raises ``ProbeError`` when the text does not parse or holds no such histogram."""
    totals: dict[float, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != metric + "_bucket":
                    continue
                le = float(sample.labels["le"])
                totals[le] = totals.get(le, 0.0) + float(sample.value)
    except (ValueError, KeyError) as exc:
        raise ProbeError(f"cannot parse the metrics text for {metric!r}: {exc}") from exc
    if not totals:
        raise ProbeError(f"no histogram buckets named {metric}_bucket in the metrics")
    return totals


def window_histogram(before: dict[float, float], after: dict[float, float]) -> list[tuple[float, int]] | None:
    """Per-bucket (non-cumulative) request counts in the window as ``(upper_bound, count)``, sorted.

    ``None`` when a counter went backwards (a reset) or the bucket layout changed."""
    if set(before) != set(after):
        return None
    bounds = sorted(after)
    result: list[tuple[float, int]] = []
    previous = 0.0
    for le in bounds:
        delta = after[le] - before[le]
        if delta < 0:
            return None
        result.append((le, round(delta - previous)))
        previous = delta
    if any(count < 0 for _, count in result):
        return None
    return result


def quantile_samples(buckets: Sequence[tuple[float, int]], scale_to_ms: float) -> list[float]:
    """One latency per request of the window histogram (see the module docstring)."""
    total = sum(count for _, count in buckets)
    if total == 0:
        return []
    n = min(total, MAX_SAMPLES_PER_WINDOW)
    finite = [le for le, _ in buckets if math.isfinite(le)]
    top = finite[-1] if finite else math.nan
    samples: list[float] = []
    cumulative: list[tuple[float, float, int]] = []  # (lower, upper, cumulative count at upper)
    running = 0
    lower = 0.0
    for le, count in buckets:
        running += count
        cumulative.append((lower, le, running))
        lower = le if math.isfinite(le) else lower
    for i in range(n):
        rank = (i + 0.5) / n * total
        below = 0
        for lo, hi, cum in cumulative:
            if rank <= cum:
                in_bucket = cum - below
                if not math.isfinite(hi):
                    value = top
                else:
                    value = lo + (hi - lo) * ((rank - below) / in_bucket if in_bucket else 1.0)
                samples.append(value * scale_to_ms)
                break
            below = cum
    return samples


class PrometheusMonitor:
    name = "prometheus"
    simulated = False

    def __init__(self, profile: WorkloadProfile, *, request_timeout_s: float = 5.0) -> None:
        spec = profile.canary
        if spec is None or not spec.metrics_url or not spec.latency_metric:
            raise ProbeError(
                f"profile {profile.name!r}: monitor 'prometheus' needs canary.metrics_url and latency_metric"
            )
        self.url = spec.metrics_url
        self.metric = spec.latency_metric
        self.scale_to_ms = unit_scale_to_ms(self.metric)
        self.request_timeout_s = request_timeout_s
        self._client: httpx.AsyncClient | None = None

    async def open(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.request_timeout_s)

    async def scrape(self) -> dict[float, float]:
        if self._client is None:
            raise ProbeError("prometheus monitor used before open()")
        try:
            response = await self._client.get(self.url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ProbeError(f"cannot scrape {self.url}: {exc}") from exc
        return parse_buckets(response.text, self.metric)

    async def measure(self, duration_s: float) -> WindowSample:
        before = await self.scrape()
        await anyio.sleep(duration_s)
        after = await self.scrape()
        buckets = window_histogram(before, after)
        if buckets is None:
            return WindowSample([], duration_s, note="histogram reset or changed layout during the window")
        return WindowSample(quantile_samples(buckets, self.scale_to_ms), duration_s)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
