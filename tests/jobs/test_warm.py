"""`canary warm` and `canary revalidate` through the CLI on the simulator and SQLite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PLAN = str(EXAMPLES / "plans" / "nightly-h100.yaml")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), *args], capture_output=True, text=True, env=cli_env(tmp_path), timeout=180)


@pytest.mark.slow
def test_warm_probes_then_resumes_from_fresh_evidence(tmp_path: Path) -> None:
    first = _run(tmp_path, "warm", PLAN, "--json")
    assert first.returncode == 0, first.stderr
    statuses = [p["status"] for p in json.loads(first.stdout)["pairs"]]
    assert statuses.count("probed") == 3 and statuses.count("does-not-fit") == 2
    assert "[1/5]" in first.stderr or "[2/5]" in first.stderr  # progress lines
    second = json.loads(_run(tmp_path, "warm", PLAN, "--json").stdout)
    assert [p["status"] for p in second["pairs"]].count("fresh") == 3


def test_warm_budget_exhaustion_skips_instead_of_overrunning(tmp_path: Path) -> None:
    proc = _run(tmp_path, "warm", PLAN, "--budget-s", "0.001", "--json")
    assert proc.returncode == 3, proc.stderr  # pairs left without evidence: not success (docs/jobs.md)
    report = json.loads(proc.stdout)
    assert any(p["status"] == "skipped-budget" for p in report["pairs"])


@pytest.mark.slow
def test_revalidate_marks_stale_and_reports_drift(tmp_path: Path) -> None:
    assert _run(tmp_path, "warm", PLAN).returncode == 0
    proc = _run(tmp_path, "revalidate", "--driver", "590.10.01", "--plan", PLAN, "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["stale_marked"] >= 3
    probed = [p for p in report["pairs"] if p["status"] == "probed"]
    assert len(probed) == 3
    assert all(p["old_outcome"] in ("safe", "unsafe") for p in probed)
    listed = json.loads(_run(tmp_path, "evidence", "list", "--status", "stale", "--json").stdout)
    assert len(listed) >= 3  # history kept: nothing deleted


def test_bad_plan_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "plan.yaml"
    bad.write_text("name: x\npairs: []\n")
    proc = _run(tmp_path, "warm", str(bad))
    assert proc.returncode == 2 and "pairs" in proc.stderr and "Traceback" not in proc.stderr
