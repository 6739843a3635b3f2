"""The ASGI application: FastAPI (its OpenAPI document comes from the same pydantic models that
validate requests, and schemathesis fuzzes that document) on uvicorn (anyio-based).

``create_app`` assembles it: the ``Service`` the routes share (``canary.serve.service``), built in the
lifespan; the routers, one per area (``canary.serve.routes``); the error handlers
(``canary.serve.problems``) and the middleware (``canary.serve.middleware``). Blocking work — store
transactions, stage 1 — runs in worker threads (``anyio.to_thread``); the event loop only routes,
waits and runs probes' async orchestration.
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
from fastapi import FastAPI
from fastapi.routing import APIRoute
from sqlalchemy import Engine

from canary.serve.config import ServeConfig
from canary.serve.deps import PROBLEM
from canary.serve.middleware import BodyLimit, CountResponses
from canary.serve.problems import add_problem_handlers
from canary.serve.routes import ROUTERS
from canary.serve.service import Service

API_VERSION = "v1"


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
        restore_signals = svc.watch_stop_signals()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(svc.runner.serve)
                tg.start_soon(svc.history.serve)
                yield
                tg.cancel_scope.cancel()
            await svc.history.flush()  # admissions answered but not yet in the history
        finally:
            restore_signals()
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
    add_problem_handlers(app)
    app.add_middleware(CountResponses, holder=holder, routes=app.router.routes)
    # Each router's routes join the application's own list, as if declared on it, in order (decisions
    # first: the router tries routes in order, and they are asked most). Not ``include_router``: this
    # FastAPI mounts an included router as a lazily built branch that matches every request through
    # its own layer and runs each route from its endpoint, past ``decide.DecisionRoute``'s fast path.
    for router in ROUTERS:
        app.router.routes.extend(router.routes)
    for route in app.router.routes:  # a body that is not JSON is 415 (canary.serve.problems)
        if isinstance(route, APIRoute) and route.body_field is not None:
            route.responses.setdefault(415, PROBLEM)
    return app


def openapi_document(config: ServeConfig | None = None) -> str:
    """The OpenAPI document as checked into ``docs/openapi.json`` (stable key order)."""
    app = create_app(config or ServeConfig())
    return json.dumps(app.openapi(), indent=2, sort_keys=True)
