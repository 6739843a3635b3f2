"""`canary snapshot` as a user runs it: a real subprocess per case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRAPE = Path(__file__).parent / "data" / "dcgm-exporter-h200x2.prom"


def canary(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "canary.cli", "snapshot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_catalog_device_table() -> None:
    done = canary("h200")
    assert done.returncode == 0, done.stderr
    rows = dict(
        line.split(None, 1)
        for line in done.stdout.splitlines()
        if line and not line.startswith(" ") and "  " in line
    )
    assert rows["device"].startswith("h200")
    assert "compute" in done.stdout and "DEFAULT" in done.stdout
    assert "residents" in done.stdout


def test_json_with_dcgm_scrape_fills_telemetry() -> None:
    done = canary("h200", "--json", "--dcgm", str(SCRAPE))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device_type"] == "h200"
    assert data["telemetry"]["sm_occupancy_pct"]["value"] == 11.2563
    assert data["telemetry"]["sm_occupancy_pct"]["source"] == "dcgm-exporter"


def test_bad_device_and_bad_scrape_are_exit_2() -> None:
    done = canary("nvml:x")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    done = canary("h200", "--dcgm", str(ROOT / "no-such-scrape.prom"))
    assert done.returncode == 2 and "no-such-scrape.prom" in done.stderr and "Traceback" not in done.stderr


def test_snapshot_file_lists_residents() -> None:
    done = canary("examples/snapshots/f-unprofiled-resident.yaml")
    assert done.returncode == 0, done.stderr
    assert "resident" in done.stdout and "unprofiled" in done.stdout
