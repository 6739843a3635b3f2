"""A SQLite store is created only by a command that writes, and that command says so; a question
(``canary db current``) creates nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.paths import EXAMPLES, canary_cmd, cli_env


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), *argv], capture_output=True, text=True, env=cli_env(tmp_path),
                          timeout=300, stdin=subprocess.DEVNULL)


def test_a_job_that_creates_the_store_says_so(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    proc = _run(tmp_path, "--db", f"sqlite:///{store}", "recover")
    assert proc.returncode == 0, proc.stderr
    assert f"canary: created a new evidence store at sqlite:///{store}" in proc.stderr
    assert store.exists()
    again = _run(tmp_path, "--db", f"sqlite:///{store}", "recover")
    assert again.returncode == 0 and "created a new evidence store" not in again.stderr


def test_db_current_on_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    proc = _run(tmp_path, "--db", f"sqlite:///{store}", "db", "current")
    assert proc.returncode == 0, proc.stderr
    assert "no schema, no store there yet (nothing created)" in proc.stdout
    assert not store.exists()
    # once created, the revision is read as before
    assert _run(tmp_path, "--db", f"sqlite:///{store}", "db", "upgrade").returncode == 0
    assert "(head)" in _run(tmp_path, "--db", f"sqlite:///{store}", "db", "current").stdout


def test_warm_on_a_new_store_says_it_created_it(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    plan = EXAMPLES / "plans" / "nightly-h100.yaml"
    proc = _run(tmp_path, "--db", f"sqlite:///{store}", "warm", str(plan), "--budget-s", "1")
    assert proc.returncode in (0, 3), proc.stderr
    assert f"canary: created a new evidence store at sqlite:///{store}" in proc.stderr
