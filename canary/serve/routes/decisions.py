"""``POST /v1/fit`` and ``POST /v1/admissions`` (``canary.serve.decide``): a body seen before is decided
by the route class's fast path; the endpoint validates and prepares every other one."""

from __future__ import annotations

import time

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from canary.certificate import Certificate
from canary.serve import decide
from canary.serve import schemas as S
from canary.serve.deps import ERRORS, Svc, require

router = APIRouter(tags=["decisions"])


async def fit(body: S.DecisionRequest, svc: Svc, request: Request) -> Response:
    """Stage 1 and an evidence lookup, never a probe (``canary fit``)."""
    t0 = time.perf_counter()
    prepared = await anyio.to_thread.run_sync(
        lambda: decide.prepare(svc, body, probe=False, reserve=False), limiter=svc.decisions)
    await decide.keep(svc, "fit", request, prepared)
    return await decide.fit(svc, prepared, t0)


router.add_api_route(
    "/v1/fit", fit, methods=["POST"], dependencies=[Depends(require("fit"))],
    responses={200: {"model": Certificate}, **ERRORS}, response_class=Response,
    route_class_override=decide.decision_route(decide.kept_body("fit", "fit", decide.fit)))


async def admissions(body: S.AdmissionRequest, svc: Svc, request: Request) -> Response:
    """Both stages. 200 with the certificate when stage 1 or the evidence decides; otherwise 202 with
    ``Location: /v1/probes/{id}`` — requests for the same pair share one probe."""
    t0 = time.perf_counter()
    prepared = await anyio.to_thread.run_sync(lambda: decide.prepare(
        svc, body, probe=body.probe, reserve=body.reserve, seed=body.seed), limiter=svc.decisions)
    await decide.keep(svc, "admissions", request, prepared)
    return await decide.admission(svc, prepared, t0)


router.add_api_route(
    "/v1/admissions", admissions, methods=["POST"], dependencies=[Depends(require("admit"))],
    responses={200: {"model": Certificate, "description": "decided without a probe"},
               202: {"model": S.ProbeStatus, "description": "a probe runs (or was already running for "
                     "this pair): follow Location"}, **ERRORS},
    response_class=Response,
    route_class_override=decide.decision_route(decide.kept_body("admissions", "admit", decide.admission)))
