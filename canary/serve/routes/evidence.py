"""Evidence records (list, show with its pair's history, revoke) and production feedback."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from canary.admission import utcnow
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require

router = APIRouter(tags=["evidence"])


@router.get("/v1/evidence", dependencies=[Depends(require("read"))], responses=ERRORS)
async def list_evidence(
    svc: Svc,
    pair: Annotated[str | None, Query(max_length=500, description="RESIDENT_VERSION:CANDIDATE_VERSION")] = None,
    device_type: Annotated[str | None, Query(max_length=100)] = None,
    status: Annotated[str | None, Query(pattern="^(current|stale|revoked)$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """Evidence records, newest first."""
    from evidence_store.evidence import list_evidence as repo_list

    rows = await anyio.to_thread.run_sync(lambda: svc.db("evidence_list", lambda s: repo_list(
        s, pair=pair, device_type=device_type, status=status, limit=limit), read_only=True))  # type: ignore[arg-type]
    return [r.model_dump(mode="json") for r in rows]


@router.get("/v1/evidence/{evidence_id}", dependencies=[Depends(require("read"))],
            responses={404: PROBLEM, **ERRORS})
async def show_evidence(evidence_id: str, svc: Svc) -> dict[str, Any]:
    """One record and the history of its pair key (newest first)."""
    from evidence_store.evidence import get_evidence, history

    def work(s: Session) -> Any:
        rec = get_evidence(s, evidence_id)
        return None if rec is None else (rec, history(s, evidence_id))

    found = await anyio.to_thread.run_sync(lambda: svc.db("evidence_show", work, read_only=True))
    if found is None:
        raise HttpProblem(404, f"no evidence {evidence_id!r}")
    rec, hist = found
    return {"evidence": rec.model_dump(mode="json"), "history": [h.model_dump(mode="json") for h in hist]}


@router.post("/v1/evidence/{evidence_id}/revoke", dependencies=[Depends(require("admin"))],
             responses={404: PROBLEM, **ERRORS})
async def revoke_evidence(evidence_id: str, body: S.RevokeRequest, svc: Svc) -> dict[str, Any]:
    """Revoke one record with a reason (append-only: it stays, marked revoked)."""
    from evidence_store.evidence import get_evidence, revoke

    def work(s: Session) -> Any:
        if get_evidence(s, evidence_id) is None:
            return None
        revoke(s, evidence_id, body.reason)
        return get_evidence(s, evidence_id)

    rec = await anyio.to_thread.run_sync(lambda: svc.db("evidence_revoke", work))
    if rec is None:
        raise HttpProblem(404, f"no evidence {evidence_id!r}")
    return dict(rec.model_dump(mode="json"))


@router.post("/v1/feedback", dependencies=[Depends(require("feedback"))], response_model=S.FeedbackResponse,
             responses=ERRORS)
async def feedback(body: S.FeedbackRequest, svc: Svc) -> S.FeedbackResponse:
    """A production SLO violation for an admitted pair: recorded as evidence that outweighs passes."""
    from canary.admission import record_feedback

    def work() -> str:
        req = svc.resolve(body).request
        with svc.metrics.store_op("feedback"):
            return record_feedback(req, resident_name=body.resident_name, db_url=svc.url, engine=svc.engine,
                                   observed_slowdown_pct=body.slowdown_pct, now=utcnow())

    return S.FeedbackResponse(evidence_id=await anyio.to_thread.run_sync(work))
