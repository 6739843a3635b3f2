"""The admission history the service writes: every admission is logged (``admission_log``), after its
answer and batched (``AdmissionHistory``: one transaction per window, a row per pair, device, verdict
and label counting its admissions, with the newest request's documents by value, ``QueuedRequest``).
The hot pairs a driver change revalidates and the plan of ``canary warm --from-history`` come from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from canary._model import PairKey
    from canary.serve.resolve import Resolved

log = logging.getLogger("canary.serve")


def history_row(resolved: Resolved, keys: tuple[PairKey | None, ...]) -> dict[str, Any] | None:
    """The history row of the admissions of one prepared request (``admission_log.log_admission``'s arguments
    but ``verdict`` and ``now``, which each admission adds), or ``None`` when there is nothing to record
    (an idle device, unprofiled residents). ``keys``: each resident's pair key."""
    from evidence_store.lookup import key_digest
    from evidence_store.service import probe_queue

    req = resolved.request
    keyed = [k for k in keys if k is not None]
    if not keyed:
        return None  # an idle device or unprofiled residents: no pair to warm or revalidate
    candidate = f"{req.candidate.name}@{req.candidate.version}"
    residents = "+".join(f"{r.name}" for r in req.snapshot.residents)
    return {"pair_digest": probe_queue.pair_digest(keyed), "key_digests": [key_digest(k) for k in keyed],
            "device_type": req.spec.name, "device_id": req.device_id,
            "label": f"{candidate} beside {residents} on {req.spec.name} ({req.regime})",
            "request_json": resolved.request_json}


class AdmissionHistory:
    """Writes the admission history off the request path: a request hands its entry over and is
    answered; one writer task waits ``window_s`` after an entry arrives, then commits every entry waiting
    in one transaction (group commit), as one row per pair, device, verdict and label that counts them
    (``admission_log.log_admissions``). An admission is in the store ``window_s`` and a transaction after its
    answer; at any load the admissions of a window share one commit and, for a pair asked again and
    again, one row.

    History is best effort, as before: a failed write is logged with the number of rows lost, and at
    most ``max_pending`` rows wait (the oldest are dropped, and counted, if the store stays away)."""

    def __init__(self, db: Callable[..., Any], *, max_pending: int = 10_000, window_s: float = 0.0) -> None:
        self._db = db
        self._window_s = window_s
        self._max_pending = max_pending
        self._pending: list[dict[str, Any]] = []
        self._wake = anyio.Event()
        self.written = 0
        self.dropped = 0
        self.transactions = 0

    def add(self, entry: dict[str, Any] | None) -> None:
        """Queue one row (from the event loop's thread)."""
        if entry is None:
            return
        self._pending.append(entry)
        if len(self._pending) > self._max_pending:
            del self._pending[0]
            self.dropped += 1
        self._wake.set()

    async def serve(self) -> None:
        """Until cancelled: wait for rows, wait ``window_s`` more, write what is pending in one
        transaction, repeat. Rows that arrive while a batch is written wait for the next window: one
        transaction per window at most, never a run of small ones back to back (which kept the writer
        busy, and the requests it overlapped slower, for most of the time at a few hundred requests a
        second)."""
        while True:
            await self._wake.wait()
            if self._window_s > 0:
                await anyio.sleep(self._window_s)  # rows answered meanwhile join this transaction
            self._wake = anyio.Event()
            await self._write_pending()

    async def flush(self) -> None:
        """Write every pending row now (at shutdown: until none is left)."""
        while self._pending:
            await self._write_pending()

    async def _write_pending(self) -> None:
        """One transaction with every row pending now (shielded: a shutdown does not lose it half-way)."""
        with anyio.CancelScope(shield=True):
            batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                await anyio.to_thread.run_sync(self._write, batch)
                self.written += len(batch)
                self.transactions += 1
            except Exception as exc:  # the decisions stand; say what the history lacks and why
                self.dropped += len(batch)
                log.warning("admission history: %d row(s) not recorded: %s", len(batch), exc)

    def _write(self, batch: list[dict[str, Any]]) -> None:
        from evidence_store.admission_log import log_admissions

        self._db("admission_log", lambda session: log_admissions(session, batch))
