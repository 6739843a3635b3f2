"""A separate process that uses the store, for the concurrency and crash tests.

``reserve URL DEVICE GIB CAPACITY_GIB``: print ``ready``, wait for a line on stdin, try to book, print
``booked <id>`` or ``conflict``.
``writer URL``: commit group after group (three evidence records and a certificate per transaction),
printing ``committed <n>`` after each commit, until killed; every group also leaves an uncommitted tail
on purpose between commits: it writes the next group, sleeps, then commits.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from evidence_store import reservations
from evidence_store.certificates import record_certificate
from evidence_store.database import RetryPolicy, make_engine, run_transaction, session_scope
from evidence_store.errors import ReservationConflict
from evidence_store.evidence import record_evidence
from tests.evidence_store.evidence_store_testkit import evidence

GIB = 2**30


def reserve(url: str, device: str, gib: float, capacity_gib: float) -> None:
    engine = make_engine(url)
    with engine.connect():
        pass  # connect before the start signal, so the race is about the booking only
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    now = datetime.now(UTC)
    try:
        booking = run_transaction(
            engine,
            lambda session: reservations.reserve(
                session,
                device_id=device,
                holder=f"pid-{__import__('os').getpid()}",
                memory_bytes=int(gib * GIB),
                capacity_memory_bytes=int(capacity_gib * GIB),
                lease_s=600.0,
                now=now,
            ),
            retry=RetryPolicy(attempts=10, initial_wait_s=0.05, max_wait_s=0.5),
        )
    except ReservationConflict:
        sys.stdout.write("conflict\n")
    else:
        sys.stdout.write(f"booked {booking.id}\n")
    sys.stdout.flush()
    engine.dispose()


def writer(url: str) -> None:
    engine = make_engine(url)
    base = datetime(2026, 11, 30, tzinfo=UTC)
    group = 0
    while True:
        with session_scope(engine) as session:
            ids = [
                record_evidence(
                    session, evidence(f"g{group}-r{i}", created_at=base + timedelta(seconds=group * 3 + i))
                ).id
                for i in range(3)
            ]
            record_certificate(session, {"group": group, "ids": ids}, ids)
            time.sleep(0.005)  # inside the transaction: a kill often lands here
        sys.stdout.write(f"committed {group}\n")
        sys.stdout.flush()
        group += 1


if __name__ == "__main__":
    if sys.argv[1] == "reserve":
        reserve(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1] == "writer":
        writer(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]}")
