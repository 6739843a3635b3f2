"""``canary admit`` records its admission in the admission history (as ``canary serve`` does), so
``canary warm --from-history`` plans the pairs people asked about on the command line too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from canary.admission import request_from_json
from canary.admission.store import request_keys
from evidence_store.database import make_engine, session_scope
from evidence_store.fleet_models import AdmissionLog
from evidence_store.service import probe_queue
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

SNAPSHOT = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def _history(url: str) -> list[AdmissionLog]:
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            rows = list(session.scalars(select(AdmissionLog)))
            session.expunge_all()
            return rows
    finally:
        engine.dispose()


def test_a_cli_admission_is_in_the_history_and_replays_as_the_same_pair(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    out = run_in_process(["--db", url, "admit", SNAPSHOT, PROFILE, "--no-probe", "--json"], capsys=capsys,
                         monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode in (0, 1, 3), out.stderr
    verdict = json.loads(out.stdout)["verdict"]
    rows = _history(url)
    assert len(rows) == 1
    row = rows[0]
    assert row.requests == 1 and row.verdict == verdict and row.device_type == "h100-sxm"
    # the logged request is the same question: same pair keys, same device, same regime
    replayed = request_from_json(row.request_json, what="logged")
    keys = [k for k in request_keys(replayed) if k is not None]
    assert row.pair_digest == probe_queue.pair_digest(keys)
    assert [r.name for r in replayed.snapshot.residents] == ["comms"]
    assert str(replayed.regime) in row.label and replayed.candidate.name == "embedding-service"


@pytest.mark.slow
def test_warm_from_history_plans_a_pair_admitted_with_the_cli(tmp_path: Path) -> None:
    """Two real processes: ``canary admit`` then ``canary warm --from-history`` on the same store."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    env = cli_env(tmp_path)
    admitted = subprocess.run([*canary_cmd(), "--db", url, "admit", SNAPSHOT, PROFILE, "--no-probe", "--quiet"],
                              capture_output=True, text=True, env=env, timeout=120)
    assert admitted.returncode in (0, 1, 3), admitted.stderr
    warm = subprocess.run([*canary_cmd(), "--db", url, "warm", "--from-history", "--since", "1h", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert warm.returncode == 0, warm.stderr
    plan = json.loads(warm.stdout)["plan"]
    assert [(e["reason"], e["requests"]) for e in plan] == [("requested", 1)]
    assert plan[0]["label"].startswith("embedding-service@") and "beside comms" in plan[0]["label"]
