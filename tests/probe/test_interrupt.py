"""Ctrl-C: a real prober process gets SIGINT mid-probe; its canary is rolled back and the journal closed.

The test asserts on what the prober recorded (journal state, rollback verdict, the times of its own
transitions), not on how long another process took on a busy machine; its waits only bound hangs.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
from pathlib import Path

import pytest

from canary.probe.orchestrator import ROLLBACK_GRACE_S
from canary.probe.procs import group_alive, signal_group
from evidence_store.database import make_engine, session_scope
from evidence_store.journal import journal_get
from tests.support.helpers import free_port
from tests.support.paths import ROOT
from tests.support.stores import migrated_sqlite
from tests.support.subprocesses import Child

DRIVER = ROOT / "tests" / "support" / "crash_driver.py"


@pytest.mark.slow
def _sigint_as_in_a_terminal() -> None:
    """A test run started in the background by a non-interactive shell (``make test &``, CI scripts)
    inherits SIGINT *ignored*, and so would the prober: Ctrl-C would never reach it and the probe
    would run to its end. The prober here plays one started from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_mid_probe_rolls_back_and_records_aborted(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "evidence.sqlite3")
    pgid = 0
    with Child(
        [sys.executable, str(DRIVER), url, "ctrl-c", str(free_port())],
        stderr_path=tmp_path / "driver.stderr",
        cwd=ROOT,
        preexec_fn=_sigint_as_in_a_terminal,
    ) as driver:
        try:
            line = driver.line()
            assert line.startswith("PROBING "), line
            pgid = int(line.split()[1])
            assert group_alive(pgid)
            driver.proc.send_signal(signal.SIGINT)
            code = driver.wait()
        finally:
            if pgid and group_alive(pgid):  # never leave a canary behind for the rest of the suite
                signal_group(pgid, signal.SIGKILL)
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            row = journal_get(session, "ctrl-c")
    finally:
        engine.dispose()
    recorded = None if row is None else (row.state, (row.result_json or {}).get("rollback_reason"))
    # Exit 0 with a 'recorded' probe would mean the Ctrl-C was lost and the probe ran to its end.
    assert code != 0, f"the prober ignored SIGINT and exited 0; journal: {recorded}; {driver.stderr_tail()}"
    assert not group_alive(pgid), "the canary outlived its prober"
    assert row is not None and row.state == "aborted", (recorded, driver.stderr_tail())
    result = row.result_json
    assert result is not None
    assert ("cancelled from outside the probe (Ctrl-C or SIGTERM" in result["rollback_reason"]
            or "interrupted (Ctrl-C or SIGTERM)" in result["rollback_reason"]), result["rollback_reason"]
    assert result["rollback_verified"] is True
    # The prober's own record: rollback began at the abort and ended within its grace.
    at = {state: dt.datetime.fromisoformat(when) for state, when, _ in result["transitions"]}
    states = [state for state, _, _ in result["transitions"]]
    assert states[-2:] == ["ABORTED", "ROLLED_BACK"], states  # written to the journal before RECORDED
    assert at["ROLLED_BACK"] - at["ABORTED"] <= dt.timedelta(seconds=ROLLBACK_GRACE_S)
