"""Liveness, readiness, Prometheus metrics and the no-op that is the benchmark's ceiling."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from canary.errors import CanaryError
from canary.serve import schemas as S
from canary.serve.deps import ERRORS, PROBLEM, Svc, require

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=S.Health)
async def healthz() -> S.Health:
    """The process answers (liveness)."""
    return S.Health(status="ok")


@router.get("/readyz", response_model=S.Health, responses={503: {"model": S.Health}})
async def readyz(svc: Svc) -> Response:
    """The store answers and its schema is at this canary's newest migration."""
    from evidence_store.migrate import check_schema

    try:
        await anyio.to_thread.run_sync(check_schema, svc.engine)
    except CanaryError as exc:
        return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready", "detail": ""})


@router.get("/metrics", dependencies=[Depends(require("read"))], response_class=Response,
            responses={200: {"content": {"text/plain": {}}}, 401: PROBLEM, 403: PROBLEM, 503: PROBLEM})
async def metrics(svc: Svc) -> Response:
    """Prometheus exposition format."""
    from prometheus_client import CONTENT_TYPE_LATEST

    body = await anyio.to_thread.run_sync(svc.metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/noop", dependencies=[Depends(require("read"))], responses=ERRORS)
async def noop() -> dict[str, bool]:
    """Does nothing behind authentication: the benchmark's ceiling for this server."""
    return {"ok": True}
