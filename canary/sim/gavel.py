"""Gavel's measured co-location throughputs (V100, P100, or any GPU a file in its format names).

Source: stanford-futuredata/gavel @ c4fa400 ``scheduler/physical_cluster_throughputs.json``
(subset, MIT), carried inside the package at ``canary/sim/data/gavel/`` with its licence and
provenance (``canary/sim/data/README.md``). Format: ``d[gpu]["('<job>', 1)"]["null"]`` is the isolated throughput (steps/s);
``d[gpu][A][B] = [throughput of A next to B, throughput of B next to A]``; ``[0, 0]`` marks an
infeasible or failed pair. About 80 V100 entries equal the isolated value exactly (a clamp in the
source): they mean "no measurable slowdown", not an exact zero, and are flagged ``clamped``.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path

from canary.errors import InputError

DATA_DIR = Path(__file__).resolve().parent / "data"
GAVEL_FILE_NAME = "colocation_throughputs_v100_p100.json"


class GavelDataMissing(InputError):
    """The Gavel data file is not where it was said to be."""


@dataclass(frozen=True)
class GavelPair:
    """One unordered pair measured on one GPU (both jobs on it at once). Slowdown = isolated/colocated − 1."""

    job_a: str
    job_b: str
    isolated_a: float
    isolated_b: float
    colocated_a: float
    colocated_b: float
    slowdown_a_pct: float
    slowdown_b_pct: float
    clamped: bool


def project_root() -> Path:
    """The repository root (the folder holding ``canary/``)."""
    return Path(__file__).resolve().parents[2]


def default_gavel_path() -> Path:
    """The Gavel subset shipped with the package."""
    return DATA_DIR / "gavel" / GAVEL_FILE_NAME


def _read(file: Path) -> dict[str, object]:
    if not file.is_file():
        raise GavelDataMissing(f"Gavel co-location data not found at {file}", file=str(file))
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read Gavel data: {exc}", file=str(file)) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object keyed by GPU name", file=str(file))
    return data


def gavel_gpus(path: str | Path | None = None) -> list[str]:
    """The GPU names a Gavel-format file has a section for, sorted (Gavel's full file also has
    variants such as ``v100_unconsolidated``; each is a section)."""
    file = Path(path) if path is not None else default_gavel_path()
    return sorted(k for k, v in _read(file).items() if isinstance(v, dict))


def load_isolated(path: str | Path | None = None, *, gpu: str = "v100") -> dict[str, float]:
    """Each job's isolated throughput (steps/s) on ``gpu``, keyed by job name."""
    file = Path(path) if path is not None else default_gavel_path()
    table = _section(_read(file), file, gpu)
    out: dict[str, float] = {}
    for key in _single_gpu_keys(table):
        value = _isolated(table[key], file, gpu, key)
        if value is not None:
            out[_job_name(key)] = value
    return out


def jobs_never_alone(path: str | Path | None = None, *, gpu: str = "v100") -> list[str]:
    """Jobs of ``gpu`` whose isolated throughput is 0 (they never ran alone there): their pairs are
    skipped, like ``[0, 0]`` pairs."""
    file = Path(path) if path is not None else default_gavel_path()
    table = _section(_read(file), file, gpu)
    return [_job_name(k) for k in _single_gpu_keys(table) if _isolated(table[k], file, gpu, k) is None]


def _section(data: dict[str, object], file: Path, gpu: str) -> dict[str, object]:
    table = data.get(gpu)
    if not isinstance(table, dict):
        have = ", ".join(sorted(k for k, v in data.items() if isinstance(v, dict))) or "none"
        raise InputError(f"no '{gpu}' section (the file has: {have})", file=str(file), field=gpu)
    return table


def _isolated(entry: object, file: Path, gpu: str, key: str) -> float | None:
    """The isolated throughput; ``None`` where it is 0 (the job did not run alone on this GPU)."""
    value = entry.get("null") if isinstance(entry, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or not math.isfinite(value):
        raise InputError(
            "expected a mapping with a non-negative isolated 'null' throughput", file=str(file), field=f"{gpu}.{key}"
        )
    return float(value) if value > 0 else None


def _parse_key(key: str) -> tuple[str, int]:
    """``"('ResNet-50 (batch size 16)', 1)"`` → ``("ResNet-50 (batch size 16)", 1)``; a key that is
    not such a tuple is taken as a job name at scale factor 1."""
    try:
        value = ast.literal_eval(key)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return key, 1
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        scale = value[1] if len(value) > 1 and isinstance(value[1], int) else 1
        return value[0], scale
    return key, 1


def _job_name(key: str) -> str:
    """``"('ResNet-50 (batch size 16)', 1)"`` → ``"ResNet-50 (batch size 16)"``."""
    return _parse_key(key)[0]


def _single_gpu_keys(table: dict[str, object]) -> list[str]:
    """The keys of jobs on one GPU (scale factor 1): pairs were measured only there, and the
    distributed entries (scale factor 2, 4, ...) of Gavel's full file would collide by name."""
    return sorted(k for k in table if _parse_key(k)[1] == 1)


def load_gavel_pairs(path: str | Path | None = None, *, gpu: str = "v100") -> list[GavelPair]:
    """Every feasible unordered pair (including a job with itself), skipping ``[0, 0]`` entries.

    Raises :class:`GavelDataMissing` when the file is absent and ``InputError`` when it is not in
    Gavel's format.
    """
    file = Path(path) if path is not None else default_gavel_path()
    table = _section(_read(file), file, gpu)
    keys = _single_gpu_keys(table)
    isolated = {key: _isolated(table[key], file, gpu, key) for key in keys}
    pairs: list[GavelPair] = []
    for i, a in enumerate(keys):
        for b in keys[i:]:
            entry, other = table[a], table[b]
            assert isinstance(entry, dict) and isinstance(other, dict)
            value = entry.get(b)
            if value is None:
                # Written only the other way round: [throughput of B, throughput of A].
                reverse = other.get(a)
                if not (isinstance(reverse, list) and len(reverse) == 2):
                    continue
                value = [reverse[1], reverse[0]]
            if not (
                isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            ):
                raise InputError(
                    "expected [throughput_a, throughput_b]", file=str(file), field=f"{gpu}.{a}.{b}"
                )
            ta, tb = float(value[0]), float(value[1])
            ia, ib = isolated[a], isolated[b]
            if ta <= 0 or tb <= 0 or ia is None or ib is None:
                continue  # [0, 0]: infeasible or failed in the source; or a job that never ran alone
            pairs.append(
                GavelPair(
                    job_a=_job_name(a),
                    job_b=_job_name(b),
                    isolated_a=ia,
                    isolated_b=ib,
                    colocated_a=ta,
                    colocated_b=tb,
                    slowdown_a_pct=(ia / ta - 1.0) * 100.0,
                    slowdown_b_pct=(ib / tb - 1.0) * 100.0,
                    clamped=ta >= ia or tb >= ib,
                )
            )
    return pairs


def isolated_throughputs(pairs: list[GavelPair]) -> dict[str, float]:
    """Each job's isolated throughput (steps/s) as the pairs carry it."""
    out: dict[str, float] = {}
    for p in pairs:
        out[p.job_a] = p.isolated_a
        out[p.job_b] = p.isolated_b
    return out
