"""The admission history is kept for a bounded time: ``canary db prune`` (default 30 days, or
``--admission-log-older-than``) and every node agent's loop delete what is older; nothing else."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from evidence_store import admission_log
from evidence_store.database import make_engine, session_scope
from evidence_store.fleet_models import AdmissionLog
from tests.agent.conftest import WAIT_S, rows, wait_for, write_device
from tests.conftest import canary_cmd, cli_env
from tests.support.cli import run_in_process

AGES_DAYS = {"ancient": 400.0, "old": 31.0, "month": 29.0, "week": 6.0, "today": 0.1}


def _fill(url: str) -> None:
    now = dt.datetime.now(dt.UTC)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            for name, days in AGES_DAYS.items():
                admission_log.log_admission(s, pair_digest=name, key_digests=[name], device_type="h100-sxm", device_id="d",
                                    label=name, verdict="admit", request_json={"device": {"ref": "x"}},
                                    now=now - dt.timedelta(days=days))
    finally:
        engine.dispose()


def _kept(url: str) -> list[str]:
    return sorted(r.pair_digest for r in rows(url, AdmissionLog))


def _prune(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), "--db", url, "db", "prune", *args], capture_output=True, text=True,
                          timeout=WAIT_S, env=cli_env(tmp_path))


@pytest.mark.slow
def test_db_prune_keeps_the_retention_window(store_url: str, tmp_path: Path) -> None:
    _fill(store_url)
    dry = _prune(store_url, tmp_path, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["would_delete"] == 2 and json.loads(dry.stdout)["deleted"] == 0
    assert _kept(store_url) == sorted(AGES_DAYS)  # a dry run deletes nothing

    out = _prune(store_url, tmp_path)  # the default retention: 30 days
    assert out.returncode == 0, out.stderr
    assert "deleted 2 row(s) older than 30d" in out.stdout
    assert _kept(store_url) == ["month", "today", "week"]

    out = _prune(store_url, tmp_path, "--admission-log-older-than", "1w", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deleted"] == 1
    assert _kept(store_url) == ["today", "week"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("age", ["soon", "-3d", "0", "1e9w"])
def test_db_prune_bad_age(store_url: str, tmp_path: Path, age: str, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (tests/support/cli.py): the retention-window test runs ``db prune`` as a real process."""
    _fill(store_url)
    out = run_in_process(["--db", store_url, "db", "prune", "--admission-log-older-than", age], capsys=capsys,
                         monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert "--admission-log-older-than" in out.stderr and "Traceback" not in out.stderr
    assert _kept(store_url) == sorted(AGES_DAYS)


@pytest.mark.slow
def test_agent_prunes_history_beyond_its_retention(store_url: str, tmp_path: Path, agent_factory: Any) -> None:
    _fill(store_url)
    device = write_device(tmp_path / "gpu0.yaml", uuid=f"GPU-{uuid.uuid4().hex[:6]}-ret")
    config = tmp_path / "agent.yaml"
    config.write_text(f"node: n1\ndevices: {{gpu0: {device}}}\nadmission_log_retention_days: 7\nhistory_days: 7\n")
    agent_factory(store_url, "n1", {"gpu0": device}, "--config", str(config), "--heartbeat-s", "0.5")
    wait_for("the agent to prune the history", lambda: _kept(store_url) == ["today", "week"])


def test_agent_config_retention_must_cover_the_revalidation_history(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("node: n1\ndevices: {gpu0: nvml:0}\nadmission_log_retention_days: 3\nhistory_days: 7\n")
    db = tmp_path / "store.sqlite3"
    out = subprocess.run([*canary_cmd(), "--db", f"sqlite:///{db}", "agent", "run", "--config", str(config)],
                         capture_output=True, text=True, timeout=WAIT_S, env=cli_env(tmp_path))
    assert out.returncode == 2 and "admission_log_retention_days" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not db.exists()
