"""``decision_read``: the bookings and every key's candidate evidence in one statement (one snapshot of
the store, one round trip) must answer exactly what ``reserved_bytes`` and ``lookup`` answer alone, on
both backends, for every lookup rule."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from canary._model import PairKey
from evidence_store.database import session_scope
from evidence_store.evidence import record_evidence
from evidence_store.lookup import decision_read, key_digest, lookup, pool_candidates
from evidence_store.reservations import release, reserve, reserved_bytes
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence
from tests.evidence_store.test_store_repository import LOOKUP_CASES, NOW, OTHER_KEY

GIB = 2**30
THIRD_KEY = PairKey(**{**KEY.as_dict(), "regime": "mig:3g.40gb"})
DEVICE = "GPU-1b2c3d4e"
OPTIONS: dict[str, Any] = {"driver_version": "550.54.15", "ttl_s": 86400.0, "allow_cross_driver": False,
                           "cross_driver_confidence_factor": 0.5}


def _read(engine: Engine, keys: list[PairKey], *, booked_at: Any = NOW, evidence_at: Any = NOW,
          ttl_s: float = 86400.0) -> tuple[int, dict[str, list[Any]]]:
    with engine.connect() as connection:
        return decision_read(connection, device_id=DEVICE, keys=keys, booked_at=booked_at, evidence_at=evidence_at,
                             ttl_s=ttl_s)


@pytest.mark.parametrize(
    ("records", "options"), [pytest.param(r, o, id=name) for name, r, o, _, _ in LOOKUP_CASES])
def test_pooled_rows_answer_what_lookup_answers(engine: Engine, records: list[Any], options: dict[str, Any]) -> None:
    with session_scope(engine) as session:
        for r in records:
            record_evidence(session, r)
    merged = {**OPTIONS, **options}
    with session_scope(engine, read_only=True) as session:
        alone = lookup(session, KEY, now=NOW, **merged)
    _, rows = _read(engine, [KEY], ttl_s=merged["ttl_s"])
    together = pool_candidates(rows.get(key_digest(KEY), []), **merged)
    assert together == alone


def test_bookings_and_each_keys_rows_come_back_together(engine: Engine) -> None:
    with session_scope(engine) as session:
        for r in (evidence("a1"), evidence("a2", created_at=T0 + timedelta(minutes=5)),
                  evidence("b1", key=OTHER_KEY), evidence("old", ttl=timedelta(hours=1))):
            record_evidence(session, r)
        held = reserve(session, device_id=DEVICE, holder="x", memory_bytes=3 * GIB, capacity_memory_bytes=80 * GIB,
                       lease_s=86400.0, now=T0).id
        reserve(session, device_id=DEVICE, holder="y", memory_bytes=5 * GIB, capacity_memory_bytes=80 * GIB,
                lease_s=86400.0, now=T0)
        reserve(session, device_id="other-gpu", holder="z", memory_bytes=7 * GIB, capacity_memory_bytes=80 * GIB,
                lease_s=86400.0, now=T0)
        reserve(session, device_id=DEVICE, holder="short", memory_bytes=11 * GIB, capacity_memory_bytes=80 * GIB,
                lease_s=60.0, now=T0)  # its lease has ended by NOW
    booked, rows = _read(engine, [KEY, OTHER_KEY, THIRD_KEY])
    with session_scope(engine, read_only=True) as session:
        assert booked == reserved_bytes(session, DEVICE, NOW) == 8 * GIB
    assert sorted(rows) == sorted([key_digest(KEY), key_digest(OTHER_KEY)])  # the third key has no rows
    assert [r.id for r in rows[key_digest(KEY)]] == [
        r.id for r in sorted(rows[key_digest(KEY)], key=lambda r: (r.created_at, r.id), reverse=True)]
    assert len(rows[key_digest(KEY)]) == 2 and len(rows[key_digest(OTHER_KEY)]) == 1  # "old" expired at T0+1h

    with session_scope(engine) as session:
        release(session, held)
    assert _read(engine, [KEY])[0] == 5 * GIB


def test_no_keys_and_no_bookings_still_answer(engine: Engine) -> None:
    assert _read(engine, []) == (0, {})
    with session_scope(engine) as session:
        record_evidence(session, evidence("a1"))
    assert _read(engine, []) == (0, {})  # rows of keys not asked for are not returned


def test_evidence_time_and_booking_time_are_separate(engine: Engine) -> None:
    """A warm job asks for evidence fresh until later than now (``as_of``); the bookings stay those of now."""
    with session_scope(engine) as session:
        record_evidence(session, evidence("a1", ttl=timedelta(hours=3)))  # created T0, expires T0+3h
        reserve(session, device_id=DEVICE, holder="x", memory_bytes=GIB, capacity_memory_bytes=80 * GIB,
                lease_s=3 * 3600.0, now=T0)
    booked, rows = _read(engine, [KEY], booked_at=NOW, evidence_at=T0 + timedelta(hours=4))
    assert booked == GIB and rows == {}
    booked, rows = _read(engine, [KEY], booked_at=T0 + timedelta(hours=4), evidence_at=NOW)
    assert booked == 0 and len(rows[key_digest(KEY)]) == 1


def test_a_decision_reads_the_store_in_one_statement_outside_any_transaction(engine: Engine) -> None:
    """What an admission's decision costs the store: one statement (no BEGIN, no COMMIT round trip on
    PostgreSQL, whose connection is in autocommit for it), whatever the number of residents. Counted by
    the drivers themselves, since the statement runs on the driver's connection: SQLite's trace callback
    (every statement it runs) and libpq's protocol trace (every message sent to PostgreSQL)."""
    from sqlalchemy import event

    from canary.admission import EvidenceAccess, load_request
    from tests.support.paths import EXAMPLES

    req = load_request(str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"),
                       str(EXAMPLES / "profiles" / "embedding-service.yaml"))
    with tempfile.TemporaryFile("w+") as trace:
        statements: list[str] = []

        def watch(dbapi: Any, _record: Any, _proxy: Any) -> None:
            if engine.dialect.name == "sqlite":
                dbapi.set_trace_callback(statements.append)
            else:
                import psycopg

                dbapi.pgconn.trace(trace.fileno())
                dbapi.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)

        def unwatch(dbapi: Any, _record: Any) -> None:
            if engine.dialect.name == "sqlite":
                dbapi.set_trace_callback(None)
            else:
                dbapi.pgconn.untrace()

        event.listen(engine, "checkout", watch)
        event.listen(engine, "checkin", unwatch)
        try:
            reserved, source, evidence_ = EvidenceAccess.over(engine).decision_inputs(req, NOW)
        finally:
            event.remove(engine, "checkout", watch)
            event.remove(engine, "checkin", unwatch)
        trace.seek(0)
        messages = [line.split("\t") for line in trace.read().splitlines()]
    assert reserved == 0 and "booked by other admissions" in source
    assert [e.resident for e in evidence_] == [r.name for r in req.snapshot.residents]
    assert all(e.outcome is None and "no current evidence" in e.reason for e in evidence_)
    if engine.dialect.name == "sqlite":
        assert [s.split()[0].upper() for s in statements] == ["SELECT"], statements  # no BEGIN, no COMMIT
    else:
        sent = [m[2] for m in messages if m[0] == "F"]
        assert sent.count("Execute") == 1 and "Query" not in sent, messages  # no BEGIN/COMMIT (simple queries)
        idle = [m[3].strip() for m in messages if m[0] == "B" and m[2] == "ReadyForQuery"]
        assert idle and set(idle) == {"I"}, messages  # never inside a transaction: autocommit
