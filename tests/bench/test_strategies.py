"""`canary bench --strategies`: the comparison as a real subprocess (its rows and plot), and the parts
it is built from (earlier versions, the phase change, scoring) on their own."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from canary.bench.policies import Decision
from canary.bench.scenarios import build_suite
from canary.bench.strategies import (
    ROW_FIELDS,
    STRATEGIES,
    history_scenario,
    phase_changed,
    scaled_profile,
    score,
)
from canary.bench.truth import Truth
from tests.support.paths import canary_cmd, cli_env


@pytest.fixture(scope="module")
def strategies(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("strategies")
    out = tmp / "out"
    proc = subprocess.run([*canary_cmd(), "bench", "--strategies", "--quick", "--out", str(out)],
                          capture_output=True, text=True, env=cli_env(tmp), timeout=900)
    return proc, out


@pytest.mark.slow
@pytest.mark.timeout(960)
def test_strategies_json_has_a_row_per_strategy(strategies: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = strategies
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads((out / "strategies.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in doc["rows"]] == list(STRATEGIES)
    for row in doc["rows"]:
        assert set(ROW_FIELDS) <= set(row)
        assert row["false_admits"] + row["false_rejects"] + row["unknowns"] <= len(doc["pairs"])
    rows = {r["name"]: r for r in doc["rows"]}
    for name in ("no-probe", "offline-profile", "analytical"):
        assert rows[name]["probes"] == 0 and rows[name]["probes_per_100_repeated"] == 0
        assert rows[name]["tta_median_s"] == 0
    assert rows["canary"]["probes"] > 0  # unseen pairs cost the pure canary probes
    assert set(doc["targets"]) == {"no_more_false_admits", "no_more_unknowns", "half_median_tta",
                                   "fewer_probes_per_100"}
    assert (out / "strategies.png").stat().st_size > 10_000
    assert "hybrid vs canary:" in proc.stdout
    progress = [line for line in (proc.stdout + proc.stderr).splitlines() if " unseen: " in line and " FA, " in line]
    assert len(progress) == len(STRATEGIES)
    for line in progress:  # figures a person reads: rounded, and "never" rather than Python's None
        assert "None" not in line and re.search(r"median (\d+\.\d s|none decided);", line), line


@pytest.mark.slow
@pytest.mark.timeout(960)
def test_hybrid_decisions_without_a_probe_are_predicted(strategies: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = strategies
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "strategies.json").read_text(encoding="utf-8"))
    for d in doc["detail"]["hybrid"]["unseen_detail"]:
        if d["decided_by"] == "predicted":
            assert d["time_to_admission_s"] == 0 and d["exposure"] == 0 and "predicted:" in d["reason"]


def test_an_earlier_version_changes_only_the_candidate() -> None:
    suite, _ = build_suite(quick=True, seed=0)
    sc = next(s for s in suite if s.family == "dram")
    old = history_scenario(sc, 2, seed=0)
    assert old.candidate.version == f"{sc.candidate.version}-prev2"
    assert old.snapshot == sc.snapshot and old.candidate.name == sc.candidate.name
    assert history_scenario(sc, 2, seed=0).candidate == old.candidate  # seeded
    assert history_scenario(sc, 3, seed=0).candidate != old.candidate


def test_the_phase_change_gives_the_resident_a_heavier_phase_and_a_new_shape_family() -> None:
    suite, _ = build_suite(quick=True, seed=0)
    sc = next(s for s in suite if s.family == "dram")
    after = phase_changed(sc)
    before_p, after_p = sc.snapshot.residents[0].profile, after.snapshot.residents[0].profile
    assert before_p is not None and after_p is not None
    assert after_p.shape_family == before_p.shape_family + ",phase2" and after_p.version == before_p.version
    assert after.candidate == sc.candidate


def test_scaling_caps_fractions_at_one() -> None:
    suite, _ = build_suite(quick=True, seed=0)
    p = next(s for s in suite if s.family == "dram").candidate
    scaled = scaled_profile(p, duty=50.0, dram=50.0)
    assert all(ph.duty_cycle <= 1.0 and ph.dram_intensity <= 1.0 for ph in scaled.phases)
    assert scaled.dram_intensity is None or scaled.dram_intensity <= 1.0


def _truth(safe: bool) -> Truth:
    return Truth(safe, None if safe else "interference", "simulated", 10.0, 1.0 if safe else 30.0, None, "")


def test_score_counts_errors_times_and_probe_time_beside_unsafe_pairs() -> None:
    probe = {"outcome": "unsafe"}
    rows = [
        (Decision("admit", None, 0.0, 0, decided_by="predicted"), _truth(True)),
        (Decision("admit", None, 0.0, 0, decided_by="predicted"), _truth(False)),   # false admit
        (Decision("reject", None, 40.0, 12, decided_by="canary", probe=probe), _truth(False)),
        (Decision("unknown", None, 100.0, 30, decided_by="canary", probe=probe), _truth(True)),
        (Decision("reject", None, 0.0, 0, decided_by="cache"), _truth(True)),       # false reject
    ]
    s = score(rows)
    assert (s["false_admits"], s["false_rejects"], s["unknowns"], s["probes"]) == (1, 1, 1, 2)
    assert s["tta_median_s"] == 0.0 and s["tta_p90_s"] == 100.0 and s["exposure_median"] == 0.0
    assert s["resident_slo_impact"] == 40.0


def test_strategies_out_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    proc = subprocess.run([*canary_cmd(), "bench", "--strategies", "--quick", "--out", str(f)],
                          capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr and "Traceback" not in proc.stderr
