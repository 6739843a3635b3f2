"""Gavel's measured co-location throughputs (V100), as pairs with slowdowns.

Source: stanford-futuredata/gavel @ c4fa400 ``scheduler/physical_cluster_throughputs.json``
(subset), stored at ``../shared/data/gavel/colocation_throughputs_v100_p100.json`` relative to the
project root. Format: ``d[gpu]["('<job>', 1)"]["null"]`` is the isolated throughput (steps/s);
``d[gpu][A][B] = [throughput of A next to B, throughput of B next to A]``; ``[0, 0]`` marks an
infeasible or failed pair. About 80 V100 entries equal the isolated value exactly (a clamp in the
source): they mean "no measurable slowdown", not an exact zero, and are flagged ``clamped``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from canary.errors import InputError

GAVEL_RELATIVE_PATH = Path("shared") / "data" / "gavel" / "colocation_throughputs_v100_p100.json"


class GavelDataMissing(InputError):
    """The Gavel data file is not where it should be (``../shared/data`` from the project root)."""


@dataclass(frozen=True)
class GavelPair:
    """One unordered pair measured on one V100 (space sharing). Slowdown = isolated/colocated − 1."""

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
    return project_root().parent / GAVEL_RELATIVE_PATH


def _job_name(key: str) -> str:
    """``"('ResNet-50 (batch size 16)', 1)"`` → ``"ResNet-50 (batch size 16)"``."""
    try:
        value = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        return key
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        return value[0]
    return key


def load_gavel_pairs(path: str | Path | None = None, *, gpu: str = "v100") -> list[GavelPair]:
    """Every feasible unordered pair (including a job with itself), skipping ``[0, 0]`` entries.

    Raises :class:`GavelDataMissing` when the file is absent and ``InputError`` when it is not in
    Gavel's format.
    """
    file = Path(path) if path is not None else default_gavel_path()
    if not file.is_file():
        raise GavelDataMissing(
            f"Gavel co-location data not found at {file}; expected ../shared/data/{GAVEL_RELATIVE_PATH.relative_to('shared/data')} "
            "relative to the project root",
            file=str(file),
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read Gavel data: {exc}", file=str(file)) from None
    if not isinstance(data, dict) or gpu not in data or not isinstance(data[gpu], dict):
        raise InputError(f"no '{gpu}' section", file=str(file), field=gpu)
    table = data[gpu]
    isolated: dict[str, float] = {}
    for key, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("null"), int | float):
            raise InputError(
                "expected a mapping with an isolated 'null' throughput", file=str(file), field=f"{gpu}.{key}"
            )
        isolated[key] = float(entry["null"])
    pairs: list[GavelPair] = []
    keys = sorted(table)
    for i, a in enumerate(keys):
        for b in keys[i:]:
            value = table[a].get(b)
            if value is None:
                continue
            if not (isinstance(value, list) and len(value) == 2):
                raise InputError(
                    "expected [throughput_a, throughput_b]", file=str(file), field=f"{gpu}.{a}.{b}"
                )
            ta, tb = float(value[0]), float(value[1])
            if ta <= 0 or tb <= 0:
                continue  # [0, 0]: infeasible or failed in the source
            ia, ib = isolated[a], isolated[b]
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
