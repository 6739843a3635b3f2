"""``canary revalidate``'s own input: the driver version is trimmed and checked as ``--sim-driver``
is, a bad one or an unknown device type is exit 2 naming the option with nothing written, and the
command it suggests runs as printed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env

PROFILES = EXAMPLES / "profiles"


def _plan(tmp_path: Path) -> str:
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"name": "one", "budget_s": 120, "pairs": [{
        "device": "h100", "candidate": str(PROFILES / "embedding-service.yaml"),
        "residents": [str(PROFILES / "resnet50-training.yaml")]}]}))
    return str(path)


@pytest.mark.parametrize(("args", "field"), [
    pytest.param(["--driver", "  ", "--yes"], "--driver", id="blank-driver"),
    pytest.param(["--driver", "590\x1b[2J", "--yes"], "--driver", id="control-characters"),
    pytest.param(["--driver", "5" * 65, "--yes"], "--driver", id="too-long"),
    pytest.param(["--driver", "not a version!!", "--yes"], "--driver", id="not-a-version"),
    pytest.param(["--driver", "590.10.02", "--device-type", "zzz"], "--device-type", id="unknown-device-type"),
])
def test_bad_revalidate_input_names_the_option_and_writes_nothing(
        tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_in_process(["revalidate", *args], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert f"field '{field}'" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "evidence.sqlite3").exists()


def test_a_driver_given_with_spaces_keys_the_new_evidence_to_the_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    env, plan = cli_env(tmp_path), _plan(tmp_path)
    assert run_in_process(["warm", plan], capsys=capsys, monkeypatch=monkeypatch, env=env).returncode == 0
    first = run_in_process(["revalidate", "--driver", " 590.10.02", "--yes", "--plan", plan, "--json"],
                           capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["driver"] == "590.10.02" and doc["stale_marked"] == 1
    # the same upgrade confirmed again: the new driver's own evidence is not "another driver's"
    again = run_in_process(["revalidate", "--driver", "590.10.02 ", "--yes", "--json"], capsys=capsys,
                           monkeypatch=monkeypatch, env=env)
    assert json.loads(again.stdout)["stale_marked"] == 0


def test_the_suggested_command_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env, plan = cli_env(tmp_path), _plan(tmp_path)
    out = run_in_process(["revalidate", "--driver", "590.10.02", "--device-type", "h100"], capsys=capsys,
                         monkeypatch=monkeypatch, env=env)
    assert out.returncode == 0, out.stderr
    suggested = out.stdout.split("`")[1]
    argv = shlex.split(suggested.replace("PLAN", plan))
    assert argv[:2] == ["canary", "revalidate"]
    rerun = run_in_process(argv[1:], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert "probed 1" in rerun.stdout


def test_device_type_scope_limits_the_plans_reprobes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(tmp_path)
    pair = {"candidate": str(PROFILES / "embedding-service.yaml"), "residents": [str(PROFILES / "resnet50-training.yaml")]}
    plan = tmp_path / "two.json"
    plan.write_text(json.dumps({"name": "two", "budget_s": 120, "pairs": [
        {"device": "h100", **pair}, {"device": "a100-80gb", **pair}]}))
    assert run_in_process(["warm", str(plan)], capsys=capsys, monkeypatch=monkeypatch, env=env).returncode == 0
    out = run_in_process(["revalidate", "--driver", "590.10.02", "--device-type", "h100", "--plan", str(plan),
                          "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["stale_marked"] == 1
    assert [p["status"] for p in doc["pairs"]] == ["probed", "out-of-scope"]
    assert "a100-80gb, not h100-sxm" in doc["pairs"][1]["detail"]
    listed = run_in_process(["evidence", "list", "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    drivers = sorted((r["key"]["device_type"], r["driver_version"], r["status"]) for r in json.loads(listed.stdout))
    # the a100's evidence is neither stale nor joined by evidence under a driver it does not run
    assert drivers == [("a100-80gb", "simulator-1", "current"), ("h100-sxm", "590.10.02", "current"),
                       ("h100-sxm", "simulator-1", "stale")]
