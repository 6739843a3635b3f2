"""Resident activity patterns from the Alibaba GenAI 2026 serving trace (per-pod GPU duty cycle).

Source: alibaba/clusterdata @ 7a6c496 ``cluster-trace-v2026-GenAI/pod_gpu_duty_cycle_anon.tar.gz``,
stored at ``../shared/data/alibaba-genai-2026/`` relative to the project root: one CSV with
``value`` (duty cycle, %), ``timestamp_anon`` (s, one sample a minute) and ``container_ip`` (a hash
per pod). The benchmark takes ten consecutive samples of a real pod as ten phases of a diffusion
serving resident, one simulated second per sampled minute (the order and the depth of the bursts
are the trace's; the time axis is compressed 60×, which the report states).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from canary.errors import InputError

WINDOW_SAMPLES = 10


class TraceDataMissing(InputError):
    """The duty-cycle trace is not where it should be."""


@dataclass(frozen=True)
class DutyWindow:
    """Ten consecutive duty-cycle samples (fractions) of one pod, from ``start_s`` (anonymised time)."""

    pod: str
    start_s: float
    duty: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.duty) / len(self.duty)

    @property
    def spread(self) -> float:
        return max(self.duty) - min(self.duty)


def load_duty_series(path: str | Path | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per pod, (timestamp, duty fraction) in time order — the simulator's loader of the same trace.
    ``TraceDataMissing`` when the archive is absent."""
    from canary.sim.alibaba import AlibabaDataMissing, load_duty_cycle_series

    try:
        return load_duty_cycle_series(path)
    except AlibabaDataMissing as exc:
        raise TraceDataMissing(exc.problem, file=exc.file) from None


def windows(series: dict[str, list[tuple[float, float]]]) -> list[DutyWindow]:
    """Every non-overlapping window of ``WINDOW_SAMPLES`` consecutive samples, pods in sorted order."""
    out: list[DutyWindow] = []
    for pod in sorted(series):
        points = series[pod]
        for i in range(0, len(points) - WINDOW_SAMPLES + 1, WINDOW_SAMPLES):
            chunk = points[i:i + WINDOW_SAMPLES]
            out.append(DutyWindow(pod, chunk[0][0], tuple(min(1.0, max(0.0, d)) for _, d in chunk)))
    return out


def pick(candidates: list[DutyWindow], *, mean: float, bursty: bool) -> DutyWindow:
    """The window nearest ``mean`` (within 5 points) with the largest spread (``bursty``) or the
    smallest (steady); ties broken by pod and time, so the pick is deterministic."""
    near = [w for w in candidates if abs(w.mean - mean) <= 0.05]
    if not near:
        raise InputError(f"no {WINDOW_SAMPLES}-sample window of the trace has a mean duty cycle near {mean:.0%}")
    key = (lambda w: (-w.spread, w.pod, w.start_s)) if bursty else (lambda w: (w.spread, w.pod, w.start_s))
    return sorted(near, key=key)[0]
