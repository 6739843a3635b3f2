"""`canary admit` with the process executor, killed with SIGKILL mid-probe: the orphaned canary
keeps running until `canary recover` (after the lease expires) kills it and marks the probe
aborted; nothing is half-recorded (no evidence, no certificate, no reservation)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from canary.probe.procs import group_alive
from tests.support.helpers import candidate_profile, free_port, resident_profile, start_server
from tests.support.paths import canary_cmd, cli_env


def _write(path: Path, profile) -> str:  # type: ignore[no-untyped-def]
    path.write_text(yaml.safe_dump(profile.model_dump(mode="json")))
    return str(path)


def _running_probe(db: Path) -> tuple[str, int] | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute("select probe_id, pgid from probe_journal where state = 'running'").fetchone()
    except sqlite3.OperationalError:
        return None  # the schema is still being created
    return (str(row[0]), int(row[1])) if row else None


@pytest.mark.slow
def test_sigkilled_admit_leaves_an_orphan_that_recover_cleans_up(tmp_path: Path) -> None:
    resident_port, candidate_port = free_port(), free_port()
    resident = start_server(resident_port)
    try:
        res = _write(tmp_path / "resident.yaml", resident_profile(resident_port))
        cand = _write(tmp_path / "candidate.yaml", candidate_profile(candidate_port, "--burners", "1"))
        env = cli_env(tmp_path)
        db = tmp_path / "evidence.sqlite3"
        policy = tmp_path / "policy.yaml"  # the operator allows the test's candidate command
        policy.write_text((Path(__file__).resolve().parents[2] / "policies" / "default.yaml").read_text()
                          + f"candidate_commands: [{json.dumps(sys.executable)}]\n")
        # Output to files, not pipes: nobody reads them while it runs, and a full pipe would stall it.
        out_path, err_path = tmp_path / "admit.stdout", tmp_path / "admit.stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            admit = subprocess.Popen([*canary_cmd(), "admit", "h100", cand, "--resident", res, "--policy", str(policy)],
                                     env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            running = None
            while running is None and time.monotonic() < deadline and admit.poll() is None:
                running = _running_probe(db)
                time.sleep(0.1)
            assert running is not None, err_path.read_text() if admit.poll() is not None else "no probe row"
            probe_id, pgid = running
            # The candidate is held until the baseline window ends; kill once it serves requests.
            while time.monotonic() < deadline and admit.poll() is None:
                try:
                    if httpx.get(f"http://127.0.0.1:{candidate_port}/ready", timeout=0.2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            assert admit.poll() is None, "the probe ended before it could be killed mid-probe"
            os.kill(admit.pid, signal.SIGKILL)
            admit.wait(timeout=60)
        finally:
            if admit.poll() is None:
                admit.kill()
        assert group_alive(pgid), "the canary should outlive its killed prober until recovery"

        report: list[dict[str, object]] = []
        deadline = time.monotonic() + 40  # the lease (15 s) must expire first
        while time.monotonic() < deadline:
            proc = subprocess.run([*canary_cmd(), "recover", "--json"], env=env, capture_output=True, text=True,
                                  timeout=60)
            assert proc.returncode == 0, proc.stderr
            report = json.loads(proc.stdout)
            if report:
                break
            time.sleep(1)
        assert [p["probe_id"] for p in report] == [probe_id]
        assert report[0]["action"] == "killed"
        assert not group_alive(pgid)
        with sqlite3.connect(db) as conn:
            state = conn.execute("select state from probe_journal where probe_id = ?", (probe_id,)).fetchone()[0]
            counts = [conn.execute(f"select count(*) from {t}").fetchone()[0]
                      for t in ("evidence", "certificates", "reservations")]
        assert state == "aborted"
        assert counts == [0, 0, 0]
    finally:
        resident.kill()
        resident.wait()
