"""``--sim-driver`` and ``$CANARY_SIM_DRIVER`` reach an agent's snapshot-file devices, as they reach
``canary fit``'s: the agent published the file's own driver_version whatever was asked, so a driver
upgrade could not be rehearsed on a simulated node (no drift event, nothing revalidated)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env

SNAPSHOT = EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"


def _canary(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = cli_env(tmp_path)
    base.pop("CANARY_SIM_DRIVER", None)
    return subprocess.run([*canary_cmd(), *args], capture_output=True, text=True, timeout=120,
                          env={**base, **(env or {})})


def _published_driver(tmp_path: Path, db: str) -> str:
    listed = _canary(tmp_path, "agent", "list", "--json", "--db", db)
    assert listed.returncode == 0, listed.stderr
    (device,) = json.loads(listed.stdout)
    return str(device["driver_version"])


@pytest.mark.parametrize(("before", "after", "env"), [
    pytest.param(["--sim-driver", "590.10.02"], [], {}, id="option-before-the-command"),
    pytest.param([], ["--sim-driver", "590.10.02"], {}, id="option-after-the-command"),
    pytest.param([], [], {"CANARY_SIM_DRIVER": "590.10.02"}, id="environment"),
])
def test_a_snapshot_file_device_reports_the_simulated_driver(
        tmp_path: Path, before: list[str], after: list[str], env: dict[str, str]) -> None:
    db = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    device = f"gpu0={SNAPSHOT}"
    first = _canary(tmp_path, "--db", db, "agent", "run", "--once", "--node", "n1", "--device", device)
    assert first.returncode == 0, first.stderr
    assert _published_driver(tmp_path, db) == "580.95.05"  # the file's own driver_version

    second = _canary(tmp_path, *before, "--db", db, "agent", "run", "--once", "--node", "n1", "--device", device,
                     *after, env=env)
    assert second.returncode == 0, second.stderr
    assert _published_driver(tmp_path, db) == "590.10.02"

    drift = _canary(tmp_path, "drift", "--json", "--db", db)
    assert drift.returncode == 0, drift.stderr
    (event,) = json.loads(drift.stdout)
    assert (event["old_driver"], event["new_driver"]) == ("580.95.05", "590.10.02")
