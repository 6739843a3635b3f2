"""A command that changes a lot asks for ``--yes``; without it, it previews: it says what would happen
and how to do it, changes nothing, and exits 0 — a preview is not an error (exit 2 is bad input)."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest

from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from tests.evidence_store.evidence_store_testkit import evidence
from tests.security.adversarial import store_digest
from tests.support.cli import run_in_process
from tests.support.paths import canary_cmd, cli_env
from tests.support.stores import migrated_sqlite


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    engine = make_engine(url)
    now = dt.datetime.now(dt.UTC)
    try:
        with session_scope(engine) as session:
            record_evidence(session, evidence("prev-1", created_at=now - dt.timedelta(hours=2)))
            record_evidence(session, evidence("prev-2", created_at=now - dt.timedelta(hours=1), outcome="unsafe"))
    finally:
        engine.dispose()
    return url


@pytest.mark.parametrize(("argv", "says", "how"), [
    pytest.param(["evidence", "expire"], "would mark 2 current record(s)", "canary evidence expire --yes",
                 id="expire"),
    pytest.param(["db", "downgrade", "base"], "would migrate", "canary db downgrade base --yes", id="downgrade"),
    pytest.param(["revalidate", "--driver", "590.10.02"], "would mark 2 current", "--yes", id="revalidate"),
])
def test_a_preview_changes_nothing_and_exits_0(store: str, tmp_path: Path, argv: list[str], says: str, how: str,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    before = store_digest(store)
    out = run_in_process(["--db", store, *argv], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("preview: nothing changed") and says in out.stdout and how in out.stdout
    assert "field '--yes'" not in out.stdout + out.stderr
    assert store_digest(store) == before


def test_a_preview_as_a_real_process(store: str, tmp_path: Path) -> None:
    before = store_digest(store)
    proc = subprocess.run([*canary_cmd(), "--db", store, "evidence", "expire"], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "would mark 2 current record(s)" in proc.stdout and proc.stderr == ""
    assert store_digest(store) == before
