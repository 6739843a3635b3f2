"""What the routes depend on: the application's ``Service`` (``Svc``), and authorization (``require``:
the request's bearer token grants the route's scope), plus the error responses routes declare."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from canary.serve import schemas as S
from canary.serve.auth import HttpProblem, granted
from canary.serve.service import Service

PROBLEM = {"model": S.ProblemDetail}
ERRORS: dict[int | str, dict[str, Any]] = {
    401: PROBLEM, 403: PROBLEM, 413: PROBLEM, 422: PROBLEM, 503: PROBLEM}


async def _service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


Svc = Annotated[Service, Depends(_service)]
# Declares the scheme in the OpenAPI document; the check itself is ``require``'s.
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False, scheme_name="bearer"))]


async def authorize(svc: Service, headers: Mapping[str, str], scope: str, *, extender: bool = False) -> None:
    """The request's ``Authorization: Bearer`` token grants ``scope`` (unless auth is off for these
    routes), else ``HttpProblem`` 401 (no token, or an unknown, revoked or expired one) or 403 (a
    token without the scope). The slow hash and the store read run off the event loop, once per token
    and ``token_cache_s``."""
    mode = svc.config.extender_auth if extender else svc.config.auth
    if mode == "none":
        return
    header = headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        svc.metrics.auth_failures.labels("missing").inc()
        raise HttpProblem(401, "a bearer token is required (Authorization: Bearer cnr_…); see canary tokens create",
                          {"WWW-Authenticate": "Bearer"})
    now = dt.datetime.now(dt.UTC)
    known, info = svc.tokens.cached(token, now)
    if not known:
        info = await anyio.to_thread.run_sync(svc.tokens.check, token, now)
    if info is None:
        svc.metrics.auth_failures.labels("invalid").inc()
        raise HttpProblem(401, "the token is unknown, revoked or expired", {"WWW-Authenticate": "Bearer"})
    if scope not in granted(info.scopes):
        svc.metrics.auth_failures.labels("scope").inc()
        raise HttpProblem(403, f"token {info.id} lacks scope '{scope}' (it has: {', '.join(sorted(info.scopes))})")


def require(scope: str, *, extender: bool = False) -> Callable[..., Awaitable[None]]:
    """A dependency: the request carries a bearer token granting ``scope`` (unless auth is off;
    ``authorize``). ``credentials`` declares the scheme in the OpenAPI document."""

    async def check(request: Request, credentials: Bearer) -> None:
        await authorize(request.app.state.service, request.headers, scope, extender=extender)

    return check
