"""`benchmarks/judge.py` in miniature: a few families, a few trials, every method, the JSON it writes.

The full run (1,000 trials per family) is a benchmark, not a test; this checks that the script runs,
that its numbers are consistent with their definitions, and that the clear families come out the way
their truth says — properties that hold at any trial count."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = (
    "sequential",
    "sequential+guard",
    "fixed-horizon",
    "every-pair uncorrected",
    "Kayenta MW (differs from baseline)",
)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("judge-bench") / "judge.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "judge.py"), "--trials", "40", "--horizon", "80",
         "--families", "clear-safe 0%,clear-unsafe 30%,at bound 15%", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "targets failed" in proc.stdout
    loaded: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.slow
def test_every_method_reports_every_family(doc: dict[str, Any]) -> None:
    names = [r["family"]["name"] for r in doc["results"]]
    assert names == ["clear-safe 0%", "clear-unsafe 30% (2x bound)", "at bound 15%"]
    for r in doc["results"]:
        assert set(r["methods"]) == set(METHODS)
        for m in r["methods"].values():
            assert 0.0 <= m["inconclusive"] <= 1.0
            assert m["decided"] == round((1 - m["inconclusive"]) * 40)
            if r["family"]["truth_pct"] >= doc["settings"]["bound_pct"]:
                assert m["false_reject"] is None and m["false_admit"] is not None
                assert m["false_admit_se"] == pytest.approx(math.sqrt(m["false_admit"] * (1 - m["false_admit"]) / 40))
            else:
                assert m["false_admit"] is None and m["false_reject"] is not None


@pytest.mark.slow
def test_clear_families_decide_the_way_their_truth_says(doc: dict[str, Any]) -> None:
    by_name = {r["family"]["name"]: r["methods"] for r in doc["results"]}
    safe = by_name["clear-safe 0%"]["sequential"]
    unsafe = by_name["clear-unsafe 30% (2x bound)"]["sequential"]
    assert safe["false_reject"] == 0.0 and safe["decided"] >= 36
    # A safe verdict needs min_safe_pairs usable pairs; an unsafe one does not.
    assert safe["median_pairs_decided"] >= doc["settings"]["min_safe_pairs"]
    assert unsafe["false_admit"] == 0.0 and unsafe["median_pairs_decided"] < safe["median_pairs_decided"]
    # The fixed-horizon test always spends the whole horizon.
    assert by_name["clear-safe 0%"]["fixed-horizon"]["median_pairs_decided"] == 80
