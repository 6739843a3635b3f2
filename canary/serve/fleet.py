"""The service's side of node agents: admission history, agents' devices, drift reports.

* Every admission is logged (``admission_log``), after its answer and batched (``AdmissionHistory``,
  one transaction per window, a row per pair, device, verdict and label counting its admissions, with
  the newest request's documents by value): the hot pairs a driver change revalidates and the plan of
  ``canary warm --from-history`` come from it.
* ``GET /v1/agents`` lists the devices node agents publish, with each snapshot's age.
* ``GET /v1/drift`` and ``GET /v1/drift/{id}``: driver changes the agents saw, and per revalidated pair
  the old and new outcome and resident slowdown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from canary.serve import schemas as S

log = logging.getLogger("canary.serve")


async def _service(request: Request) -> Any:
    """The app's ``Service`` (typed loosely: importing ``canary.serve.app`` would close a cycle)."""
    return request.app.state.service


Svc = Annotated[Any, Depends(_service)]
PROBLEM = {"model": S.ProblemDetail}
ERRORS: dict[int | str, dict[str, Any]] = {401: PROBLEM, 403: PROBLEM, 413: PROBLEM, 422: PROBLEM, 503: PROBLEM}


def history_row(svc: Any, resolved: Any, keys: tuple[Any, ...]) -> dict[str, Any] | None:
    """The history row of the admissions of one prepared request (``fleet.log_admission``'s arguments
    but ``verdict`` and ``now``, which each admission adds), or ``None`` when there is nothing to record
    (history off, an idle device, unprofiled residents). ``keys``: each resident's pair key."""
    from evidence_store import probe_queue
    from evidence_store.lookup import key_digest

    if not svc.config.log_admissions:
        return None
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
    (``fleet.log_admissions``). An admission is in the store ``window_s`` and a transaction after its
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
        from evidence_store import fleet

        self._db("admission_log", lambda session: fleet.log_admissions(session, batch))


def published_node_devices(svc: Any, node: str, policy: Any) -> list[Any]:
    from canary.agent.published import published_device
    from canary.serve.resolve import cached_policy
    from evidence_store import fleet

    rows = svc.db("published_list", lambda s: fleet.list_published(s, node=node), read_only=True)
    pol = policy or cached_policy(svc.config.default_policy)
    by_ref = {r.ref: r for r in rows}
    return [published_device(r.ref, by_ref.get, pol) for r in rows if not r.draining]


def add_fleet_routes(app: FastAPI, require: Callable[..., Any]) -> None:
    from canary.serve.probes import utcnow
    from evidence_store import fleet

    @app.get("/v1/agents", tags=["fleet"], dependencies=[Depends(require("read"))], responses=ERRORS)
    async def list_agents(svc: Svc, node: str | None = Query(default=None, max_length=200)) -> JSONResponse:
        """Devices node agents publish: node, driver, when the snapshot was taken and how old it is."""
        now = utcnow()
        rows = await anyio.to_thread.run_sync(
            lambda: svc.db("published_list", lambda s: fleet.list_published(s, node=node), read_only=True))
        return JSONResponse([{
            "ref": r.ref, "device_id": r.device_id, "node": r.node, "name": r.name, "agent": r.agent,
            "device_type": r.device_type, "driver_version": r.driver_version, "taken_at": r.taken_at.isoformat(),
            "published_at": r.published_at.isoformat(), "age_s": round(r.age_s(now), 3), "draining": r.draining,
        } for r in rows])

    @app.get("/v1/drift", tags=["fleet"], dependencies=[Depends(require("read"))], responses=ERRORS)
    async def list_drift(svc: Svc, limit: int = Query(default=50, ge=1, le=1000)) -> JSONResponse:
        """Driver changes node agents saw, newest first."""
        def work(s: Any) -> list[dict[str, Any]]:
            return [{"id": e.id, "device_id": e.device_id, "node": e.node, "device_type": e.device_type,
                     "old_driver": e.old_driver, "new_driver": e.new_driver,
                     "detected_at": e.detected_at.isoformat(), "stale_marked": e.stale_marked, "budget": e.budget,
                     "probes": len(e.probes_json)} for e in fleet.list_drift(s, limit=limit)]

        return JSONResponse(await anyio.to_thread.run_sync(lambda: svc.db("drift_list", work, read_only=True)))

    @app.get("/v1/drift/{event_id}", tags=["fleet"], dependencies=[Depends(require("read"))],
             responses={404: PROBLEM, **ERRORS})
    async def drift_report(event_id: str, svc: Svc) -> JSONResponse:
        """Old vs new outcome and resident slowdown per revalidated pair of one driver change."""
        def work(s: Any) -> dict[str, Any] | None:
            if fleet.get_drift(s, event_id) is None:
                return None
            return fleet.drift_report(s, event_id)

        report = await anyio.to_thread.run_sync(lambda: svc.db("drift_report", work, read_only=True))
        if report is None:
            raise HTTPException(404, f"no drift event {event_id!r}")
        return JSONResponse(report)


