"""Real processes against the real store: no over-booking under a race, nothing lost or half-written
when a writer is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from evidence_store import repository as repo
from evidence_store.engine import session_scope
from evidence_store.models import Certificate, CertificateEvidence, Evidence, Reservation

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 16
ROOM_FOR = 5


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.evidence_store.evidence_store_worker", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sixteen_processes_race_for_room_for_exactly_five(store_url: str, engine: Engine) -> None:
    workers = [_spawn("reserve", store_url, "GPU-race", "8", str(8 * ROOM_FOR)) for _ in range(PROCESSES)]
    try:
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline().strip()
            assert line == "ready", (line, w.stderr.read() if w.stderr else "")
        for w in workers:  # the start signal, as close together as the pipes allow
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        results = []
        for w in workers:
            out, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
            results.append(out.strip())
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    booked = [r for r in results if r.startswith("booked ")]
    assert len(booked) == ROOM_FOR, results
    assert results.count("conflict") == PROCESSES - ROOM_FOR
    with session_scope(engine, read_only=True) as session:
        rows = session.scalars(select(Reservation).where(Reservation.device_id == "GPU-race")).all()
    assert sorted(r.id for r in rows) == sorted(b.split()[1] for b in booked)
    assert sum(r.memory_bytes for r in rows) == ROOM_FOR * 8 * 2**30


@pytest.mark.timeout(120)
def test_sigkilled_writer_loses_nothing_committed_and_leaves_nothing_half_written(
    store_url: str, engine: Engine
) -> None:
    writer = _spawn("writer", store_url)
    committed: list[int] = []
    try:
        assert writer.stdout is not None
        deadline = time.monotonic() + 60
        while len(committed) < 25 and time.monotonic() < deadline:
            line = writer.stdout.readline()
            assert line, writer.stderr.read() if writer.stderr else "writer exited"
            committed.append(int(line.split()[1]))
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(30)
    assert writer.returncode == -signal.SIGKILL
    assert len(committed) == 25
    last_reported = committed[-1]

    with session_scope(engine, read_only=True) as session:
        links = dict(
            session.execute(
                select(
                    CertificateEvidence.certificate_id, func.count(CertificateEvidence.evidence_id)
                ).group_by(CertificateEvidence.certificate_id)
            ).all()
        )
        groups = [
            (cert.certificate_json, links.get(cert.id, 0)) for cert in session.scalars(select(Certificate))
        ]
        evidence_count = session.scalar(select(func.count()).select_from(Evidence))
        records = repo.list_evidence(session)  # every row must still validate as a whole record
    stored_groups = sorted(int(cert["group"]) for cert, _ in groups)
    # Everything reported committed is there; at most the one group in flight may also have landed.
    assert stored_groups[: last_reported + 1] == list(range(last_reported + 1))
    assert len(stored_groups) in (last_reported + 1, last_reported + 2)
    assert all(linked == 3 for _, linked in groups)  # no group half-written
    assert evidence_count == 3 * len(stored_groups)
    assert len(records) == evidence_count
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    # The store stays writable after the crash (no lock left behind).
    from tests.evidence_store.evidence_store_testkit import evidence

    with session_scope(engine) as session:
        repo.record_evidence(session, evidence("after-crash"))
