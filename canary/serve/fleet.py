"""The service's side of node agents: admission history, agents' devices, drift reports.

* Every admission is logged (``admission_log``) with its documents by value: the hot pairs a driver
  change revalidates and the plan of ``canary warm --from-history`` come from it.
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


def _service(request: Request) -> Any:
    """The app's ``Service`` (typed loosely: importing ``canary.serve.app`` would close a cycle)."""
    return request.app.state.service


Svc = Annotated[Any, Depends(_service)]
PROBLEM = {"model": S.ProblemDetail}
ERRORS: dict[int | str, dict[str, Any]] = {401: PROBLEM, 403: PROBLEM, 413: PROBLEM, 422: PROBLEM, 503: PROBLEM}


def pair_keys_of(req: Any) -> list[Any]:
    from canary.admission import pair_key

    keys = [pair_key(req, r) for r in req.snapshot.residents]
    return [k for k in keys if k is not None]


def log_admission(svc: Any, resolved: Any, verdict: str) -> None:
    """Record the admission as history; never fails the admission itself (history is best effort)."""
    from canary.serve.probes import utcnow
    from evidence_store import fleet, probe_queue

    if not svc.config.log_admissions:
        return
    req = resolved.request
    keys = pair_keys_of(req)
    if not keys:
        return  # an idle device or unprofiled residents: no pair to warm or revalidate
    candidate = f"{req.candidate.name}@{req.candidate.version}"
    residents = "+".join(f"{r.name}" for r in req.snapshot.residents)
    label = f"{candidate} beside {residents} on {req.spec.name} ({req.regime})"
    try:
        svc.db("admission_log", lambda s: fleet.log_admission(
            s, pair_digest=probe_queue.pair_digest(keys), key_digests=[k.digest() for k in keys],
            device_type=req.spec.name, device_id=req.device_id, label=label, verdict=verdict,
            request_json=resolved.request_json, now=utcnow()))
    except Exception as exc:  # the decision stands; say why the history lacks it
        log.warning("admission history not recorded: %s", exc)


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


