"""Resident activity patterns from the Alibaba GenAI 2026 serving trace (per-pod GPU duty cycle).

Source: alibaba/clusterdata @ 7a6c496 ``cluster-trace-v2026-GenAI/pod_gpu_duty_cycle_anon.tar.gz``,
stored at ``../shared/data/alibaba-genai-2026/`` relative to the project root: one CSV with
``value`` (duty cycle, %), ``timestamp_anon`` (s, one sample a minute) and ``container_ip`` (a hash
per pod). The benchmark takes ten consecutive samples of a real pod as ten phases of a diffusion
serving resident, one simulated second per sampled minute (the order and the depth of the bursts
are the trace's; the time axis is compressed 60×, which the report states).
"""

from __future__ import annotations

import csv
import io
import tarfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from canary.errors import InputError

TRACE_RELATIVE_PATH = Path("shared") / "data" / "alibaba-genai-2026" / "pod_gpu_duty_cycle_anon.tar.gz"
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


def default_trace_path() -> Path:
    return Path(__file__).resolve().parents[3] / TRACE_RELATIVE_PATH


def load_duty_series(path: str | Path | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per pod, (timestamp, duty fraction) in time order. ``TraceDataMissing`` when the archive is
    absent; ``InputError`` naming the file and field when it is not in the documented format."""
    file = Path(path) if path is not None else default_trace_path()
    if not file.is_file():
        raise TraceDataMissing(f"duty-cycle trace not found at {file}", file=str(file))
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    try:
        with tarfile.open(file, "r:gz") as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith(".csv")), None)
            if member is None:
                raise InputError("no CSV inside the archive", file=str(file))
            raw = tar.extractfile(member)
            if raw is None:
                raise InputError(f"cannot read {member.name}", file=str(file))
            for n, row in enumerate(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))):
                try:
                    series[row["container_ip"]].append((float(row["timestamp_anon"]), float(row["value"]) / 100.0))
                except (KeyError, ValueError) as exc:
                    raise InputError(f"row {n + 2}: {exc}", file=str(file), field="value") from None
    except (OSError, tarfile.TarError) as exc:
        raise InputError(f"cannot read the trace archive: {exc}", file=str(file)) from None
    return {pod: sorted(points) for pod, points in series.items()}


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
