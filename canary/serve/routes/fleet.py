"""The fleet of node agents: ``GET /v1/agents`` (the devices they publish, with each snapshot's age),
``GET /v1/drift`` and ``GET /v1/drift/{id}`` (driver changes they saw, and per revalidated pair the old
and new outcome and resident slowdown)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from canary.admission import utcnow
from canary.serve.deps import ERRORS, PROBLEM, Svc, require
from evidence_store import drift, published

router = APIRouter(tags=["fleet"], dependencies=[Depends(require("read"))])


@router.get("/v1/agents", responses=ERRORS)
async def list_agents(svc: Svc, node: str | None = Query(default=None, max_length=200)) -> JSONResponse:
    """Devices node agents publish: node, driver, when the snapshot was taken and how old it is."""
    now = utcnow()
    rows = await anyio.to_thread.run_sync(
        lambda: svc.db("published_list", lambda s: published.list_published(s, node=node), read_only=True))
    return JSONResponse([{
        "ref": r.ref, "device_id": r.device_id, "node": r.node, "name": r.name, "agent": r.agent,
        "device_type": r.device_type, "driver_version": r.driver_version, "taken_at": r.taken_at.isoformat(),
        "published_at": r.published_at.isoformat(), "age_s": round(r.age_s(now), 3), "draining": r.draining,
    } for r in rows])


@router.get("/v1/drift", responses=ERRORS)
async def list_drift(svc: Svc, limit: int = Query(default=50, ge=1, le=1000)) -> JSONResponse:
    """Driver changes node agents saw, newest first."""
    def work(s: Session) -> list[dict[str, Any]]:
        return [{"id": e.id, "device_id": e.device_id, "node": e.node, "device_type": e.device_type,
                 "old_driver": e.old_driver, "new_driver": e.new_driver,
                 "detected_at": e.detected_at.isoformat(), "stale_marked": e.stale_marked, "budget": e.budget,
                 "probes": len(e.probes_json)} for e in drift.list_drift(s, limit=limit)]

    return JSONResponse(await anyio.to_thread.run_sync(lambda: svc.db("drift_list", work, read_only=True)))


@router.get("/v1/drift/{event_id}", responses={404: PROBLEM, **ERRORS})
async def drift_report(event_id: str, svc: Svc) -> JSONResponse:
    """Old vs new outcome and resident slowdown per revalidated pair of one driver change."""
    def work(s: Session) -> dict[str, Any] | None:
        if drift.get_drift(s, event_id) is None:
            return None
        return drift.drift_report(s, event_id)

    report = await anyio.to_thread.run_sync(lambda: svc.db("drift_report", work, read_only=True))
    if report is None:
        raise HTTPException(404, f"no drift event {event_id!r}")
    return JSONResponse(report)
