"""A budget-limited ``canary warm`` resumes where it stopped: pairs with fresh evidence (and pairs
stage 1 refuses) are answered from the store before the budget is spent on probes, so they are
reported ``fresh`` (``does-not-fit``), never as missing; and a rerun probes a pair whose last probe
was inconclusive with another simulated seed, so it adds information instead of replaying it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env

PROFILES = EXAMPLES / "profiles"
PLAN = str(EXAMPLES / "plans" / "nightly-h100.yaml")


def test_a_rerun_out_of_budget_reports_fresh_pairs_as_fresh(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(tmp_path)
    first = run_in_process(["warm", PLAN, "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert first.returncode == 0, first.stderr
    assert [p["status"] for p in json.loads(first.stdout)["pairs"]].count("probed") == 3
    again = run_in_process(["warm", PLAN, "--budget-s", "0.001", "--json"], capsys=capsys,
                           monkeypatch=monkeypatch, env=env)
    assert again.returncode == 0, again.stderr  # every pair answered: nothing is missing
    pairs = json.loads(again.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["fresh"] * 3 + ["does-not-fit"] * 2
    assert "still missing" not in again.stderr


def test_a_rerun_probes_an_inconclusive_pair_with_another_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "one.json"
    plan.write_text(json.dumps({"name": "one", "budget_s": 120, "pairs": [{
        "device": "h100", "candidate": str(PROFILES / "embedding-service.yaml"),
        "residents": [str(PROFILES / "sd-unet-serving.yaml")]}]}))
    env = cli_env(tmp_path)
    runs = []
    for _ in range(2):
        out = run_in_process(["warm", str(plan), "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout)["pairs"][0])
    assert [r["status"] for r in runs] == ["probed", "probed"]  # inconclusive evidence is not fresh
    assert runs[0]["outcome"] == "inconclusive"
    assert runs[0]["slowdown_pct"] != runs[1]["slowdown_pct"]  # the same seed replayed the same result


def test_a_pair_stage_1_decides_alone_is_not_called_fresh(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A MIG slice is isolated from its residents: admitted with no evidence at all, so not ``fresh``."""
    plan = tmp_path / "mig.json"
    plan.write_text(json.dumps({"name": "mig", "budget_s": 120, "pairs": [{
        "device": str(EXAMPLES / "snapshots" / "c-mig-95pct.yaml"),
        "candidate": str(PROFILES / "embedding-service.yaml")}]}))
    out = run_in_process(["warm", str(plan), "--json"], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    [pair] = json.loads(out.stdout)["pairs"]
    assert (pair["status"], pair["outcome"]) == ("no-probe-needed", "admit")
    assert "MIG instance" in pair["detail"]
    table = run_in_process(["warm", str(plan)], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert "verdict admit" in table.stdout  # the table says which vocabulary an outcome is in


def test_a_pair_listed_twice_is_probed_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``h100`` and ``h100-sxm`` are one device: the three entries are one pair, probed once."""
    pair = {"candidate": str(PROFILES / "embedding-service.yaml"), "residents": [str(PROFILES / "resnet50-training.yaml")]}
    plan = tmp_path / "dup.json"
    plan.write_text(json.dumps({"name": "dup", "budget_s": 120, "concurrency": 2, "pairs": [
        {"device": "h100", **pair}, {"device": "h100-sxm", **pair}, {"device": "h100", "regime": "timeslice", **pair}]}))
    env = cli_env(tmp_path)
    out = run_in_process(["warm", str(plan), "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert out.returncode == 0, out.stderr
    pairs = json.loads(out.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["probed", "duplicate", "duplicate"]
    assert pairs[0]["outcome"] in ("safe", "unsafe", "inconclusive")
    assert all(p["detail"].startswith("the same pair as pair 1") for p in pairs[1:])
    listed = run_in_process(["evidence", "list", "--json"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert len(json.loads(listed.stdout)) == 1


def test_warm_from_history_out_of_budget_reports_a_fresh_pair_as_fresh(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``canary admit`` probes a pair (and logs it); a history run whose budget is already spent still
    answers that pair from its fresh evidence."""
    env = cli_env(tmp_path)
    admitted = run_in_process(["admit", str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"),
                               str(PROFILES / "embedding-service.yaml"), "--quiet"],
                              capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert admitted.returncode == 0, admitted.stderr
    out = run_in_process(["warm", "--from-history", "--since", "1h", "--budget-s", "1e-9", "--json"],
                         capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert out.returncode == 0, out.stderr
    assert [p["status"] for p in json.loads(out.stdout)["pairs"]] == ["fresh"]
