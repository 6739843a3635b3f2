"""The ASGI application: FastAPI (its OpenAPI document comes from the same pydantic models that
validate requests, and schemathesis fuzzes that document) on uvicorn (anyio-based).

Blocking work — store transactions, stage 1 — runs in worker threads (``anyio.to_thread``); the
event loop only routes, waits and runs probes' async orchestration.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from canary.admission.flow import Stage1Memo
from canary.certificate import Certificate
from canary.errors import CanaryError, InputError, SchemaOutOfDate, StoreUnavailable
from canary.serve import decide
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem, TokenCache, authorize
from canary.serve.config import ServeConfig
from canary.serve.fleet import AdmissionHistory
from canary.serve.metrics import Metrics
from canary.serve.probes import ProbeRunner, probe_status, utcnow
from canary.serve.reads import DecisionReads
from canary.serve.resolve import Resolved, resolve
from evidence_store import probe_queue, registry
from evidence_store.engine import session_scope

API_VERSION = "v1"
PROBLEM = {"model": S.ProblemDetail}
ERRORS: dict[int | str, dict[str, Any]] = {
    401: PROBLEM, 403: PROBLEM, 413: PROBLEM, 422: PROBLEM, 503: PROBLEM}


#: The core names some inputs as the CLI does; over HTTP they are these body fields.
_CLI_FIELDS = {"--regime": "regime", "--policy": "policy", "--resident-name": "resident_name", "DEVICE": "device",
               "PROFILE": "candidate"}
#: Where a document in the body is validated (``file=`` of its InputError): the fields inside are below it.
_BODY_DOCUMENTS = re.compile(r"(candidate|device|document|residents\[\d+\])")
_QUERY_FIELDS = frozenset({"wait"})


def request_field(loc: tuple[Any, ...]) -> str:
    """A validation location as a path in the request: ``body.residents[0].memory``, ``query.wait``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def input_error_detail(exc: InputError) -> str:
    """The 422 detail of an ``InputError``: the field as a path in the request (``body.regime``,
    ``body.candidate.memory``), never a CLI option; a document from the registry keeps its own name."""
    field = _CLI_FIELDS.get(exc.field, exc.field) if exc.field else None
    if exc.file is not None and _BODY_DOCUMENTS.fullmatch(exc.file):
        base = f"body.{exc.file}"
        # validation_to_input_error lists further fields of the same document as "also field 'F'"
        problem = exc.problem.replace("\n  also field '", f"\n  also field '{base}.")
        return f"field '{base}.{field}': {problem}" if field else f"field '{base}': {problem}"
    if exc.file is not None or field is None:
        return str(exc)
    return f"field '{'query' if field in _QUERY_FIELDS else 'body'}.{field}': {exc.problem}"


class BodyLimit:
    """Refuse bodies over the limit (413) before they are read whole: by Content-Length when given,
    else by counting the chunks as they arrive."""

    def __init__(self, app: ASGIApp, *, default_bytes: int, extender_bytes: int) -> None:
        self.app = app
        self.default_bytes = default_bytes
        self.extender_bytes = extender_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.extender_bytes if scope["path"].startswith("/v1/extender/") else self.default_bytes
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > limit
                except ValueError:
                    too_big = True
                if too_big:
                    await _problem(send, 413, f"request body over {limit} bytes")
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge as exc:
            await _problem(send, 413, f"request body over {exc.limit} bytes")


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit


async def _problem(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class CountResponses:
    """Counts responses by route template and status (a plain ASGI middleware: no body buffering)."""

    def __init__(self, app: ASGIApp, *, holder: dict[str, Any]) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            svc = self.holder.get("svc")
            if svc is not None:
                path = getattr(scope.get("route"), "path", "unmatched")
                svc.metrics.series(svc.metrics.http, path, str(status[0])).inc()


class Service:
    """What the routes share: the store, the probe runner, metrics, the token cache."""

    def __init__(self, config: ServeConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.metrics = Metrics()
        self.runner = ProbeRunner(engine, config, self.metrics)
        self.tokens = TokenCache(self._verify_token, config.token_cache_s)
        self.metrics.watch_store(self._store_state)
        self.history = AdmissionHistory(self.db, window_s=config.history_window_s)
        self.decisions = anyio.CapacityLimiter(config.decision_threads)  # built in the lifespan: a loop runs
        self.stage1 = Stage1Memo()  # stage 1 by its exact inputs: the same documents arrive again and again
        self.reads = DecisionReads(engine, connections=config.read_connections, limiter=self.decisions,
                                   in_flight=config.reads_in_flight)
        # Request bodies validated and resolved before, by route (canary.serve.decide)
        self.prepared = {"fit": decide.PreparedBodies(), "admissions": decide.PreparedBodies()}
        # Registry entries are immutable once put (a different document under the same name@version is
        # refused), so an exact reference is read from the store once per process.
        self._registry_cache: dict[tuple[str, str, str], dict[str, Any]] = {}

    def _verify_token(self, token: str, now: dt.datetime) -> Any:
        from evidence_store import tokens

        with self.metrics.store_op("token_verify"), session_scope(self.engine, read_only=True) as session:
            return tokens.verify(session, token, now=now)

    def _store_state(self) -> tuple[dict[str, int], dict[str, int]]:
        from sqlalchemy import func, select

        from evidence_store.models import Reservation

        now = utcnow()
        with session_scope(self.engine, read_only=True) as session:
            states = probe_queue.count_by_state(session)
            rows = session.execute(
                select(Reservation.device_id, func.sum(Reservation.memory_bytes))
                .where(Reservation.released_at.is_(None), Reservation.expires_at > now)
                .group_by(Reservation.device_id)).all()
        return states, {str(d): int(n or 0) for d, n in rows}

    @property
    def url(self) -> str:
        """The store URL with its password (``str(engine.url)`` masks it, which cannot connect)."""
        return str(self.engine.url.render_as_string(hide_password=False))

    def runner_wake(self) -> None:
        """Wake the probe runner from a worker thread (anyio events belong to the event loop)."""
        import anyio.from_thread

        anyio.from_thread.run_sync(self.runner.wake)

    def db(self, operation: str, fn: Callable[[Any], Any], *, read_only: bool = False) -> Any:
        with self.metrics.store_op(operation), session_scope(self.engine, read_only=read_only) as session:
            return fn(session)

    def registry_get(self, kind: str, name: str, version: str | None) -> dict[str, Any] | None:
        """A registry document; ``name@version`` from this process's cache after its first read (a bare
        name means the newest version, which a later put changes: always read)."""
        if version is not None:
            hit = self._registry_cache.get((kind, name, version))
            if hit is not None:
                return hit
        entry = self.db("registry_get", lambda s: registry.get(s, kind=kind, name=name, version=version),
                        read_only=True)
        if entry is None:
            return None
        document: dict[str, Any] = entry.document
        if version is not None:
            if len(self._registry_cache) >= 4096:  # bound memory: start over rather than grow
                self._registry_cache.clear()
            self._registry_cache[(kind, name, version)] = document
        return document

    def published_get(self, ref: str) -> Any:
        """A device a node agent publishes (``agent:NODE/NAME``), or ``None``."""
        from evidence_store import fleet

        return self.db("published_get", lambda s: fleet.get_by_ref(s, ref), read_only=True)

    def resolve(self, body: S.DecisionRequest, extra: dict[str, Any] | None = None) -> Resolved:
        return resolve(body, self.registry_get, default_policy=self.config.default_policy, extra=extra,
                       published=self.published_get)

    def access(self) -> Any:
        from canary.admission import EvidenceAccess

        return EvidenceAccess.over(self.engine)


async def _service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


Svc = Annotated[Service, Depends(_service)]
# Declares the scheme in the OpenAPI document; the check itself is ``require``'s.
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False, scheme_name="bearer"))]


def require(scope: str, *, extender: bool = False) -> Callable[..., Awaitable[None]]:
    """A dependency: the request carries a bearer token granting ``scope`` (unless auth is off;
    ``canary.serve.auth.authorize``). ``credentials`` declares the scheme in the OpenAPI document."""

    async def check(request: Request, credentials: Bearer) -> None:
        await authorize(request.app.state.service, request.headers, scope, extender=extender)

    return check


_WAIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$")


def parse_wait(text: str | None, max_s: float) -> float:
    if text is None or text == "":
        return 0.0
    m = _WAIT.match(text)
    if m is None:
        raise InputError(f"not a duration {text!r}: use e.g. 30s, 500ms or 30", field="wait")
    value = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    return min(value, max_s)


def create_app(config: ServeConfig, *, engine: Engine | None = None) -> FastAPI:
    """The service. Without ``engine`` it opens ``config.db_url`` (at the current schema) when it starts."""
    holder: dict[str, Service] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from canary.admission import open_store_for_writing

        eng = engine if engine is not None else await anyio.to_thread.run_sync(
            lambda: open_store_for_writing(config.db_url))
        svc = Service(config, eng)
        holder["svc"] = svc
        app.state.service = svc
        await svc.runner.recover()  # a restarted server aborts what its dead predecessor left running
        await svc.reads.open()
        # Everything alive now (modules, models, the catalog, the store's metadata: ~170,000 objects)
        # lives as long as the process: moved out of the collector's sight, a full collection scans only
        # what requests create. Without it, at ~2,000 admissions a second a full collection ran every
        # ~1.3 s and held every request for 90–100 ms (docs/serve.md).
        gc.collect()  # what is garbage already goes first: a frozen object is never collected
        gc.freeze()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(svc.runner.serve)
                tg.start_soon(svc.history.serve)
                yield
                tg.cancel_scope.cancel()
            await svc.history.flush()  # admissions answered but not yet in the history
        finally:
            await svc.reads.close()
        if engine is None:
            eng.dispose()

    app = FastAPI(
        title="canary", version="1", lifespan=lifespan,
        summary="May this GPU workload share this GPU now? Decisions with certificates, over HTTP.",
        description="The admission service: stage 1 (hard fit), the pairwise evidence cache, and bounded canary "
        "probes (one per pair key, never two on one device). Authenticate with `Authorization: Bearer <token>` "
        "(`canary tokens create`). Errors are `{\"detail\": \"…\"}`.",
    )
    app.add_middleware(BodyLimit, default_bytes=config.max_body_bytes, extender_bytes=config.extender_max_body_bytes)

    @app.exception_handler(HttpProblem)
    async def _http_error(request: Request, exc: HttpProblem) -> Response:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError) -> Response:
        return JSONResponse({"detail": input_error_detail(exc)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid request"}
        where, msg = request_field(tuple(first.get("loc", ()))), str(first.get("msg"))
        if first.get("type") == "json_invalid":  # loc holds a character position, not a field
            ctx = first.get("ctx")
            where, msg = "body", f"not valid JSON: {ctx.get('error', msg) if isinstance(ctx, dict) else msg}"
        return JSONResponse({"detail": f"field '{where}': {msg}"}, status_code=422)

    @app.exception_handler(CanaryError)
    async def _canary_error(request: Request, exc: CanaryError) -> Response:
        status = 503 if isinstance(exc, StoreUnavailable | SchemaOutOfDate) else 500
        return JSONResponse({"detail": str(exc)}, status_code=status)

    app.add_middleware(CountResponses, holder=holder)

    # ------------------------------------------------------------------ decisions
    # First: the router tries routes in order, and these are the ones asked most.

    async def fit(body: S.DecisionRequest, svc: Svc, request: Request) -> Response:
        """Stage 1 and an evidence lookup, never a probe (``canary fit``)."""
        t0 = time.perf_counter()
        prepared = await anyio.to_thread.run_sync(
            lambda: decide.prepare(svc, body, probe=False, reserve=False), limiter=svc.decisions)
        await decide.keep(svc, "fit", request, prepared)
        return await decide.fit(svc, prepared, t0)

    app.router.add_api_route(
        "/v1/fit", fit, methods=["POST"], tags=["decisions"], dependencies=[Depends(require("fit"))],
        responses={200: {"model": Certificate}, **ERRORS}, response_class=Response,
        route_class_override=decide.decision_route(decide.kept_body("fit", "fit", decide.fit)))

    async def admissions(body: S.AdmissionRequest, svc: Svc, request: Request) -> Response:
        """Both stages. 200 with the certificate when stage 1 or the evidence decides; otherwise 202 with
        ``Location: /v1/probes/{id}`` — requests for the same pair share one probe."""
        t0 = time.perf_counter()
        prepared = await anyio.to_thread.run_sync(lambda: decide.prepare(
            svc, body, probe=body.probe, reserve=body.reserve, extra={"reserve": body.reserve, "seed": body.seed}),
            limiter=svc.decisions)
        await decide.keep(svc, "admissions", request, prepared)
        return await decide.admission(svc, prepared, t0)

    app.router.add_api_route(
        "/v1/admissions", admissions, methods=["POST"], tags=["decisions"], dependencies=[Depends(require("admit"))],
        responses={200: {"model": Certificate, "description": "decided without a probe"},
                   202: {"model": S.ProbeStatus, "description": "a probe runs (or was already running for "
                         "this pair): follow Location"}, **ERRORS},
        response_class=Response,
        route_class_override=decide.decision_route(decide.kept_body("admissions", "admit", decide.admission)))

    # ------------------------------------------------------------------ health, metrics, ceiling

    @app.get("/healthz", response_model=S.Health, tags=["operations"])
    async def healthz() -> S.Health:
        """The process answers (liveness)."""
        return S.Health(status="ok")

    @app.get("/readyz", response_model=S.Health, responses={503: {"model": S.Health}}, tags=["operations"])
    async def readyz(svc: Svc) -> Response:
        """The store answers and its schema is at this canary's newest migration."""
        from evidence_store.engine import check_schema

        try:
            await anyio.to_thread.run_sync(check_schema, svc.engine)
        except CanaryError as exc:
            return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready", "detail": ""})

    @app.get("/metrics", tags=["operations"], dependencies=[Depends(require("read"))],
             response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    async def metrics(svc: Svc) -> Response:
        """Prometheus exposition format."""
        from prometheus_client import CONTENT_TYPE_LATEST

        body = await anyio.to_thread.run_sync(svc.metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/noop", tags=["operations"], dependencies=[Depends(require("read"))], responses=ERRORS)
    async def noop() -> dict[str, bool]:
        """Does nothing behind authentication: the benchmark's ceiling for this server."""
        return {"ok": True}

    # ------------------------------------------------------------------ probes

    @app.get("/v1/probes/{probe_id}", tags=["decisions"], response_model=S.ProbeStatus,
             dependencies=[Depends(require("read"))], responses={404: PROBLEM, **ERRORS})
    async def get_probe(probe_id: str, svc: Svc,
                        wait: Annotated[str | None, Query(max_length=16, description="long-poll up to this long "
                                                          "for a final state: 30s, 500ms, 30")] = None) -> S.ProbeStatus:
        """The probe's state and transition times; its certificate once ``done``."""
        wait_s = parse_wait(wait, svc.config.max_wait_s)
        ticket = await svc.runner.wait(probe_id, wait_s)
        if ticket is None:
            raise HttpProblem(404, f"no probe {probe_id!r}")
        return probe_status(ticket)

    @app.delete("/v1/probes/{probe_id}", tags=["decisions"], response_model=S.ProbeStatus,
                dependencies=[Depends(require("admit"))], responses={404: PROBLEM, **ERRORS})
    async def cancel_probe(probe_id: str, svc: Svc) -> S.ProbeStatus:
        """Cancel: a queued probe ends at once; a running one is rolled back by its owner within a third
        of its lease, and no evidence is recorded. Every request sharing it sees ``cancelled``."""
        ticket = await anyio.to_thread.run_sync(
            lambda: svc.db("probe_cancel", lambda s: probe_queue.cancel(s, probe_id, now=utcnow())))
        if ticket is None:
            raise HttpProblem(404, f"no probe {probe_id!r}")
        return probe_status(ticket)

    # ------------------------------------------------------------------ evidence, feedback, reservations

    @app.get("/v1/evidence", tags=["evidence"], dependencies=[Depends(require("read"))], responses=ERRORS)
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

    @app.get("/v1/evidence/{evidence_id}", tags=["evidence"], dependencies=[Depends(require("read"))],
             responses={404: PROBLEM, **ERRORS})
    async def show_evidence(evidence_id: str, svc: Svc) -> dict[str, Any]:
        """One record and the history of its pair key (newest first)."""
        from evidence_store.evidence import get_evidence, history

        def work(s: Any) -> Any:
            rec = get_evidence(s, evidence_id)
            return None if rec is None else (rec, history(s, evidence_id))

        found = await anyio.to_thread.run_sync(lambda: svc.db("evidence_show", work, read_only=True))
        if found is None:
            raise HttpProblem(404, f"no evidence {evidence_id!r}")
        rec, hist = found
        return {"evidence": rec.model_dump(mode="json"), "history": [h.model_dump(mode="json") for h in hist]}

    @app.post("/v1/evidence/{evidence_id}/revoke", tags=["evidence"], dependencies=[Depends(require("admin"))],
              responses={404: PROBLEM, **ERRORS})
    async def revoke_evidence(evidence_id: str, body: S.RevokeRequest, svc: Svc) -> dict[str, Any]:
        """Revoke one record with a reason (append-only: it stays, marked revoked)."""
        from evidence_store.evidence import get_evidence, revoke

        def work(s: Any) -> Any:
            if get_evidence(s, evidence_id) is None:
                return None
            revoke(s, evidence_id, body.reason)
            return get_evidence(s, evidence_id)

        rec = await anyio.to_thread.run_sync(lambda: svc.db("evidence_revoke", work))
        if rec is None:
            raise HttpProblem(404, f"no evidence {evidence_id!r}")
        return dict(rec.model_dump(mode="json"))

    @app.post("/v1/feedback", tags=["evidence"], dependencies=[Depends(require("feedback"))],
              response_model=S.FeedbackResponse, responses=ERRORS)
    async def feedback(body: S.FeedbackRequest, svc: Svc) -> S.FeedbackResponse:
        """A production SLO violation for an admitted pair: recorded as evidence that outweighs passes."""
        from canary.admission import record_feedback

        def work() -> str:
            req = svc.resolve(body).request
            with svc.metrics.store_op("feedback"):
                return record_feedback(req, resident_name=body.resident_name, db_url=svc.url, engine=svc.engine,
                                       observed_slowdown_pct=body.slowdown_pct, now=utcnow())

        return S.FeedbackResponse(evidence_id=await anyio.to_thread.run_sync(work))

    @app.get("/v1/reservations", tags=["reservations"], dependencies=[Depends(require("read"))], responses=ERRORS)
    async def list_reservations(
        svc: Svc, device: Annotated[str | None, Query(max_length=200)] = None,
        all: Annotated[bool, Query(description="include released and expired bookings")] = False,
    ) -> list[dict[str, Any]]:
        """Bookings, by device then age."""
        from evidence_store.reservations import list_reservations as repo_list

        now = utcnow()
        rows = await anyio.to_thread.run_sync(lambda: svc.db("reservations_list", lambda s: repo_list(
            s, now=now, device_id=device, include_inactive=all), read_only=True))
        return [r.model_dump(mode="json") | {"active": r.active_at(now)} for r in rows]

    @app.delete("/v1/reservations/{reservation_id}", tags=["reservations"],
                dependencies=[Depends(require("admit"))], responses={404: PROBLEM, **ERRORS})
    async def release_reservation(reservation_id: str, svc: Svc) -> dict[str, str]:
        """Free a booking (releasing a released one changes nothing)."""
        from evidence_store.models import Reservation
        from evidence_store.reservations import release

        def work(s: Any) -> bool:
            if s.get(Reservation, reservation_id) is None:
                return False
            release(s, reservation_id, now=utcnow())
            return True

        if not await anyio.to_thread.run_sync(lambda: svc.db("reservation_release", work)):
            raise HttpProblem(404, f"no reservation {reservation_id!r}")
        return {"released": reservation_id}

    # ------------------------------------------------------------------ registry

    def _registry_routes(kind: str, plural: str) -> None:
        @app.post(f"/v1/{plural}", tags=["registry"], dependencies=[Depends(require("admin"))],
                  response_model=S.RegistryEntryOut, responses={409: PROBLEM, **ERRORS},
                  name=f"put_{kind}", summary=f"Store a {kind} under name@version")
        async def put(body: S.RegistryPut, svc: Svc) -> S.RegistryEntryOut:
            from canary.serve.resolve import _check_trust

            def work() -> Any:
                from canary._model import validate_document
                from canary.profile import WorkloadProfile
                from canary.snapshot import DeviceSnapshot

                if kind == "profile":
                    doc = _check_trust(validate_document(WorkloadProfile, body.document, file="document"), "document")
                    name, version = doc.name, doc.version
                else:
                    snap = validate_document(DeviceSnapshot, body.document, file="document")
                    if body.name is None or body.version is None:
                        raise InputError("a snapshot needs a name and a version", field="name")
                    for i, r in enumerate(snap.residents):
                        if r.profile is not None:
                            _check_trust(r.profile, f"document.residents[{i}].profile")
                    name, version = body.name, body.version
                    document = snap.model_dump(mode="json")
                if kind == "profile":
                    document = doc.model_dump(mode="json")
                return svc.db("registry_put", lambda s: registry.put(
                    s, kind=kind, name=name, version=version, document=document, now=utcnow()))

            try:
                entry, created = await anyio.to_thread.run_sync(work)
            except registry.RegistryConflict as exc:
                raise HttpProblem(409, str(exc)) from None
            return S.RegistryEntryOut(kind=entry.kind, name=entry.name, version=entry.version, digest=entry.digest,
                                      created_at=entry.created_at, created=created)

        @app.get(f"/v1/{plural}", tags=["registry"], dependencies=[Depends(require("read"))],
                 response_model=list[S.RegistryEntryOut], responses=ERRORS, name=f"list_{kind}s")
        async def list_all(svc: Svc) -> list[S.RegistryEntryOut]:
            entries = await anyio.to_thread.run_sync(
                lambda: svc.db("registry_list", lambda s: registry.list_entries(s, kind=kind), read_only=True))
            return [S.RegistryEntryOut(kind=e.kind, name=e.name, version=e.version, digest=e.digest,
                                       created_at=e.created_at) for e in entries]

        @app.get(f"/v1/{plural}/{{name}}/{{version}}", tags=["registry"], dependencies=[Depends(require("read"))],
                 response_model=S.RegistryEntryOut, responses={404: PROBLEM, **ERRORS}, name=f"get_{kind}")
        async def get_one(name: str, version: str, svc: Svc) -> S.RegistryEntryOut:
            e = await anyio.to_thread.run_sync(lambda: svc.db("registry_get", lambda s: registry.get(
                s, kind=kind, name=name, version=version), read_only=True))
            if e is None:
                raise HttpProblem(404, f"no {kind} {name}@{version}")
            return S.RegistryEntryOut(kind=e.kind, name=e.name, version=e.version, digest=e.digest,
                                      created_at=e.created_at, document=e.document)

    _registry_routes("profile", "profiles")
    _registry_routes("snapshot", "snapshots")

    # ------------------------------------------------------------------ Kubernetes scheduler extender

    from canary.serve.extender import add_extender_routes

    add_extender_routes(app, require)

    from canary.serve.fleet import add_fleet_routes

    add_fleet_routes(app, require)
    return app


def openapi_document(config: ServeConfig | None = None) -> str:
    """The OpenAPI document as checked into ``docs/openapi.json`` (stable key order)."""
    app = create_app(config or ServeConfig())
    return json.dumps(app.openapi(), indent=2, sort_keys=True)
