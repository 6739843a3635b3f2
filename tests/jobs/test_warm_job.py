"""``canary warm`` as a nightly job: one unreachable device fails its own pair and the job goes on;
a budget that ran out says so and is not exit 0; a second fleet start shows what the run did;
options that contradict each other or mean nothing are refused before anything is written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

PROFILES = EXAMPLES / "profiles"
PLAN = str(EXAMPLES / "plans" / "nightly-h100.yaml")

# stage 1 refuses this pair at once (no MPS daemon on an idle simulated H100): no probe, no clock
NO_FIT = {"device": "h100", "candidate": str(PROFILES / "etl-transcode.yaml"),
          "residents": [str(PROFILES / "llm-prefill.yaml")], "regime": "mps:40"}


def _plan(tmp_path: Path, *pairs: dict[str, object], name: str = "mixed") -> str:
    path = tmp_path / f"{name}.json"  # YAML is a superset of JSON
    path.write_text(json.dumps({"name": name, "budget_s": 120, "concurrency": 1, "pairs": list(pairs)}))
    return str(path)


def test_an_unreachable_device_fails_its_pair_and_the_job_goes_on(tmp_path: Path) -> None:
    """A real process, as cron runs it: there is no GPU here, so ``nvml:0`` cannot be reached."""
    plan = _plan(tmp_path, {"device": "nvml:0", "candidate": str(PROFILES / "embedding-service.yaml")}, NO_FIT)
    proc = subprocess.run([*canary_cmd(), "warm", plan, "--json"], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 4, proc.stderr  # docs/jobs.md: 4 when a pair failed operationally
    pairs = json.loads(proc.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["error", "does-not-fit"]
    assert "NVIDIA" in pairs[0]["detail"] and "nvml:0" in pairs[0]["label"]
    assert "Traceback" not in proc.stderr and "[1/2] error" in proc.stderr


def test_the_table_names_why_a_pair_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path, {"device": "nvml:0", "candidate": str(PROFILES / "embedding-service.yaml")}, NO_FIT)
    out = run_in_process(["warm", plan], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 4, out.stderr
    failed = [line for line in out.stdout.splitlines() if line.startswith("1: error: ")]
    assert len(failed) == 1 and "NVIDIA" in failed[0]
    assert "does-not-fit 1, error 1" in out.stdout


def test_a_budget_too_small_for_any_pair_is_not_success(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_in_process(["warm", PLAN, "--budget-s", "0.001", "--json"], capsys=capsys, monkeypatch=monkeypatch,
                         env=cli_env(tmp_path))
    pairs = json.loads(out.stdout)["pairs"]
    # the two pairs stage 1 refuses are answered without a probe, before the budget is spent
    assert [p["status"] for p in pairs] == ["skipped-budget"] * 3 + ["does-not-fit"] * 2
    assert out.returncode == 3  # evidence still missing, nothing failed (docs/jobs.md)
    assert "too small to probe any of the 3 pair(s) that need a probe" in out.stderr and "--budget-s" in out.stderr


def test_a_second_fleet_start_shows_what_the_run_did(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    plan = _plan(tmp_path, NO_FIT)
    argv = ["--db", url, "warm", plan, "--fleet", "--run-id", "night-1", "--json"]
    first = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert first.returncode == 0, first.stderr
    assert [p["status"] for p in json.loads(first.stdout)["pairs"]] == ["does-not-fit"]
    second = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert second.returncode == 0, second.stderr
    doc = json.loads(second.stdout)
    assert [p["status"] for p in doc["pairs"]] == ["done-in-run"]
    assert doc["pairs"][0]["detail"].startswith("does-not-fit by ") and "night-1" in doc["pairs"][0]["detail"]
    assert doc["pairs"][0]["label"] == "etl-transcode beside llm-prefill on h100-sxm (mps:40)"
    assert doc["queue"] == {"done": 1}
    table = run_in_process(argv[:-1], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert "done-in-run 1" in table.stdout and "etl-transcode beside llm-prefill" in table.stdout


@pytest.mark.parametrize(("args", "field"), [
    pytest.param([PLAN, "--from-history"], "--from-history", id="plan-and-history"),
    pytest.param(["--from-history", "--fleet"], "--fleet", id="history-fleet"),
    pytest.param(["--from-history", "--concurrency", "2"], "--concurrency", id="history-concurrency"),
    pytest.param([PLAN, "--since", "2d"], "--since", id="since-without-history"),
    pytest.param([PLAN, "--top", "5"], "--top", id="top-without-history"),
    # a plan takes --expiring-within too (docs/jobs.md); a window that is not a duration is refused
    pytest.param([PLAN, "--expiring-within", "soon"], "--expiring-within", id="window-not-a-duration"),
    pytest.param([PLAN, "--run-id", "x"], "--run-id", id="run-id-without-fleet"),
])
def test_contradictory_or_meaningless_options_are_refused(
        tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(tmp_path)
    out = run_in_process(["warm", *args], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert out.returncode == 2, out.stderr
    assert f"'{field}'" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "evidence.sqlite3").exists()  # refused before the store was touched


def test_revalidate_reports_an_unreachable_device_and_the_other_pairs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    probed = {"device": "h100", "candidate": str(PROFILES / "embedding-service.yaml"),
              "residents": [str(PROFILES / "resnet50-training.yaml")]}
    env = cli_env(tmp_path)
    assert run_in_process(["warm", _plan(tmp_path, probed, name="before")], capsys=capsys, monkeypatch=monkeypatch,
                          env=env).returncode == 0
    plan = _plan(tmp_path, {"device": "nvml:7", "candidate": str(PROFILES / "embedding-service.yaml")}, probed, NO_FIT)
    out = run_in_process(["revalidate", "--driver", "600.1", "--yes", "--plan", plan], capsys=capsys,
                         monkeypatch=monkeypatch, env=env)
    assert out.returncode == 4, out.stderr  # a pair failed operationally; the others ran (docs/jobs.md)
    assert "1: error: " in out.stdout and "NVIDIA" in out.stdout
    assert "probed 1, does-not-fit 1, error 1" in out.stdout and "1 record(s) marked stale" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("2 "))
    assert "simulator-1" in row  # the old driver's evidence beside the new probe


@pytest.mark.parametrize(("args", "field"), [
    pytest.param(["--budget-s", "nan"], "--budget-s", id="budget-nan"),
    pytest.param(["--budget-s", "-1"], "--budget-s", id="budget-negative"),
    pytest.param(["--concurrency", "0"], "--concurrency", id="concurrency-zero"),
])
def test_a_bad_override_names_the_option_not_the_plan(
        tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_in_process(["warm", PLAN, *args], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert f"field '{field}'" in out.stderr and "nightly-h100.yaml" not in out.stderr
    assert not (tmp_path / "evidence.sqlite3").exists()


def test_a_bad_pair_is_named_as_the_plans_field_errors_name_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    good = {"device": "h100", "candidate": str(PROFILES / "embedding-service.yaml")}
    missing_file = _plan(tmp_path, good, {"device": "h100", "candidate": "nope.yaml"}, name="file")
    missing_field = _plan(tmp_path, good, {"device": "h100"}, name="field")
    env = cli_env(tmp_path)
    by_file = run_in_process(["warm", missing_file], capsys=capsys, monkeypatch=monkeypatch, env=env)
    by_field = run_in_process(["warm", missing_field], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert by_file.returncode == by_field.returncode == 2
    assert "field 'pairs[1]'" in by_file.stderr and "field 'pairs[1].candidate'" in by_field.stderr
