"""Ctrl-C: a real prober process gets SIGINT mid-probe; its canary is rolled back and the journal closed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from canary.probe.procs import group_alive
from evidence_store.engine import make_engine, session_scope, upgrade
from evidence_store.repository import journal_get
from tests.support.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "jobs" / "crash_driver.py"


def test_sigint_mid_probe_rolls_back_and_records_aborted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    upgrade(url)
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), url, "ctrl-c", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline().decode().strip()
        assert line.startswith("PROBING "), line
        pgid = int(line.split()[1])
        assert group_alive(pgid)
        time.sleep(0.2)
        began = time.monotonic()
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=10)
        elapsed = time.monotonic() - began
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode != 0
    assert elapsed < 2.5  # rollback within its grace
    assert not group_alive(pgid)
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            row = journal_get(session, "ctrl-c")
    finally:
        engine.dispose()
    assert row is not None and row.state == "aborted"
    assert row.result_json is not None and "cancelled" in row.result_json["rollback_reason"]
