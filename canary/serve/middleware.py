"""The service's two ASGI middlewares (plain ASGI: no body buffering, nothing per request but a few
attribute reads): ``BodyLimit`` refuses bodies over the limit with 413 before they are read whole, and
``CountResponses`` counts responses by route template and status (``canary_http_responses``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from canary.serve.service import Service


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
    """Counts responses by route template and status. ``holder["svc"]``: the ``Service``, once the
    application's lifespan has built it (until then nothing is counted: there is no registry yet)."""

    def __init__(self, app: ASGIApp, *, holder: dict[str, Service], routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.holder = holder
        self.routes = routes  # the application's, to name the route of a request answered before routing

    def _route_of(self, scope: Scope) -> str:
        """The template of the route a request was routed to, or would have been: a body refused with 413
        by ``BodyLimit`` before routing counts under its route, not ``unmatched``."""
        route = scope.get("route")
        if route is not None:
            return str(getattr(route, "path", "unmatched"))
        for candidate in self.routes:
            match, _ = candidate.matches(scope)
            if match != Match.NONE:
                return str(getattr(candidate, "path", "unmatched"))
        return "unmatched"

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
                svc.metrics.series(svc.metrics.http, self._route_of(scope), str(status[0])).inc()
