"""The decision read of the service (``evidence_store.lookup.decision_read``: bookings and evidence in
one statement), run where it costs a cached admission least.

* PostgreSQL: on the event loop, through psycopg's asynchronous connection pool (``psycopg_pool``), in
  autocommit (one statement sees one snapshot by itself: no BEGIN/COMMIT round trips). No worker
  thread: handing a decision to a thread and back cost more CPU than the decision (measured: 0.4 ms of
  the 1.7 ms a cached admission cost, docs/serve.md), mostly in passing the interpreter lock around.
  A pooled connection that the server ended while it sat idle (a restart, an idle timeout) fails its
  statement; the pool then checks its idle connections and replaces the broken ones
  (``AsyncConnectionPool.check``), and the read runs once more (it is a read: repeating it is safe).
* SQLite: in a worker thread, on the engine's own pool. SQLite runs the statement inside this process
  and may wait for a lock (its busy timeout), which must never stall the event loop.

Errors leave as the store's errors: ``TransientStoreError`` (unreachable, a connection lost twice,
no connection within the pool's timeout) and ``StoreUnavailable`` (anything else), which the service
answers with 503.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import Engine

#: How long a decision waits for a pooled PostgreSQL connection before it answers 503.
POOL_TIMEOUT_S = 10.0


class DecisionReads:
    """``read(...)`` → (booked bytes, candidate rows by key digest), for one server process."""

    def __init__(self, engine: Engine, *, connections: int, limiter: anyio.CapacityLimiter,
                 timeout_s: float = POOL_TIMEOUT_S) -> None:
        self.engine = engine
        self._connections = connections
        self._timeout_s = timeout_s
        self._limiter = limiter
        self._pool: Any = None

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

    async def read(self, *, device_id: str, digests: Sequence[str], at: dt.datetime,
                   ttl_s: float) -> tuple[int, dict[str, list[Any]]]:
        """The memory booked on ``device_id`` at ``at`` and the candidate evidence rows of each key
        digest fresh at ``at``."""
        if not self.on_loop:
            return await anyio.to_thread.run_sync(self._read_sync, device_id, tuple(digests), at, ttl_s,
                                                  limiter=self._limiter)
        return await self._read_async(device_id, digests, at, ttl_s)

    def _read_sync(self, device_id: str, digests: tuple[str, ...], at: dt.datetime,
                   ttl_s: float) -> tuple[int, dict[str, list[Any]]]:
        from canary.admission.store import _single_statement
        from evidence_store.lookup import read_digests

        with _single_statement(self.engine) as connection:
            return read_digests(connection, device_id=device_id, digests=digests, booked_at=at, evidence_at=at,
                                ttl_s=ttl_s)

    async def _read_async(self, device_id: str, digests: Sequence[str], at: dt.datetime,
                          ttl_s: float) -> tuple[int, dict[str, list[Any]]]:
        import psycopg
        from psycopg_pool import PoolTimeout

        from evidence_store.lookup import decision_read_async

        pool = self._pool
        if pool is None:
            raise RuntimeError("DecisionReads.read before open()")

        async def once() -> tuple[int, dict[str, list[Any]]]:
            async with pool.connection() as connection:
                return await decision_read_async(connection, self.engine.dialect, device_id=device_id,
                                                 digests=digests, booked_at=at, evidence_at=at, ttl_s=ttl_s)

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
            raise self._unavailable(f"no connection within {self._timeout_s:g} s ({_first_line(err)})") from err
        except psycopg.OperationalError as err:
            raise self._unavailable(_first_line(err)) from err
        except psycopg.Error as err:
            from canary.errors import StoreUnavailable
            from evidence_store.engine import redact

            raise StoreUnavailable(f"evidence store {redact(self.engine.url)} failed: {_first_line(err)}") from err

    def _unavailable(self, why: str) -> Exception:
        from evidence_store.engine import redact
        from evidence_store.errors import TransientStoreError

        return TransientStoreError(f"evidence store {redact(self.engine.url)} is unavailable: {why}")


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
