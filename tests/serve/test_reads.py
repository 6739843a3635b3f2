"""``canary.serve.reads.DecisionReads``: the service's decision read must answer exactly what the
store's ``decision_read`` answers (PostgreSQL: through psycopg's asynchronous pool on the event loop;
SQLite: in a worker thread), survive connections the server ended, and fail as a store error — not
a hang, not a traceback — when the store is away."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest
from sqlalchemy import Engine, delete, text

from canary.serve.reads import DecisionReads
from evidence_store.engine import make_engine, session_scope
from evidence_store.errors import TransientStoreError
from evidence_store.evidence import record_evidence
from evidence_store.lookup import decision_read, key_digest
from evidence_store.models import Evidence
from evidence_store.reservations import reserve
from tests.evidence_store.conftest import PgServer, _need_pg
from tests.evidence_store.evidence_store_testkit import KEY
from tests.evidence_store.test_store_repository import LOOKUP_CASES, NOW, OTHER_KEY

DEVICE = "GPU-reads-0"
GIB = 2**30


async def _read(reads: DecisionReads, keys: list[Any], *, ttl_s: float = 86400.0) -> tuple[int, dict[str, Any]]:
    return await reads.read(device_id=DEVICE, digests=[key_digest(k) for k in keys], at=NOW, ttl_s=ttl_s)


def _sync(engine: Engine, keys: list[Any], *, ttl_s: float = 86400.0) -> tuple[int, dict[str, Any]]:
    with engine.connect() as connection:
        return decision_read(connection, device_id=DEVICE, keys=keys, booked_at=NOW, evidence_at=NOW, ttl_s=ttl_s)


def test_the_service_reads_what_the_store_reads_for_every_lookup_rule(store_url: str) -> None:
    """Every lookup case, and bookings beside them: the same booked bytes and the same rows, value for
    value, as the store's own read."""
    engine = make_engine(store_url)
    with session_scope(engine) as session:
        reserve(session, device_id=DEVICE, holder="x", memory_bytes=3 * GIB, capacity_memory_bytes=80 * GIB,
                lease_s=86400.0, now=NOW - timedelta(minutes=1))

    async def main() -> None:
        reads = DecisionReads(engine, connections=2, limiter=anyio.CapacityLimiter(2))
        await reads.open()
        try:
            for name, records, options, _, _ in LOOKUP_CASES:
                with session_scope(engine) as session:
                    session.execute(delete(Evidence))
                    for r in records:
                        record_evidence(session, r)
                ttl_s = float(str(options.get("ttl_s", 86400.0)))
                expected = await anyio.to_thread.run_sync(lambda t=ttl_s: _sync(engine, [KEY, OTHER_KEY], ttl_s=t))
                got = await _read(reads, [KEY, OTHER_KEY], ttl_s=ttl_s)
                assert got[0] == expected[0] == 3 * GIB, name
                assert got[1] == expected[1], name
                assert {d: [tuple(r) for r in rows] for d, rows in got[1].items()} == {
                    d: [tuple(r) for r in rows] for d, rows in expected[1].items()}, name
        finally:
            await reads.close()

    try:
        anyio.run(main)
    finally:
        engine.dispose()


def test_postgresql_reads_on_the_event_loop_without_a_thread(pg_server: PgServer | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(_need_pg(pg_server).migrated())

    async def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the PostgreSQL decision read handed work to a thread")

    async def main() -> None:
        reads = DecisionReads(engine, connections=1, limiter=anyio.CapacityLimiter(1))
        await reads.open()
        try:
            monkeypatch.setattr(anyio.to_thread, "run_sync", refuse)
            assert await _read(reads, [KEY]) == (0, {})
        finally:
            monkeypatch.undo()
            await reads.close()

    try:
        anyio.run(main)
    finally:
        engine.dispose()


def test_a_connection_the_server_ended_is_replaced(pg_server: PgServer | None) -> None:
    """PostgreSQL ends every connection of the pool (a restart, an idle timeout, an operator): the next
    read answers, on a new connection, instead of failing."""
    url = _need_pg(pg_server).migrated()
    engine = make_engine(url)
    database = engine.url.database

    async def main() -> None:
        reads = DecisionReads(engine, connections=2, limiter=anyio.CapacityLimiter(2))
        await reads.open()
        try:
            assert await _read(reads, [KEY]) == (0, {})

            def end_them() -> int:
                with engine.connect() as c:
                    ended = c.execute(text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid() AND application_name = ''"),
                        {"db": database}).scalar_one()
                    c.commit()
                    return int(ended)

            assert await anyio.to_thread.run_sync(end_them) >= 1
            for _ in range(3):  # every pooled connection is gone: each read still answers
                assert await _read(reads, [KEY]) == (0, {})
        finally:
            await reads.close()

    try:
        anyio.run(main)
    finally:
        engine.dispose()


def test_a_store_that_does_not_answer_is_a_transient_store_error() -> None:
    """Nothing listens: a read answers ``TransientStoreError`` naming the store (the service's 503)
    within the pool's timeout, never hangs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    engine = make_engine(f"postgresql://postgres@127.0.0.1:{port}/nothing", check_connection=False)

    async def main() -> None:
        reads = DecisionReads(engine, connections=1, limiter=anyio.CapacityLimiter(1), timeout_s=1.0)
        await reads.open()
        try:
            with anyio.fail_after(30), pytest.raises(TransientStoreError) as err:
                await _read(reads, [KEY])
            assert f"127.0.0.1:{port}" in str(err.value) and "unavailable" in str(err.value)
        finally:
            await reads.close()

    try:
        anyio.run(main)
    finally:
        engine.dispose()
