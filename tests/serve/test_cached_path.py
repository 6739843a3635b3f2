"""The cached decision the service answers most: one statement outside any transaction (counted on the
wire in tests/evidence_store/test_decision_read.py), and no write transaction when nothing is written
(``reserve: false``); with ``reserve`` the booking and certificate are still written together."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, select

from canary.admission import admit, load_request
from evidence_store.database import make_engine, session_scope
from evidence_store.models import Certificate as CertificateRow
from tests.support.paths import EXAMPLES

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def _transactions(engine: Any) -> list[str]:
    """Every transaction begun on ``engine`` from now on: 'read' or 'write' (a writing scope carries
    the store's BEGIN IMMEDIATE option on every backend)."""
    begun: list[str] = []

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        begun.append("write" if conn.get_execution_options().get("canary_sqlite_begin") else "read")

    return begun


@pytest.mark.slow
def test_a_cached_admission_reads_once_and_writes_only_what_it_keeps(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        first = admit(load_request(SNAP, EMB), engine=engine, reserve=False)  # probes, records the evidence
        assert first.decided_by == "canary", first.reason
        begun = _transactions(engine)
        cached = admit(load_request(SNAP, EMB), engine=engine, reserve=False)
        assert cached.decided_by == "cache" and cached.verdict == first.verdict
        assert cached.resource_reservations == ()
        assert begun == []  # bookings and evidence in one statement, no transaction; nothing to write

        begun.clear()
        booked = admit(load_request(SNAP, EMB), engine=engine, reserve=True)
        assert booked.decided_by == "cache" and booked.verdict == "admit" and len(booked.resource_reservations) == 1
        assert begun == ["write"]
        with session_scope(engine, read_only=True) as s:
            # the first admission's probe (its evidence is kept with its certificate) and the booking;
            # the cached admission that booked nothing wrote none
            assert s.scalar(select(func.count()).select_from(CertificateRow)) == 2
    finally:
        engine.dispose()
