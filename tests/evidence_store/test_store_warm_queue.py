"""The fleet warm queue: idempotent enqueue, leases that skip locked rows, expired leases taken
over, and three real `canary warm --fleet` processes sharing one run on SQLite and PostgreSQL,
each pair probed exactly once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from evidence_store import warm_queue
from evidence_store.database import session_scope
from evidence_store.errors import LeaseLost
from tests.support.paths import EXAMPLES, canary_cmd

NOW = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)
PAIRS = [{"device": "h100", "candidate": f"c{i}.yaml"} for i in range(3)]


def test_enqueue_is_idempotent_and_claims_follow_plan_order(engine: Engine) -> None:
    with session_scope(engine) as s:
        assert warm_queue.enqueue(s, run_id="r", pairs=PAIRS, now=NOW) == 3
    with session_scope(engine) as s:
        assert warm_queue.enqueue(s, run_id="r", pairs=PAIRS, now=NOW) == 0
    claimed = []
    for owner in ("a", "b", "c", "d"):
        with session_scope(engine) as s:
            item = warm_queue.claim(s, run_id="r", owner=owner, lease_s=60, now=NOW)
        claimed.append(None if item is None else item.position)
    assert claimed == [0, 1, 2, None]


def test_expired_lease_is_taken_over_and_the_old_owner_cannot_finish(engine: Engine) -> None:
    with session_scope(engine) as s:
        warm_queue.enqueue(s, run_id="r", pairs=PAIRS[:1], now=NOW)
    with session_scope(engine) as s:
        first = warm_queue.claim(s, run_id="r", owner="dead-node", lease_s=10, now=NOW)
    assert first is not None
    with session_scope(engine) as s:
        assert warm_queue.claim(s, run_id="r", owner="x", lease_s=10, now=NOW + dt.timedelta(seconds=5)) is None
    with session_scope(engine) as s:
        second = warm_queue.claim(s, run_id="r", owner="live-node", lease_s=10, now=NOW + dt.timedelta(seconds=11))
    assert second is not None and second.attempts == 2
    with pytest.raises(LeaseLost), session_scope(engine) as s:
        warm_queue.finish(s, first, state="done", result_json={}, now=NOW + dt.timedelta(seconds=12))
    with session_scope(engine) as s:
        warm_queue.finish(s, second, state="done", result_json={"status": "probed"}, now=NOW + dt.timedelta(seconds=12))
    with session_scope(engine, read_only=True) as s:
        assert warm_queue.run_status(s, "r") == {"done": 1}


def test_a_released_item_is_queued_again_and_only_its_holder_can_release_it(engine: Engine) -> None:
    with session_scope(engine) as s:
        warm_queue.enqueue(s, run_id="r", pairs=PAIRS[:1], now=NOW)
    with session_scope(engine) as s:
        held = warm_queue.claim(s, run_id="r", owner="node-a", lease_s=900, now=NOW)
    assert held is not None
    with session_scope(engine) as s:  # another owner's item: nothing changes
        assert warm_queue.release(s, dataclasses.replace(held, owner="node-b"), now=NOW) is False
    with session_scope(engine) as s:
        assert warm_queue.release(s, held, now=NOW) is True
    with session_scope(engine, read_only=True) as s:
        assert warm_queue.run_status(s, "r") == {"queued": 1}
    with session_scope(engine) as s:
        assert warm_queue.release(s, held, now=NOW) is False  # idempotent: no longer leased
        again = warm_queue.claim(s, run_id="r", owner="node-b", lease_s=900, now=NOW + dt.timedelta(seconds=1))
    assert again is not None and again.position == held.position  # claimable at once, not after 900 s


@pytest.mark.slow
def test_three_nodes_share_one_run_and_probe_each_pair_once(store_url: str, engine: Engine, tmp_path: Path) -> None:
    plan = str(EXAMPLES / "plans" / "nightly-h100.yaml")
    env = dict(os.environ)
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    nodes = [
        subprocess.Popen([*canary_cmd(), "--db", store_url, "warm", plan, "--fleet", "--run-id", "night-1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    reports = []
    for node in nodes:
        out, err = node.communicate(timeout=300)
        assert node.returncode == 0, err
        reports.append(json.loads(out))
    # pairs another node finished are listed as done-in-run (docs/jobs.md); the others each node ran itself
    ran = sorted(p["index"] for r in reports for p in r["pairs"] if not p["status"].endswith("-in-run"))
    assert ran == [0, 1, 2, 3, 4]  # every planned pair, each by exactly one node
    assert all(set(r["queue"]) <= {"done", "leased"} for r in reports)  # each node's view when it stopped
    with session_scope(engine, read_only=True) as s:
        assert warm_queue.run_status(s, "night-1") == {"done": 5}
    with engine.connect() as conn:
        probes = conn.execute(text("SELECT COUNT(*) FROM probe_journal")).scalar_one()
        evidence = conn.execute(text("SELECT COUNT(*) FROM evidence")).scalar_one()
    assert probes == evidence == 3  # the three pairs that fit were probed once each, not once per node
