"""A fleet warm run answers for every pair: a pair whose probe was cancelled (SIGINT, the budget)
goes back to the queue at once instead of staying leased for the lease's length, and a node's report
lists a pair another process still holds (``leased``, holder and expiry; exit 3), never leaves it out."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select

from canary.jobs import warm
from canary.jobs.plan import PlannedPair, WarmPlan, load_plan
from evidence_store import warm_queue
from evidence_store.database import make_engine, session_scope
from evidence_store.models import WarmQueue
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env
from tests.support.stores import migrated_sqlite

PROFILES = EXAMPLES / "profiles"
# stage 1 refuses these at once (no MPS daemon on an idle simulated H100): no probe, no clock
NO_FIT = [{"device": "h100", "candidate": str(PROFILES / name), "residents": [str(PROFILES / "llm-prefill.yaml")],
           "regime": "mps:40"} for name in ("etl-transcode.yaml", "embedding-service.yaml", "llm-decode.yaml")]


def _states(url: str, run_id: str) -> list[tuple[int, str, str | None]]:
    eng = make_engine(url)
    try:
        with session_scope(eng, read_only=True) as s:
            rows = s.scalars(select(WarmQueue).where(WarmQueue.run_id == run_id).order_by(WarmQueue.position))
            return [(r.position, r.state, r.owner) for r in rows]
    finally:
        eng.dispose()


@pytest.mark.anyio
async def test_a_cancelled_pair_goes_back_to_the_queue_and_a_rerun_answers_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    plan = WarmPlan(name="fleet", budget_s=120, concurrency=1,
                    pairs=tuple(PlannedPair.model_validate_json(json.dumps(p)) for p in NO_FIT))
    real_warm_one = warm._warm_one
    started = anyio.Event()

    async def hangs_on_the_second(index: int, pair: PlannedPair, **kw: Any) -> warm.PairOutcome:
        if index == 1:
            started.set()
            await anyio.sleep_forever()  # a probe in progress when the operator presses Ctrl-C
        return await real_warm_one(index, pair, **kw)

    monkeypatch.setattr(warm, "_warm_one", hangs_on_the_second)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: warm.warm_fleet_async(plan, run_id="night", db_url=url))
            await started.wait()
            assert [s for _, s, _ in _states(url, "night")] == ["done", "leased", "queued"]
            tg.cancel_scope.cancel()
    assert _states(url, "night") == [(0, "done", _states(url, "night")[0][2]), (1, "queued", None), (2, "queued", None)]

    monkeypatch.setattr(warm, "_warm_one", real_warm_one)
    with anyio.fail_after(60):
        report = await warm.warm_fleet_async(plan, run_id="night", db_url=url)
    assert [p.status for p in report.pairs] == ["done-in-run", "does-not-fit", "does-not-fit"]
    assert report.queue == {"done": 3}


def _other_node_holds_the_first_pair(tmp_path: Path, *, fails_it: bool = False) -> tuple[str, Path]:
    """A store and a fleet plan whose run 'night' another node (node-b) has begun: it holds pair 1's
    lease for 900 s, or (``fails_it``) failed that pair operationally (its device unreachable)."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    plan_file = tmp_path / "fleet.json"
    plan_file.write_text(json.dumps({"name": "fleet", "budget_s": 120, "concurrency": 1, "pairs": NO_FIT}))
    pairs_json = [p.model_dump(mode="json") for p in load_plan(plan_file).pairs]
    now = dt.datetime.now(dt.UTC)
    eng = make_engine(url)
    try:
        with session_scope(eng) as s:
            warm_queue.enqueue(s, run_id="night", pairs=pairs_json, now=now)
            held = warm_queue.claim(s, run_id="night", owner="node-b:77:0", lease_s=900, now=now)
            assert held is not None and held.position == 0
            if fails_it:
                warm_queue.finish(s, held, state="failed", now=now, result_json={
                    "index": held.position, "label": "etl-transcode on h100", "status": "error",
                    "detail": "nvml:7: NVIDIA driver library (libnvidia-ml) not found"})
    finally:
        eng.dispose()
    return url, plan_file


def test_a_pair_leased_by_another_node_is_listed_and_is_not_success(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, plan_file = _other_node_holds_the_first_pair(tmp_path)

    # the other node holds its lease past this node's budget: the node waits for it until the budget ends
    argv = ["--db", url, "warm", str(plan_file), "--fleet", "--run-id", "night", "--budget-s", "1"]
    out = run_in_process([*argv, "--json"], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 3, out.stderr  # a pair not answered yet: not success (docs/jobs.md)
    pairs = json.loads(out.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["leased", "does-not-fit", "does-not-fit"]
    assert "node-b:77:0" in pairs[0]["detail"] and "until" in pairs[0]["detail"]
    assert "leased by another process" in out.stderr

    table = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert table.returncode == 3
    assert "1: leased: leased by node-b:77:0" in table.stdout and "leased 1" in table.stdout


def test_a_fleet_run_probes_a_pair_listed_twice_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    plan_file = tmp_path / "dup.json"
    plan_file.write_text(json.dumps({"name": "dup", "budget_s": 120, "concurrency": 2,
                                     "pairs": [NO_FIT[0], {**NO_FIT[0], "device": "h100-sxm"}]}))
    out = run_in_process(["--db", url, "warm", str(plan_file), "--fleet", "--run-id", "night", "--json"],
                         capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    pairs = json.loads(out.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["does-not-fit", "duplicate"]
    assert pairs[1]["detail"].startswith("the same pair as pair 1")


def test_a_pair_another_node_failed_is_not_success(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Another node of the run failed pair 1 operationally (its device unreachable): a run tries a pair
    once, so this node lists it as failed-in-run with that node's reason and exits 4, as for a pair that
    failed here (docs/jobs.md) — never 0 with a pair's evidence missing."""
    url, plan_file = _other_node_holds_the_first_pair(tmp_path, fails_it=True)
    argv = ["--db", url, "warm", str(plan_file), "--fleet", "--run-id", "night", "--json"]
    out = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 4, out.stderr
    pairs = json.loads(out.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["failed-in-run", "does-not-fit", "does-not-fit"]
    assert "1 pair(s) of the fleet run failed on another node" in out.stderr and "--run-id" in out.stderr
