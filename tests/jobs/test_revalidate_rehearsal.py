"""An SRE rehearses a driver upgrade on the simulator: ``canary revalidate --driver X`` re-probes on
simulated devices reporting X, records a drift event, and the new evidence decides ``canary fit`` on a
simulated device told to report X (``--sim-driver`` / ``$CANARY_SIM_DRIVER``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from canary.backends import SIMULATOR_DRIVER, reset_sim_driver, resolve_device, set_sim_driver
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

PROFILES = EXAMPLES / "profiles"
NEW = "590.10.02"
FIT = ["fit", "h100", str(PROFILES / "embedding-service.yaml"), "--resident", str(PROFILES / "resnet50-training.yaml"),
       "--json"]


def _plan(tmp_path: Path) -> str:
    path = tmp_path / "hot.json"
    path.write_text(json.dumps({"name": "hot", "budget_s": 120, "pairs": [
        {"device": "h100", "candidate": str(PROFILES / "embedding-service.yaml"),
         "residents": [str(PROFILES / "resnet50-training.yaml")]}]}))
    return str(path)


@pytest.mark.slow
def test_a_rehearsed_upgrade_leaves_evidence_fit_can_use(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    env = cli_env(tmp_path)
    plan = _plan(tmp_path)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_in_process(["--db", url, *argv], capsys=capsys, monkeypatch=monkeypatch, env=env)

    warm = cli("warm", plan, "--json")
    assert warm.returncode == 0, warm.stderr
    assert [p["status"] for p in json.loads(warm.stdout)["pairs"]] == ["probed"]
    before = json.loads(cli(*FIT).stdout)
    assert before["decided_by"] == "cache"  # evidence under the simulator's own driver

    rv = cli("revalidate", "--driver", NEW, "--device-type", "h100", "--plan", plan, "--json")
    assert rv.returncode == 0, rv.stderr
    report = json.loads(rv.stdout)
    assert report["stale_marked"] == 1 and len(report["drift_events"]) == 1
    assert [(p["status"], p["old_driver"]) for p in report["pairs"]] == [("probed", SIMULATOR_DRIVER)]

    # the old evidence is stale, the new one is under NEW: a device still on the old driver has none
    stale = json.loads(cli(*FIT).stdout)
    assert stale["decided_by"] != "cache" and NEW in json.dumps(stale)
    # a simulated device reporting NEW is decided by the new evidence: option, then environment
    after = json.loads(cli("--sim-driver", NEW, *FIT).stdout)
    assert after["decided_by"] == "cache" and after["verdict"] == before["verdict"]
    env_run = subprocess.run([*canary_cmd(), "--db", url, *FIT], capture_output=True, text=True, timeout=120,
                             env=env | {"CANARY_SIM_DRIVER": NEW})
    assert json.loads(env_run.stdout)["decided_by"] == "cache", env_run.stderr

    # the manual revalidation is a drift event, with the pair's old and new outcome
    events = json.loads(cli("drift", "--json").stdout)
    assert [(e["device_type"], e["old_driver"], e["new_driver"], e["stale_marked"]) for e in events] == [
        ("h100-sxm", SIMULATOR_DRIVER, NEW, 1)]
    drift = json.loads(cli("drift", events[0]["id"], "--json").stdout)
    assert [(p["old_outcome"], p["new_outcome"]) for p in drift["pairs"]] == [
        (report["pairs"][0]["old_outcome"], report["pairs"][0]["outcome"])]


def test_revalidate_json_without_a_plan_is_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    for argv in (["--device-type", "h100"], ["--yes"], []):  # applied twice, then the preview
        out = run_in_process(["--db", url, "revalidate", "--driver", NEW, "--json", *argv], capsys=capsys,
                             monkeypatch=monkeypatch, env=cli_env(tmp_path))
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["driver"] == NEW
        assert ("preview" in doc) == (argv == [])


def test_a_snapshot_file_or_catalog_device_reports_the_chosen_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
    monkeypatch.delenv("CANARY_SIM_DRIVER", raising=False)
    assert resolve_device("h100").snapshot.driver_version == SIMULATOR_DRIVER
    assert resolve_device(snapshot).snapshot.driver_version == "580.95.05"  # the file's own
    token = set_sim_driver(NEW)
    try:
        assert resolve_device("h100").snapshot.driver_version == NEW
        assert resolve_device(snapshot).snapshot.driver_version == NEW
    finally:
        reset_sim_driver(token)
    monkeypatch.setenv("CANARY_SIM_DRIVER", "591.1")
    assert resolve_device("h100").snapshot.driver_version == "591.1"


@pytest.mark.parametrize(("argv", "env", "field"), [
    pytest.param(["--sim-driver", " "], {}, "--sim-driver", id="blank-option"),
    pytest.param([], {"CANARY_SIM_DRIVER": "x\x1by"}, "CANARY_SIM_DRIVER", id="control-char-env"),
])
def test_a_bad_simulated_driver_is_bad_input(tmp_path: Path, argv: list[str], env: dict[str, str], field: str,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_in_process([*argv, *FIT], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path) | env)
    assert out.returncode == 2 and f"'{field}'" in out.stderr and "Traceback" not in out.stderr
