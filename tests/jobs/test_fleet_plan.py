"""A fleet warm run is one plan: a node with another plan under the same run id is refused before it
adds or claims anything, and a node works on the pair the queue row carries."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import anyio
import pytest
from sqlalchemy import select

from canary.errors import InputError
from canary.jobs.plan import PlannedPair, WarmPlan
from canary.jobs.warm import warm_fleet_async
from evidence_store import warm_queue
from evidence_store.database import make_engine, session_scope
from evidence_store.models import WarmQueue
from tests.conftest import EXAMPLES
from tests.support.stores import migrated_sqlite

PROFILE = str(EXAMPLES / "profiles" / "llm-decode.yaml")
NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)


def _plan(*devices: str) -> WarmPlan:
    return WarmPlan(name="fleet", budget_s=60, concurrency=1,
                    pairs=tuple(PlannedPair(device=d, candidate=PROFILE) for d in devices))


def _rows(url: str) -> list[tuple[str, str, str | None]]:
    eng = make_engine(url)
    try:
        with session_scope(eng, read_only=True) as s:
            return [(r.id, r.state, r.owner) for r in s.scalars(select(WarmQueue).order_by(WarmQueue.id))]
    finally:
        eng.dispose()


def test_a_node_with_another_plan_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "fleet.sqlite3")
    first = _plan("h100")
    eng = make_engine(url)
    try:
        with session_scope(eng) as s:
            warm_queue.enqueue(s, run_id="run-1", pairs=[p.model_dump(mode="json") for p in first.pairs], now=NOW)
    finally:
        eng.dispose()
    before = _rows(url)
    other = _plan("h100", "a100-80gb", "l4")  # longer: it used to index its own plan by queue position
    with pytest.raises(InputError, match="different plan") as info:
        anyio.run(lambda: warm_fleet_async(other, run_id="run-1", db_url=url))
    assert info.value.field == "--run-id"
    assert _rows(url) == before  # nothing added, nothing leased


def test_the_same_plan_joins_the_run(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "fleet.sqlite3")
    plan = _plan("h100")
    eng = make_engine(url)
    try:
        with session_scope(eng) as s:
            warm_queue.enqueue(s, run_id="run-2", pairs=[p.model_dump(mode="json") for p in plan.pairs], now=NOW)
    finally:
        eng.dispose()
    report = anyio.run(lambda: warm_fleet_async(plan, run_id="run-2", db_url=url))
    assert [p.index for p in report.pairs] == [0]
    assert report.pairs[0].status == "no-probe-needed"  # an idle device: no resident to disturb
    assert [state for _, state, _ in _rows(url)] == ["done"]
