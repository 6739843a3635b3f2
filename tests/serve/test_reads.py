"""``canary.serve.reads.DecisionReads``: the service's decision read must answer exactly what the
store's ``decision_read`` answers (PostgreSQL: through psycopg's asynchronous pool on the event loop;
SQLite: in a worker thread), survive connections the server ended, and fail as a store error — not
a hang, not a traceback — when the store is away."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest
from sqlalchemy import Engine, delete, text

from canary.serve.reads import DecisionReads
from evidence_store.database import make_engine, session_scope
from evidence_store.errors import TransientStoreError
from evidence_store.evidence import record_evidence
from evidence_store.lookup import decision_read, key_digest
from evidence_store.models import Evidence
from evidence_store.reservations import reserve
from tests.evidence_store.conftest import PgServer, _need_pg
from tests.evidence_store.evidence_store_testkit import KEY
from tests.evidence_store.test_store_repository import LOOKUP_CASES, NOW, OTHER_KEY

DEVICE = "GPU-reads-0"
OTHER = "GPU-reads-1"
GIB = 2**30


def _reads(engine: Engine, connections: int = 2, *, in_flight: int = 1, **options: Any) -> DecisionReads:
    return DecisionReads(engine, connections=connections, limiter=anyio.CapacityLimiter(connections),
                         in_flight=in_flight, clock=lambda: NOW, **options)


def _run(engine: Engine, body: Callable[[DecisionReads], Awaitable[None]], *, connections: int = 2,
         **options: Any) -> None:
    """``body(reads)`` on an event loop, with a ``DecisionReads`` over ``engine`` opened for it and
    closed after it; the engine is disposed afterwards."""
    async def main() -> None:
        reads = _reads(engine, connections, **options)
        await reads.open()
        try:
            await body(reads)
        finally:
            await reads.close()

    try:
        anyio.run(main)
    finally:
        engine.dispose()


async def _read(reads: DecisionReads, keys: list[Any], *, ttl_s: float = 86400.0) -> tuple[int, dict[str, Any]]:
    read = await reads.read(device_id=DEVICE, digests=[key_digest(k) for k in keys], ttl_s=ttl_s)
    assert read.at == NOW
    return read.booked, read.rows


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

    async def main(reads: DecisionReads) -> None:
        for name, records, options, _, _ in LOOKUP_CASES:
            with session_scope(engine) as session:
                session.execute(delete(Evidence))
                for r in records:
                    record_evidence(session, r)
            ttl_s = float(str(options.get("ttl_s", 86400.0)))
            expected = await anyio.to_thread.run_sync(lambda t=ttl_s: _sync(engine, [KEY, OTHER_KEY], ttl_s=t))
            got = await _read(reads, [KEY, OTHER_KEY], ttl_s=ttl_s)
            assert got[0] == expected[0] == 3 * GIB, name
            assert got[1] == expected[1], name  # the same records, value for value, in the same order

    _run(engine, main)


def test_postgresql_reads_on_the_event_loop_without_a_thread(pg_server: PgServer | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(_need_pg(pg_server).migrated())

    async def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the PostgreSQL decision read handed work to a thread")

    async def main(reads: DecisionReads) -> None:
        monkeypatch.setattr(anyio.to_thread, "run_sync", refuse)
        try:
            assert await _read(reads, [KEY]) == (0, {})
        finally:
            monkeypatch.undo()

    _run(engine, main, connections=1)


def test_a_connection_the_server_ended_is_replaced(pg_server: PgServer | None) -> None:
    """PostgreSQL ends every connection of the pool (a restart, an idle timeout, an operator): the next
    read answers, on a new connection, instead of failing."""
    url = _need_pg(pg_server).migrated()
    engine = make_engine(url)
    database = engine.url.database

    async def main(reads: DecisionReads) -> None:
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

    _run(engine, main)


def test_a_store_that_does_not_answer_is_a_transient_store_error() -> None:
    """Nothing listens: a read answers ``TransientStoreError`` naming the store (the service's 503)
    within the pool's timeout, never hangs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    engine = make_engine(f"postgresql://postgres@127.0.0.1:{port}/nothing", check_connection=False)

    async def main(reads: DecisionReads) -> None:
        with anyio.fail_after(30), pytest.raises(TransientStoreError) as err:
            await _read(reads, [KEY])
        assert f"127.0.0.1:{port}" in str(err.value) and "unavailable" in str(err.value)

    _run(engine, main, connections=1, timeout_s=1.0)


# ------------------------------------------------------------------ concurrent decisions share a read


def _gated(reads: DecisionReads, monkeypatch: pytest.MonkeyPatch, *, fail: BaseException | None = None) -> dict[
        str, Any]:
    """Make each read of ``reads`` run its real statement, then say so and wait at a gate before it
    returns (or raise ``fail``): the test decides what happens while a read is in flight."""
    state: dict[str, Any] = {"statements": 0, "gates": []}
    real = reads._statement

    async def gated(*args: Any) -> Any:
        result = await real(*args)
        state["statements"] += 1
        gate = anyio.Event()
        state["gates"].append(gate)
        await gate.wait()
        if fail is not None:
            raise fail
        return result

    monkeypatch.setattr(reads, "_statement", gated)
    return state


async def _until(state: dict[str, Any], statements: int) -> None:
    with anyio.fail_after(20):
        while state["statements"] < statements:
            await anyio.sleep(0.005)


def test_concurrent_decisions_share_one_read_begun_after_each_arrived(store_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Six decisions, the first alone, then five on two devices and two pair keys while it is in
    flight: two statements; the five share the second, which began after a booking they must see."""
    engine = make_engine(store_url)
    with session_scope(engine) as session:
        record_evidence(session, LOOKUP_CASES[1][1][0])  # one safe record for KEY
    asks = [(DEVICE, KEY), (DEVICE, KEY), (DEVICE, OTHER_KEY), (OTHER, KEY), (OTHER, OTHER_KEY), (OTHER, KEY)]
    results: list[Any] = [None] * len(asks)

    async def main(reads: DecisionReads) -> None:
        state = _gated(reads, monkeypatch)
        async with anyio.create_task_group() as tg:
            async def one(i: int) -> None:
                device, key = asks[i]
                results[i] = await reads.read(device_id=device, digests=[key_digest(key)], ttl_s=86400.0)

            tg.start_soon(one, 0)
            await _until(state, 1)  # the first read is in flight: its snapshot predates what follows
            with session_scope(engine) as session:  # committed before the next five arrive
                for device, gib in ((DEVICE, 5), (OTHER, 7)):
                    reserve(session, device_id=device, holder="late", memory_bytes=gib * GIB,
                            capacity_memory_bytes=80 * GIB, lease_s=86400.0, now=NOW - timedelta(minutes=1))
            for i in range(1, len(asks)):
                tg.start_soon(one, i)
            await anyio.sleep(0.05)
            assert state["statements"] == 1  # they wait for the read in flight, then share the next
            state["gates"][0].set()
            await _until(state, 2)
            state["gates"][1].set()
        assert reads.statements == 2 and reads.decisions == len(asks)

    _run(engine, main)
    assert results[0].booked == 0  # read before the bookings
    assert len({r.at for r in results[1:]}) == 1 and results[1].at == NOW  # one read for the five…
    assert [r.booked for r in results[1:]] == [5 * GIB, 5 * GIB, 7 * GIB, 7 * GIB, 7 * GIB]  # …after the bookings
    for (_, key), r in zip(asks, results, strict=True):  # each gets its own key's rows, and only those
        assert set(r.rows) == ({key_digest(KEY)} if key == KEY else set())
    assert [row.id for row in results[1].rows[key_digest(KEY)]] == [row.id for row in results[0].rows[key_digest(KEY)]]


def test_a_failed_read_fails_every_decision_that_shared_it(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(store_url)
    outcomes: list[Any] = []

    async def main(reads: DecisionReads) -> None:
        state = _gated(reads, monkeypatch, fail=TransientStoreError("evidence store x is unavailable: test"))
        async with anyio.create_task_group() as tg:
            async def one() -> None:
                try:
                    await reads.read(device_id=DEVICE, digests=[], ttl_s=86400.0)
                except TransientStoreError as err:
                    outcomes.append(str(err))

            tg.start_soon(one)
            await _until(state, 1)
            tg.start_soon(one)  # waits for the first, then its own read, shared with the third
            tg.start_soon(one)
            state["gates"][0].set()
            await _until(state, 2)
            state["gates"][1].set()

    _run(engine, main)
    assert outcomes == ["evidence store x is unavailable: test"] * 3


def test_a_decision_whose_shared_read_was_cancelled_reads_for_itself(store_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(store_url)
    got: dict[str, Any] = {}

    async def main(reads: DecisionReads) -> None:
        state = _gated(reads, monkeypatch)
        async with anyio.create_task_group() as tg:
            async def one(name: str, scope: anyio.CancelScope | None = None) -> None:
                with scope or anyio.CancelScope():
                    got[name] = await reads.read(device_id=DEVICE, digests=[], ttl_s=86400.0)

            tg.start_soon(one, "first")
            await _until(state, 1)
            leader = anyio.CancelScope()
            tg.start_soon(one, "second", leader)  # will start the next read, after the first
            await anyio.sleep(0.02)
            tg.start_soon(one, "third")  # joins the second's read
            await anyio.sleep(0.02)
            leader.cancel()  # the second goes away before its read started
            state["gates"][0].set()
            await _until(state, 2)  # the third reads for itself
            state["gates"][1].set()
        assert state["statements"] == 2

    _run(engine, main)
    assert "second" not in got and got["third"] is not got["first"]


def test_below_the_reads_in_flight_a_decision_reads_at_once(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reads may run at once: the second decision does not wait for the first's read."""
    engine = make_engine(store_url)
    got: list[Any] = []

    async def main(reads: DecisionReads) -> None:
        state = _gated(reads, monkeypatch)
        async with anyio.create_task_group() as tg:
            async def one(device: str) -> None:
                got.append(await reads.read(device_id=device, digests=[], ttl_s=86400.0))

            tg.start_soon(one, DEVICE)
            await _until(state, 1)
            tg.start_soon(one, OTHER)
            await _until(state, 2)  # in flight beside the first
            tg.start_soon(one, DEVICE)  # both slots busy: waits, then reads alone
            await anyio.sleep(0.05)
            assert state["statements"] == 2
            for gate in state["gates"][:2]:
                gate.set()
            await _until(state, 3)
            state["gates"][2].set()
        assert reads.statements == 3 and reads.decisions == 3

    _run(engine, main, in_flight=2)
    assert len(got) == 3
