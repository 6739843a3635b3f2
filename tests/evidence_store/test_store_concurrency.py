"""Real processes against the real store: no over-booking under a race, nothing lost or half-written
when a writer is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from evidence_store.database import session_scope
from evidence_store.evidence import list_evidence, record_evidence
from evidence_store.models import Certificate, CertificateEvidence, Evidence, Reservation
from tests.support.subprocesses import Child

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 16
ROOM_FOR = 5


def _spawn(stderr_path: Path, *args: str) -> Child:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return Child(
        [sys.executable, "-m", "tests.evidence_store.evidence_store_worker", *args],
        stderr_path=stderr_path,
        stdin=subprocess.PIPE,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sixteen_processes_race_for_room_for_exactly_five(
    store_url: str, engine: Engine, tmp_path: Path
) -> None:
    workers = [
        _spawn(tmp_path / f"worker-{i}.stderr", "reserve", store_url, "GPU-race", "8", str(8 * ROOM_FOR))
        for i in range(PROCESSES)
    ]
    try:
        for w in workers:
            line = w.line()
            assert line == "ready", (line, w.stderr_tail())
        for w in workers:  # the start signal, as close together as the pipes allow
            assert w.proc.stdin is not None
            w.proc.stdin.write(b"go\n")
            w.proc.stdin.flush()
        results = []
        for w in workers:
            results.append(w.line())
            assert w.wait() == 0, w.stderr_tail()
    finally:
        for w in workers:
            w.close()
    booked = [r for r in results if r.startswith("booked ")]
    assert len(booked) == ROOM_FOR, results
    assert results.count("conflict") == PROCESSES - ROOM_FOR
    with session_scope(engine, read_only=True) as session:
        rows = session.scalars(select(Reservation).where(Reservation.device_id == "GPU-race")).all()
    assert sorted(r.id for r in rows) == sorted(b.split()[1] for b in booked)
    assert sum(r.memory_bytes for r in rows) == ROOM_FOR * 8 * 2**30


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkilled_writer_loses_nothing_committed_and_leaves_nothing_half_written(
    store_url: str, engine: Engine, tmp_path: Path
) -> None:
    writer = _spawn(tmp_path / "writer.stderr", "writer", store_url)
    committed: list[int] = []
    try:
        while len(committed) < 25:
            committed.append(int(writer.line().split()[1]))
        os.kill(writer.proc.pid, signal.SIGKILL)
        code = writer.wait()
    finally:
        writer.close()
    assert code == -signal.SIGKILL
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
        records = list_evidence(session)  # every row must still validate as a whole record
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
        record_evidence(session, evidence("after-crash"))
