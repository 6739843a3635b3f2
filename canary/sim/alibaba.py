"""Production duty-cycle traces as simulator workloads (Alibaba GenAI serving, 2026 trace).

Source: alibaba/clusterdata @ 7a6c496 ``cluster-trace-v2026-GenAI/pod_gpu_duty_cycle_anon.tar.gz``,
stored at ``../shared/data/alibaba-genai-2026/`` relative to the project root: one CSV,
``value,timestamp_anon,container_ip`` — the GPU duty cycle in percent of one pod over the sampling
interval (57 s or a multiple), the anonymised time in seconds, and a hash naming the pod.

:func:`serving_profile_from_duty_series` turns one pod's series into an online-inference profile
whose phases replay the series, so a benchmark can put a realistically bursty resident next to a
candidate.
"""

from __future__ import annotations

import csv
import io
import itertools
import statistics
import tarfile
from pathlib import Path

from canary.errors import InputError
from canary.profile import MemoryEnvelope, Phase, Provenance, Slo, WorkloadProfile
from canary.sim.gavel import project_root

DUTY_CYCLE_RELATIVE_PATH = Path("shared") / "data" / "alibaba-genai-2026" / "pod_gpu_duty_cycle_anon.tar.gz"


class AlibabaDataMissing(InputError):
    """The Alibaba GenAI trace is not where it should be (``../shared/data`` from the project root)."""


def default_duty_cycle_path() -> Path:
    return project_root().parent / DUTY_CYCLE_RELATIVE_PATH


def load_duty_cycle_series(path: str | Path | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per pod (``container_ip``), its samples as ``(time_s, duty_fraction)`` sorted by time.

    Accepts the ``.tar.gz`` archive or the extracted CSV. Raises :class:`AlibabaDataMissing` when
    the file is absent and ``InputError`` naming the row when a value is not a number.
    """
    file = Path(path) if path is not None else default_duty_cycle_path()
    if not file.is_file():
        raise AlibabaDataMissing(
            f"Alibaba GenAI duty-cycle trace not found at {file}; expected "
            f"../shared/data/alibaba-genai-2026/{DUTY_CYCLE_RELATIVE_PATH.name} relative to the project root",
            file=str(file),
        )
    if file.name.endswith(".tar.gz"):
        with tarfile.open(file, "r:gz") as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith(".csv")), None)
            if member is None:
                raise InputError("the archive holds no CSV file", file=str(file))
            extracted = archive.extractfile(member)
            if extracted is None:
                raise InputError(f"cannot read {member.name} from the archive", file=str(file))
            text = extracted.read().decode("utf-8")
    else:
        text = file.read_text(encoding="utf-8")
    series: dict[str, list[tuple[float, float]]] = {}
    for line, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            time_s = float(row["timestamp_anon"])
            duty_pct = float(row["value"])
            pod = row["container_ip"]
        except (KeyError, TypeError, ValueError):
            raise InputError(
                "expected columns value, timestamp_anon, container_ip with numbers",
                file=str(file),
                field=f"line {line}",
            ) from None
        series.setdefault(pod, []).append((time_s, min(1.0, max(0.0, duty_pct / 100.0))))
    for samples in series.values():
        samples.sort()
    return series


def serving_profile_from_duty_series(
    name: str,
    samples: list[tuple[float, float]],
    *,
    memory_bytes: int,
    latency_p99_ms: float,
    dram_intensity: float | None = None,
    seconds_per_sample: float | None = None,
) -> WorkloadProfile:
    """An online-inference profile whose phases replay ``samples`` (one phase per run of equal
    duty cycle). Each sample lasts until the next one (gaps in the trace are kept); the last lasts
    the typical (median) spacing. ``seconds_per_sample`` compresses time so that the typical spacing
    lasts that long, letting a long trace fit a short benchmark; ``None`` keeps the trace's time. Raises ``InputError`` for
    fewer than two samples (no spacing to read)."""
    if len(samples) < 2:
        raise InputError(
            f"pod series {name!r} has {len(samples)} sample(s); need at least 2", field="samples"
        )
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
    typical_gap = statistics.median(g for g in gaps if g > 0) if any(g > 0 for g in gaps) else 1.0
    phases: list[Phase] = []
    run_duty = samples[0][1]
    run_s = 0.0
    for i, (_, duty) in enumerate(samples):
        span = gaps[i] if i < len(gaps) and gaps[i] > 0 else typical_gap
        if seconds_per_sample is not None:
            span = seconds_per_sample * span / typical_gap
        if duty != run_duty and run_s > 0:
            phases.append(Phase(name=f"p{len(phases)}", duration_s=run_s, duty_cycle=run_duty))
            run_s = 0.0
        run_duty = duty
        run_s += span
    phases.append(Phase(name=f"p{len(phases)}", duration_s=run_s, duty_cycle=run_duty))
    return WorkloadProfile(
        name=name,
        version="alibaba-genai-2026",
        workload_class="online-inference",
        latency_critical=True,
        memory=MemoryEnvelope(reserved_bytes=memory_bytes, peak_bytes=memory_bytes),
        phases=tuple(phases),
        dram_intensity=dram_intensity,
        slo=Slo(latency_p99_ms=latency_p99_ms),
        provenance=Provenance(
            source="observed",
            tool="canary.sim.alibaba",
            notes=f"duty cycle replayed from Alibaba GenAI pod {name} ({len(samples)} samples)",
        ),
    )
