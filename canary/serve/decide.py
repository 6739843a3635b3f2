"""The service's decisions: ``POST /v1/fit`` and ``POST /v1/admissions``, from request bytes to answer.

A scheduler sends the same few request bodies again and again; what changes between two of them is
the store (bookings, evidence) and the clock, never the documents. So a decision has two halves:

* **Prepare** (once per distinct body): validate the body (FastAPI, against the OpenAPI contract),
  resolve its references and documents (``canary.serve.resolve``), derive the pair keys, their
  digests and the admission history's row. A body whose resolution can change is prepared anew every
  time: a bare registry name (its newest version), a device a node agent publishes, or a policy file
  changed since. Every other body is kept, by the SHA-256 of its exact bytes, in ``PreparedBodies``:
  the same bytes are the same JSON, validated and resolved to the same immutable documents (registry
  entries never change once put, the catalog is fixed for the process).
* **Decide** (every request): authorize; read the bookings and the evidence in one statement
  (``DecisionReads``: on PostgreSQL on the event loop through psycopg's asynchronous pool, so a cached
  admission costs no thread hand-off), after, on a device with MIG on only, the MIG instances booked
  on it (one more statement, in a worker thread: they can change the regime and so the pair keys); stage 1 (memoised by its exact inputs, ``Stage1Memo``); settle
  (``canary.admission.decisions.settle``); where a pair has no usable evidence and the policy names
  estimators, hybrid admission as ``canary admit`` does it (``consult_estimators_noted``, in a worker
  thread: it reads the store), whose calibrated, trusted prediction may decide; then answer, book and
  store (``record_admission``, in a worker thread when it writes), or queue a probe (one per pair
  key), which the runner runs through ``admit_async`` with the predictions as its priors. A decision
  from evidence never reaches the estimators.

``DecisionRoute`` serves a body seen before without FastAPI's dependency solving and body parsing
(which cost more CPU than the decision itself: docs/serve.md), and hands every other body to the
route's FastAPI endpoint, which validates it, prepares it and decides the same way. The contract —
the OpenAPI document, status codes, error bodies — is the endpoint's either way.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.types import Message, Receive, Scope, Send

from canary._model import utcnow
from canary.admission.decisions import Decision, PairEvidence, make_certificate, settle
from canary.admission.flow import consult_estimators_noted, record_admission
from canary.admission.store import BOOKED_SOURCE, EvidenceAccess, evidence_from_rows, request_keys
from canary.certificate import Certificate, HardFit
from canary.serve.bodies import Prepared, pinned
from canary.serve.deps import authorize
from canary.serve.problems import json_media
from canary.serve.resolve import Resolved
from canary.serve.schemas import DecisionRequest
from canary.serve.service import Service

if TYPE_CHECKING:
    from canary._model import PairKey
    from canary.admission.request import Request as Question
    from canary.estimate import Estimator
    from evidence_store.service.probe_queue import ProbeTicket

def prepare(svc: Service, body: DecisionRequest, *, probe: bool, reserve: bool, seed: int = 0) -> Prepared:
    """Resolve a validated body (blocking: registry reads) into what its decisions need."""
    from canary.serve.history import history_row
    from evidence_store.lookup import key_digest

    resolved = svc.resolve(body, reserve=reserve, seed=seed)
    keys = request_keys(resolved.request)

    kept = (pinned(body.device, device=True) and pinned(body.candidate)
            and all(pinned(r) for r in body.residents))
    return Prepared(resolved=resolved, keys=keys, digests=tuple(key_digest(k) for k in keys if k is not None),
                    probe=probe, reserve=reserve, kept=kept,
                    history=history_row(resolved, keys) if svc.config.log_admissions else None,
                    estimators=policy_estimators(resolved.request) if probe else ())


def policy_estimators(req: Question) -> tuple[Estimator, ...]:
    """The estimators ``req``'s policy consults, loaded (as ``canary admit`` loads them before it touches
    the store). One that nothing provides is the request's error (422 naming the policy and its field),
    not the server's."""
    from canary.errors import InputError
    from canary.estimate import load_estimators

    policy = req.policy
    if not policy.estimators:
        return ()
    try:
        return tuple(load_estimators(policy.estimators))
    except InputError as exc:
        raise InputError(f"policy {policy.name!r}, field 'estimators': {exc.problem}", field="policy") from None


async def _read(svc: Service, prepared: Prepared) -> tuple[Question, HardFit, list[PairEvidence], dt.datetime, int | None]:
    """The request as of the store, stage 1 and the pooled evidence of ``prepared``, from one read of the
    store begun after this call (``DecisionReads.read``), the read's time and the memory other admissions
    booked on the device (``settle``: a device with bookings and no resident is not empty).

    Under MIG the instances other admissions booked are read first (``EvidenceAccess.with_mig_bookings``,
    one more statement, only on a device with MIG on): stage 1 counts them as taken, and a regime that
    followed the device is chosen again with them, which changes the pair keys the evidence is read by."""
    req, keys, digests = prepared.request, prepared.keys, prepared.digests
    if req.snapshot.mig.enabled:
        req = await anyio.to_thread.run_sync(lambda: _with_mig_bookings(svc, prepared.request), limiter=svc.decisions)
        if req.regime != prepared.request.regime:
            from evidence_store.lookup import key_digest

            keys = request_keys(req)
            digests = tuple(key_digest(k) for k in keys if k is not None)
    with svc.metrics.store_op("decision_read"):
        read = await svc.reads.read(device_id=req.device_id, digests=digests, ttl_s=req.policy.evidence_ttl_s)
    evidence = evidence_from_rows(req, keys, read.rows, at=read.at, now=read.at)
    hard = svc.stage1(req, reserved_bytes_by_others=read.booked, reservations_source=BOOKED_SOURCE)
    return req, hard, evidence, read.at, read.booked


def _with_mig_bookings(svc: Service, req: Question) -> Question:
    """``req`` with the MIG instances booked on its device now (blocking: one statement)."""
    with svc.metrics.store_op("mig_bookings"):
        return EvidenceAccess.over(svc.engine).with_mig_bookings(req, utcnow())


def _certificate(svc: Service, endpoint: str, cert: Certificate, t0: float) -> Response:
    svc.metrics.decided(endpoint, cert, time.perf_counter() - t0)
    return Response(cert.model_dump_json(), media_type="application/json")  # compact: the CLI indents its JSON


async def fit(svc: Service, prepared: Prepared, t0: float) -> Response:
    """Stage 1 and the evidence, never a probe (``canary fit``): the certificate."""
    req, hard, evidence, at, booked = await _read(svc, prepared)
    cert = make_certificate(req, hard, settle(req, hard, evidence, booked_bytes=booked).decision, at)
    return _certificate(svc, "fit", cert, t0)


async def admission(svc: Service, prepared: Prepared, t0: float) -> Response:
    """Both stages (``canary admit``): the certificate, or 202 and the probe that will settle it."""
    looked_at = utcnow()  # before the evidence is read: a probe of this pair done since then is joined
    req, hard, evidence, _, booked = await _read(svc, prepared)
    settled = settle(req, hard, evidence, booked_bytes=booked)
    decision = settled.decision
    if prepared.probe and settled.probe_keys:
        # Hybrid admission, as canary admit does it (consult_estimators): only for pairs without usable
        # evidence, so a cached decision never reaches the estimators; they read the store: a worker thread.
        # A policy that trusts none of them to decide gets no decision from them here (predicted_decision):
        # its predictions only shape the probe, and the runner makes them when the probe starts.
        predicted, notes = (None, ()) if not (prepared.estimators and req.policy.decide_on_prediction) else (
            await anyio.to_thread.run_sync(lambda: _predicted(svc, prepared, req, evidence), limiter=svc.decisions))
        if predicted is None:  # the probe runs with the predictions as its priors (the runner's admit_async)
            ticket, joined = await anyio.to_thread.run_sync(
                lambda: queue_probe(svc, prepared.resolved, list(settled.probe_keys), looked_at),
                limiter=svc.decisions)
            svc.history.add(_history(prepared, "probe"))
            return probe_accepted(svc, ticket, joined)
        decision = predicted
        if notes:  # what a consulted estimator could not predict is on the certificate, as canary admit puts it
            hard = hard.model_copy(update={"caveats": (*hard.caveats, *notes)})
    if prepared.reserve:  # books the memory of an admit and stores the certificate: a write transaction
        cert = await anyio.to_thread.run_sync(lambda: _record(svc, req, hard, decision), limiter=svc.decisions)
    else:
        cert = record_admission(req, hard, decision, [], engine=svc.engine, reserve=False, finished=utcnow())
    svc.history.add(_history(prepared, cert.verdict))  # written after the answer, batched with its neighbours
    return _certificate(svc, "admissions", cert, t0)


def _predicted(svc: Service, prepared: Prepared, req: Question,
               evidence: list[PairEvidence]) -> tuple[Decision | None, tuple[str, ...]]:
    """The decision the policy's calibrated, trusted predictions make without a probe, or ``None``, and
    the notes of the estimators that could not predict a resident (blocking: the estimators and their
    calibration read the store)."""
    with svc.metrics.store_op("estimate"):
        _, decision, notes = consult_estimators_noted(req, svc.engine, evidence, seed=prepared.resolved.queued.seed,
                                                      estimators=prepared.estimators)
    return decision, notes


def _record(svc: Service, req: Question, hard: HardFit, decision: Decision) -> Certificate:
    with svc.metrics.store_op("admit"):
        return record_admission(req, hard, decision, [], engine=svc.engine, reserve=True,
                                finished=utcnow())


def _history(prepared: Prepared, verdict: str) -> dict[str, Any] | None:
    return None if prepared.history is None else {**prepared.history, "verdict": verdict, "now": utcnow()}


def queue_probe(svc: Service, resolved: Resolved, keys: list[PairKey],
                looked_at: dt.datetime) -> tuple[ProbeTicket, bool]:
    """Queue the probe of ``keys`` in the store, or join the one that runs (or ran since ``looked_at``)
    for the same pairs: one probe per pair key across every server process."""
    # submit_and_notify: also announces it to a node agent (PostgreSQL)
    from evidence_store.service.probe_queue import pair_digest, submit_and_notify

    digest = pair_digest(keys)
    submitted: tuple[ProbeTicket, bool] = svc.db("probe_submit", lambda s: submit_and_notify(
        s, digest=digest, device_id=resolved.request.device_id, request_json=resolved.request_json, now=utcnow(),
        since=looked_at))
    return submitted


def probe_accepted(svc: Service, ticket: ProbeTicket, joined: bool) -> Response:
    """202 with the probe's state and ``Location``."""
    from canary.serve.probes import probe_status

    svc.metrics.series(svc.metrics.cache, "miss").inc()
    if joined:
        svc.metrics.coalesced.inc()
    else:
        svc.metrics.probes_started.inc()
        svc.runner.wake()
    return Response(probe_status(ticket).model_dump_json(), status_code=202, media_type="application/json",
                    headers={"Location": f"/v1/probes/{ticket.id}"})


#: A fast handler: the response for a request whose body was prepared before, else ``None``.
Fast = Callable[[Request], Awaitable[Response | None]]


def kept_body(route: str, scope: str, decide: Callable[[Service, Prepared, float], Awaitable[Response]]) -> Fast:
    """The fast handler of a decision route: authorize (before anything else is looked at), find the
    body's bytes in the route's ``PreparedBodies``, decide."""

    async def handler(request: Request) -> Response | None:
        t0 = time.perf_counter()
        svc: Service = request.app.state.service
        await authorize(svc, request.headers, scope)
        if not json_media(request.headers.get("content-type")):
            return None  # the endpoint refuses it as FastAPI does: its body is not JSON
        prepared = svc.prepared[route].get(await request.body())
        if prepared is None:
            return None
        svc.metrics.series(svc.metrics.bodies, route, "kept").inc()
        return await decide(svc, prepared, t0)

    return handler


async def keep(svc: Service, route: str, request: Request, prepared: Prepared) -> None:
    """After the endpoint prepared a body: keep it for its bytes' next arrival, when it may be kept."""
    kept = svc.prepared[route].put(await request.body(), prepared)
    svc.metrics.series(svc.metrics.bodies, route, "prepared" if kept else "not_kept").inc()


def decision_route(fast: Fast) -> type[APIRoute]:
    """A FastAPI route class that answers with ``fast`` when it can, and with the route's own endpoint
    (dependencies, body validation, the endpoint function) otherwise. The OpenAPI document is the
    endpoint's: ``fast`` answers only bodies the endpoint validated before, with the same decision.

    ``fast`` runs in front of FastAPI's request handling (outside its per-request exit stacks, which the
    fast path does not use); what it raises reaches the application's exception handlers as an
    endpoint's exceptions do. When it cannot answer, the endpoint gets the body already read."""

    class DecisionRoute(APIRoute):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            standard = self.app

            async def app(scope: Scope, receive: Receive, send: Send) -> None:
                request = Request(scope, receive, send)
                answer = await fast(request)
                if answer is not None:
                    await answer(scope, receive, send)
                    return
                await standard(scope, _replay(await request.body(), receive), send)

            self.app = app

    return DecisionRoute


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an application after the body was read: the body once, then what follows."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
