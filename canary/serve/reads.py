"""The decision read of the service (``evidence_store.lookup.read_batch``: bookings and evidence in
one statement), run where it costs a cached decision least, and shared by the decisions waiting for
it.

* PostgreSQL: on the event loop, through psycopg's asynchronous connection pool (``psycopg_pool``), in
  autocommit (one statement sees one snapshot by itself: no BEGIN/COMMIT round trips). No worker
  thread: handing a decision to a thread and back cost more CPU than the decision (measured: 0.4 ms of
  the 1.7 ms a cached admission cost, docs/serve.md), mostly in passing the interpreter lock around.
  A pooled connection that the server ended while it sat idle (a restart, an idle timeout) fails its
  statement; the pool then checks its idle connections and replaces the broken ones
  (``AsyncConnectionPool.check``), and the read runs once more (it is a read: repeating it is safe).
* SQLite: in a worker thread, on the engine's own pool. SQLite runs the statement inside this process
  and may wait for a lock (its busy timeout), which must never stall the event loop.

**Reads are shared, not one per decision.** At most ``in_flight`` reads run at once; a decision that
arrives while they all are in flight waits and joins the next read, which starts after it arrived
and reads, in one statement, the devices and pair keys of every decision waiting then (``MAX_BATCH``
at most; decisions under policies with different evidence lifetimes read apart). So every decision still sees the store
as it was after the decision arrived — a revocation, a booking or a record committed before a request
is in what that request reads — and ``at``, the instant bookings count and evidence must be fresh at,
is the read's own start, after every arrival it serves. A scheduler sending decisions faster than one
round trip to the store costs the store one statement per round trip, whatever their number.

Errors leave as the store's errors: ``TransientStoreError`` (unreachable, a connection lost twice,
no connection within the pool's timeout) and ``StoreUnavailable`` (anything else), which the service
answers with 503; every decision that shared the read gets the same answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import Engine

from canary.errors import CanaryError

#: How long a decision waits for a pooled PostgreSQL connection before it answers 503.
POOL_TIMEOUT_S = 10.0
#: Most decisions one read serves (each brings a device and its pair keys).
MAX_BATCH = 128


@dataclass(frozen=True)
class Read:
    """One decision's part of a read: ``at`` (when the read started: bookings as of then, evidence
    fresh then), the bytes booked on its device, and each of its key digests' candidate rows."""

    at: dt.datetime
    booked: int
    rows: dict[str, list[Any]]


@dataclass
class _Batch:
    """The decisions one read serves; ``done`` once it has answered (``found``) or failed (``error``)."""

    devices: set[str] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)
    decisions: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    at: dt.datetime | None = None
    found: Any = None
    error: BaseException | None = None

    def add(self, device_id: str, digests: Sequence[str]) -> None:
        self.devices.add(device_id)
        self.digests.update(digests)
        self.decisions += 1

    def full(self) -> bool:
        return self.decisions >= MAX_BATCH

    def part(self, device_id: str, digests: Sequence[str]) -> Read:
        assert self.at is not None and self.found is not None
        rows = self.found.rows
        return Read(self.at, self.found.booked.get(device_id, 0), {d: rows[d] for d in digests if d in rows})


class DecisionReads:
    """``read(...)`` → ``Read``, for one server process."""

    def __init__(self, engine: Engine, *, connections: int, limiter: anyio.CapacityLimiter, in_flight: int,
                 timeout_s: float = POOL_TIMEOUT_S, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.engine = engine
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._connections = connections
        self._timeout_s = timeout_s
        self._limiter = limiter
        self._pool: Any = None
        self._next: dict[float, _Batch] = {}  # by evidence TTL: not started yet, a decision arriving now joins it
        self._in_flight = anyio.CapacityLimiter(in_flight)  # reads running at once
        self.statements = 0  # reads run
        self.decisions = 0  # decisions answered by them

    @property
    def on_loop(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    async def open(self) -> None:
        """Start the pool (PostgreSQL): it connects in the background; reads wait for a connection."""
        if not self.on_loop:
            return
        from psycopg_pool import AsyncConnectionPool

        url = self.engine.url.set(drivername="postgresql")
        self._pool = AsyncConnectionPool(
            url.render_as_string(hide_password=False), min_size=1, max_size=self._connections,
            kwargs={"autocommit": True, "connect_timeout": 5}, timeout=self._timeout_s, open=False,
            name="canary-decision-reads")
        await self._pool.open(wait=False)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def read(self, *, device_id: str, digests: Sequence[str], ttl_s: float) -> Read:
        """The memory booked on ``device_id`` and the candidate evidence rows of each key digest, from a
        read that began after this call did (shared with the decisions waiting at the same time)."""
        while True:
            waiting = self._next.get(ttl_s)
            if waiting is None or not waiting.full():
                break
            await waiting.done.wait()  # full: the one after it
        if waiting is not None:  # a read that starts after this arrival: join it
            waiting.add(device_id, digests)
            await waiting.done.wait()
            if waiting.found is not None:
                return waiting.part(device_id, digests)
            if isinstance(waiting.error, CanaryError):
                raise type(waiting.error)(str(waiting.error)) from waiting.error
            return await self.read(device_id=device_id, digests=digests, ttl_s=ttl_s)  # it went away: read anew
        mine = self._next[ttl_s] = _Batch()
        mine.add(device_id, digests)
        try:
            async with self._in_flight:  # while every slot is busy, decisions arriving join ``mine``
                del self._next[ttl_s]
                mine.at = self._clock()
                mine.found = await self._statement(sorted(mine.devices), sorted(mine.digests), mine.at, ttl_s)
            self.statements += 1
            self.decisions += mine.decisions
            return mine.part(device_id, digests)
        except BaseException as err:
            mine.error = err
            raise
        finally:
            if self._next.get(ttl_s) is mine:
                del self._next[ttl_s]
            mine.done.set()

    async def _statement(self, devices: list[str], digests: list[str], at: dt.datetime, ttl_s: float) -> Any:
        """The statement itself: on the event loop (PostgreSQL) or in a worker thread (SQLite)."""
        if self.on_loop:
            return await self._read_async(devices, digests, at, ttl_s)
        return await anyio.to_thread.run_sync(self._read_sync, devices, digests, at, ttl_s, limiter=self._limiter)

    def _read_sync(self, devices: list[str], digests: list[str], at: dt.datetime, ttl_s: float) -> Any:
        from canary.admission.store import _single_statement
        from evidence_store.lookup import read_batch

        with _single_statement(self.engine) as connection:
            return read_batch(connection, devices=devices, digests=digests, booked_at=at, evidence_at=at,
                              ttl_s=ttl_s)

    async def _read_async(self, devices: list[str], digests: list[str], at: dt.datetime, ttl_s: float) -> Any:
        import psycopg
        from psycopg_pool import PoolTimeout

        from evidence_store.database import short_error
        from evidence_store.lookup import read_batch_async

        pool = self._pool
        if pool is None:
            raise RuntimeError("DecisionReads.read before open()")

        async def once() -> Any:
            async with pool.connection() as connection:
                return await read_batch_async(connection, self.engine.dialect, devices=devices, digests=digests,
                                              booked_at=at, evidence_at=at, ttl_s=ttl_s)

        try:
            try:
                return await once()
            except PoolTimeout:
                raise
            except psycopg.OperationalError:
                # A connection the server ended while it sat in the pool (a restart ends them all): the
                # pool discards it (its state is BAD), checks the others it holds idle and replaces the
                # broken ones, and this read, which is safe to repeat, runs once more.
                await pool.check()
                return await once()
        except PoolTimeout as err:
            raise self._unavailable(f"no connection within {self._timeout_s:g} s ({short_error(err)})") from err
        except psycopg.OperationalError as err:
            raise self._unavailable(short_error(err)) from err
        except psycopg.Error as err:
            from canary.errors import StoreUnavailable
            from evidence_store.database import redact

            raise StoreUnavailable(f"evidence store {redact(self.engine.url)} failed: {short_error(err)}") from err

    def _unavailable(self, why: str) -> Exception:
        from evidence_store.database import redact
        from evidence_store.errors import TransientStoreError

        return TransientStoreError(f"evidence store {redact(self.engine.url)} is unavailable: {why}")
