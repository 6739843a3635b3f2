"""Evidence records (list, show with its pair's history, revoke) and production feedback."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy.orm import Session

from canary.admission import utcnow
from canary.errors import InputError
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require

router = APIRouter(tags=["evidence"])


PAIR_DOC = ("RESIDENT:CANDIDATE, as `canary evidence list --pair`: each side a workload name (llm-decode), "
            "name@version, or a version (full or as tables show it); e.g. resnet50-training:llm-decode")


def _evidence_id(s: Session, given: str) -> str | None:
    """The full id of the record ``given`` names (an id or a unique prefix, as ``canary evidence show``
    takes); ``None`` when none does; an ambiguous prefix is a 422 naming the path parameter."""
    from evidence_store.cli_support import resolve_evidence_id
    from evidence_store.errors import NoSuchId

    try:
        return resolve_evidence_id(s, given)
    except NoSuchId:
        return None
    except InputError as exc:  # an ambiguous prefix
        raise HttpProblem(422, f"field 'path.evidence_id': {exc.problem}") from None


@router.get("/v1/evidence", dependencies=[Depends(require("read"))], responses=ERRORS)
async def list_evidence(
    svc: Svc,
    pair: Annotated[str | None, Query(max_length=500, description=PAIR_DOC)] = None,
    device_type: Annotated[str | None, Query(max_length=100)] = None,
    status: Annotated[str | None, Query(pattern="^(current|stale|revoked)$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """Evidence records, newest first. `pair` matches as `canary evidence list --pair` does; one that is
    not RESIDENT:CANDIDATE is a 422 naming `query.pair`."""
    from evidence_store.cli_support import (
        check_pair_filter,
        list_evidence_for_pairs,
        pair_names,
        pairs_named,
    )
    from evidence_store.evidence import list_evidence as repo_list

    if pair is not None:
        try:
            check_pair_filter(pair)
        except InputError as exc:
            raise HttpProblem(422, f"field 'query.pair': {exc.problem}") from None

    def work(s: Session) -> Any:
        from evidence_store.cli_support import device_type_filter
        from evidence_store.models import Evidence

        kind = device_type
        if kind is not None:  # as `canary evidence list --device-type`: an alias is its catalog name
            try:
                kind = device_type_filter(s, kind, option="device_type", column=Evidence.device_type)
            except InputError as exc:
                raise HttpProblem(422, f"field 'query.device_type': {exc.problem}") from None
        if pair is None:
            return repo_list(s, device_type=kind, status=status, limit=limit)  # type: ignore[arg-type]
        names = pair_names(s)
        return list_evidence_for_pairs(s, pairs_named(s, pair, names), device_type=kind, status=status, limit=limit)

    rows = await anyio.to_thread.run_sync(lambda: svc.db("evidence_list", work, read_only=True))
    return [r.model_dump(mode="json") for r in rows]


@router.get("/v1/evidence/{evidence_id}", dependencies=[Depends(require("read"))],
            responses={404: PROBLEM, **ERRORS})
async def show_evidence(
    evidence_id: Annotated[str, Path(max_length=200, description="an evidence id or a unique prefix of one "
                                     "(the tables print 8 characters)")],
    svc: Svc,
) -> dict[str, Any]:
    """One record and the history of its pair key (newest first)."""
    from evidence_store.evidence import get_evidence, history

    def work(s: Session) -> Any:
        full_id = _evidence_id(s, evidence_id)
        rec = None if full_id is None else get_evidence(s, full_id)
        return None if rec is None or full_id is None else (rec, history(s, full_id))

    found = await anyio.to_thread.run_sync(lambda: svc.db("evidence_show", work, read_only=True))
    if found is None:
        raise HttpProblem(404, f"no evidence {evidence_id!r}")
    rec, hist = found
    return {"evidence": rec.model_dump(mode="json"), "history": [h.model_dump(mode="json") for h in hist]}


@router.post("/v1/evidence/{evidence_id}/revoke", dependencies=[Depends(require("admin"))],
             responses={404: PROBLEM, **ERRORS})
async def revoke_evidence(
    evidence_id: Annotated[str, Path(max_length=200, description="an evidence id or a unique prefix of one")],
    body: S.RevokeRequest, svc: Svc,
) -> dict[str, Any]:
    """Revoke one record with a reason (append-only: it stays, marked revoked)."""
    from evidence_store.evidence import get_evidence, revoke

    def work(s: Session) -> Any:
        full_id = _evidence_id(s, evidence_id)
        found = None if full_id is None else get_evidence(s, full_id)
        if full_id is None or found is None:
            return None
        already = found.status == "revoked"
        if not already:
            revoke(s, full_id, body.reason)
        return get_evidence(s, full_id), already

    answer = await anyio.to_thread.run_sync(lambda: svc.db("evidence_revoke", work))
    if answer is None:
        raise HttpProblem(404, f"no evidence {evidence_id!r}")
    rec, already = answer
    # revoked before: the record keeps its first reason; the answer says so rather than claim this one
    return dict(rec.model_dump(mode="json")) | {"already_revoked": already}


@router.post("/v1/feedback", dependencies=[Depends(require("feedback"))], response_model=S.FeedbackResponse,
             responses=ERRORS)
async def feedback(body: S.FeedbackRequest, svc: Svc) -> S.FeedbackResponse:
    """A production SLO violation for an admitted pair: recorded as evidence that outweighs passes. Without
    ``regime``, under the regime the pair's stored admission on this device was decided under (a 422
    naming ``body.regime`` when there are several); the answer says which pair key it was recorded under."""
    from canary.admission import record_feedback

    def work() -> S.FeedbackResponse:
        from canary.admission.request import pair_key
        from canary.serve.feedback import admitted_regimes, several_regimes

        now = utcnow()
        req = svc.resolve(body).request
        regime_from = "body.regime"
        resident = next((r for r in req.snapshot.residents if r.name == body.resident_name), None)
        if body.regime is None:
            regime_from = f"chosen by canary ({req.regime_chosen_by}): no admission of this pair on this device is stored"
            if resident is not None:
                admitted = svc.db("feedback_regime", lambda s: admitted_regimes(s, req, resident, now),
                                  read_only=True)
                if len(admitted) > 1:
                    raise InputError(several_regimes(body.resident_name, req, admitted), field="regime")
                if admitted:
                    one = admitted[0]
                    req = svc.resolve(body.model_copy(update={"regime": one.regime})).request
                    regime_from = (f"the stored admission of this pair (certificate {one.certificate_id}, booking "
                                   f"{'held' if one.held else 'released or expired'})")
        with svc.metrics.store_op("feedback"):
            evidence_id = record_feedback(req, resident_name=body.resident_name, db_url=svc.url, engine=svc.engine,
                                          observed_slowdown_pct=body.slowdown_pct, now=now)
        key = pair_key(req, resident) if resident is not None else None
        assert key is not None  # record_feedback refused a resident without a pair key
        return S.FeedbackResponse(evidence_id=evidence_id, key=key.as_dict(), regime_from=regime_from)

    return await anyio.to_thread.run_sync(work)
