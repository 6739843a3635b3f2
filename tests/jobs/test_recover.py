"""Recovery after a crash, with real processes and a real SQLite store.

The crash test runs a prober in a subprocess (process executor, store journal), kills it with
SIGKILL mid-probe, and checks that the orphaned canary still runs, that ``recover`` kills it and
marks the probe aborted, and that nothing was half-recorded (no evidence, no result but recovery's).
"""

from __future__ import annotations

import datetime as dt
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from canary._model import PairKey
from canary.admission.recovery import RecoverReport, kill_orphan, recover, recover_store
from canary.probe.procs import group_alive
from evidence_store.database import make_engine, session_scope
from evidence_store.journal import journal_get, journal_start
from tests.support.helpers import free_port
from tests.support.stores import migrated_sqlite
from tests.support.subprocesses import HANG_S, Child

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "support" / "crash_driver.py"
KEY = PairKey("r1", "any", "c1", "any", "h100-sxm", "timeslice")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    url = migrated_sqlite(tmp_path / "evidence.sqlite3")
    engine = make_engine(url)
    yield url, engine
    engine.dispose()


def _spawn_orphan(env_probe_id: str | None) -> subprocess.Popen[bytes]:
    """A process that ignores SIGTERM, returned once it does: on a loaded machine the interpreter can
    take seconds to start, and a SIGTERM that arrives before the handler is set ends it at once."""
    env = dict(os.environ)
    if env_probe_id is not None:
        env["CANARY_PROBE_ID"] = env_probe_id
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], HANG_S)
    line = proc.stdout.readline() if readable else b""
    if line.strip() != b"ready":
        proc.kill()
        proc.wait()
        raise AssertionError(f"the orphan did not start within {HANG_S:g} s (read {line!r})")
    return proc


def _start_row(engine: Engine, probe_id: str, pgid: int, *, lease_s: float, now: dt.datetime) -> None:
    with session_scope(engine) as session:
        journal_start(
            session,
            probe_id=probe_id,
            key=KEY,
            owner="host:1",
            lease_s=lease_s,
            pid=pgid or 1,
            pgid=pgid,
            budget_json={"max_probe_time_s": 60},
            now=now,
        )


@pytest.mark.slow
def test_crash_mid_probe_then_recover_kills_the_orphan_and_aborts(
    store: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = store
    port = free_port()
    with Child(
        [sys.executable, str(DRIVER), url, "crash-1", str(port)], stderr_path=tmp_path / "driver.stderr", cwd=ROOT
    ) as driver:
        line = driver.line()
        assert line.startswith("PROBING "), line
        pgid = int(line.split()[1])
        with session_scope(engine, read_only=True) as session:
            row = journal_get(session, "crash-1")
        assert row is not None and row.state == "running" and row.pgid == pgid
        os.kill(driver.proc.pid, signal.SIGKILL)
        driver.wait()
    time.sleep(0.2)
    assert group_alive(pgid)  # the canary outlived its prober: an orphan on the device

    # Before the lease ends, recovery leaves the probe alone.
    with session_scope(engine) as session:
        assert recover(session, now=row.started_at).aborted == 0
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    report = recover_store(engine, now=later, term_grace_s=0.5)
    assert [p.probe_id for p in report.probes] == ["crash-1"]
    assert report.probes[0].action == "killed"
    assert not group_alive(pgid)
    with session_scope(engine, read_only=True) as session:
        after = journal_get(session, "crash-1")
        evidence_rows = session.execute(text("SELECT COUNT(*) FROM evidence")).scalar_one()
    assert after is not None and after.state == "aborted"
    assert after.result_json is not None
    assert after.result_json["aborted_by"] == "recover"
    assert after.result_json["previous_result"] is None  # the probe never wrote a half result
    assert evidence_rows == 0  # nothing recorded for an aborted probe
    # A second pass finds nothing left to do.
    with session_scope(engine) as session:
        assert recover(session, now=later).aborted == 0


def test_recover_table_of_orphans(store: tuple[str, Engine]) -> None:
    _, engine = store
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ours = _spawn_orphan("p-ours")
    foreign = _spawn_orphan(None)  # a process group id reused by something unrelated
    gone = _spawn_orphan("p-gone")
    gone.kill()
    gone.wait()
    try:
        _start_row(engine, "p-ours", ours.pid, lease_s=1, now=past)
        _start_row(engine, "p-foreign", foreign.pid, lease_s=1, now=past)
        _start_row(engine, "p-gone", gone.pid, lease_s=1, now=past)
        _start_row(engine, "p-sim", 0, lease_s=1, now=past)
        _start_row(engine, "p-fresh", ours.pid, lease_s=3600, now=dt.datetime.now(dt.UTC))
        report = recover_store(engine, now=dt.datetime.now(dt.UTC), term_grace_s=0.3)
        actions = {p.probe_id: p.action for p in report.probes}
        assert actions == {
            "p-ours": "killed",
            "p-foreign": "not-ours",
            "p-gone": "already-gone",
            "p-sim": "no-process",
        }
        assert ours.wait(timeout=60) == -signal.SIGKILL  # it ignored SIGTERM
        assert foreign.poll() is None  # never touched
        assert report.failed == ()
        with session_scope(engine, read_only=True) as session:
            states = {pid: journal_get(session, pid).state for pid in actions}  # type: ignore[union-attr]
            fresh = journal_get(session, "p-fresh")
        assert set(states.values()) == {"aborted"}
        assert fresh is not None and fresh.state == "running"
    finally:
        for p in (ours, foreign):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_kill_false_reports_a_running_orphan_without_killing_it() -> None:
    proc = _spawn_orphan("p-keep")
    try:
        action, detail = kill_orphan("p-keep", proc.pid, kill=False)
        assert action == "left-running" and "kill not requested" in detail
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_recover_command_reports_json(store: tuple[str, Engine], tmp_path: Path) -> None:
    """``canary recover --json`` over the same store: the orphan is killed and listed."""
    import json

    url, engine = store
    orphan = _spawn_orphan("p-cli")
    try:
        _start_row(
            engine, "p-cli", orphan.pid, lease_s=1, now=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        )
        env = dict(os.environ, CANARY_DB_URL=url)
        out = subprocess.run(
            [sys.executable, "-m", "canary.cli", "recover", "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        listed = json.loads(out.stdout)
        assert [(p["probe_id"], p["action"]) for p in listed] == [("p-cli", "killed")]
        assert orphan.wait(timeout=60) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_recovery_kills_with_no_store_transaction_open(store: tuple[str, Engine], tmp_path: Path) -> None:
    """While recovery waits out an orphan's SIGTERM grace, other probers can still write (heartbeats,
    journal rows): the kill happens between a read and one short write, never inside a transaction."""
    _, engine = store
    marker = tmp_path / "got-sigterm"
    code = (
        "import pathlib, signal, sys, time\n"
        "marker = pathlib.Path(sys.argv[1])\n"
        "signal.signal(signal.SIGTERM, lambda *_: marker.write_text('term'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, CANARY_PROBE_ID="p-slow")
    with Child(
        [sys.executable, "-c", code, str(marker)],
        stderr_path=tmp_path / "orphan.stderr",
        env=env,
        start_new_session=True,
    ) as orphan:
        assert orphan.line() == "ready"
        past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        _start_row(engine, "p-slow", orphan.proc.pid, lease_s=1, now=past)
        reports: list[object] = []
        recovery = threading.Thread(
            target=lambda: reports.append(recover_store(engine, now=dt.datetime.now(dt.UTC), term_grace_s=HANG_S))
        )
        recovery.start()
        try:
            deadline = time.monotonic() + HANG_S
            while not marker.exists():
                assert time.monotonic() < deadline, "recovery never sent SIGTERM"
                time.sleep(0.02)
            # Recovery is now waiting for the orphan to go: another writer gets the store at once.
            _start_row(engine, "p-other", 0, lease_s=3600, now=dt.datetime.now(dt.UTC))
            assert recovery.is_alive()
        finally:
            orphan.proc.kill()  # ends the grace: the orphan is gone
            recovery.join(HANG_S)
    assert not recovery.is_alive()
    (report,) = reports
    assert isinstance(report, RecoverReport)
    assert [(p.probe_id, p.action) for p in report.probes] == [("p-slow", "killed")]
    with session_scope(engine, read_only=True) as session:
        slow, other = journal_get(session, "p-slow"), journal_get(session, "p-other")
    assert slow is not None and slow.state == "aborted"
    assert other is not None and other.state == "running"
