"""`benchmarks/judge.py` in miniature: a few families, a few trials, every method, the JSON it writes.

The full run (1,000 trials per family) is a benchmark, not a test; this checks that the script runs,
that its numbers are consistent with their definitions, and that the clear families come out the way
their truth says — properties that hold at any trial count."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from canary.quantiles import quantile

ROOT = Path(__file__).resolve().parents[2]
GUARDED = "sequential+guard+slo"
METHODS = (
    "sequential",
    "sequential+old guard (unattributed)",
    "sequential+guard+slo",
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


@pytest.mark.slow
def test_guard_and_slo_rule_report_their_verdicts(doc: dict[str, Any]) -> None:
    assert doc["settings"]["max_excess"] == 6
    assert doc["settings"]["attribution_level"] == pytest.approx(0.05)
    known = {"judge", "futility", "budget", "guard", "slo", "guard-end", "slo-end", "not-now", "no-headroom"}
    for r in doc["results"]:
        g = r["methods"][GUARDED]
        assert r["slo_p99_ms"] > 0
        assert sum(g["rules"].values()) == 40
        assert {key.split(":")[0] for key in g["rules"]} <= known
        # The baseline over the SLO ends a probe before the candidate starts: never a verdict.
        # Neither does an SLO breach the resident's lack of headroom explains.
        for never in ("not-now:", "no-headroom:"):
            assert not any(k.startswith(never) and not k.endswith("inconclusive") for k in g["rules"])
        assert 0.0 <= g["not_now"] <= g["inconclusive"]
        assert 0.0 <= g["paused"] <= 1.0 and g["pauses_mean"] <= doc["settings"]["horizon_pairs"]
        if r["family"]["truth_pct"] < doc["settings"]["bound_pct"]:
            by = g["false_reject_by"]
            assert set(by) == {"judge", "guard", "slo"}
            assert sum(by.values()) == pytest.approx(g["false_reject"])
        else:
            assert g["false_reject_by"] is None


@pytest.mark.slow
def test_attribution_rarely_blames_a_candidate_that_changes_nothing(doc: dict[str, Any]) -> None:
    """clear-safe 0%: the windows are independent and the candidate changes nothing, so an SLO or guard
    breach is attributed to it (unsafe by rule slo or guard, or inconclusive for want of headroom) with
    probability at most the level alpha, however often it is looked at; the resident breaches its SLO
    alone in one window in ten, so most probes do pause."""
    by_name = {r["family"]["name"]: r["methods"] for r in doc["results"]}
    g = by_name["clear-safe 0%"][GUARDED]
    assert g["paused"] >= 0.5
    attributed = sum(g["rules"].get(k, 0) for k in ("slo:unsafe", "guard:unsafe", "no-headroom:inconclusive"))
    # 40 probes: far above alpha (0.05) would be >= 9 (Binomial(40, 0.07) reaches it with p < 0.01).
    assert attributed <= 8
    # With the candidate far beyond the bound the rules can only stop it sooner: no false admit.
    assert by_name["clear-unsafe 30% (2x bound)"][GUARDED]["false_admit"] == 0.0


def _benchmark_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("judge_benchmark", ROOT / "benchmarks" / "judge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_window_p99_is_the_nearest_rank_of_the_same_draws() -> None:
    bench = _benchmark_module()
    counts = np.array([[0, 1, 5], [50, 99, 120]])
    means, p99 = bench._window_means(np.random.default_rng(7), "pareto", counts)
    draws = bench._draw_latency(np.random.default_rng(7), "pareto", (counts.size, int(counts.max())))
    for index, k in enumerate(counts.reshape(-1)):
        row = draws[index, :k].tolist()
        if k == 0:
            assert math.isnan(means.reshape(-1)[index]) and math.isnan(p99.reshape(-1)[index])
            continue
        assert means.reshape(-1)[index] == pytest.approx(sum(row) / k)
        # Below 100 requests the nearest-rank p99 is the maximum; at 120 it is the 119th smallest.
        assert p99.reshape(-1)[index] == quantile(row, 0.99)
    assert p99[1, 0] == max(draws[3, :50]) and p99[1, 2] == sorted(draws[5, :120])[118]
