"""Bearer tokens with scopes: ``read``, ``fit``, ``admit``, ``feedback``, ``admin`` (admin implies all).

The store keeps only scrypt hashes (``evidence_store.tokens``). A verified token is cached in this
process, keyed by the SHA-256 of the token, for ``token_cache_s``: the slow hash is paid once per
token and worker, and a revoked token stops working everywhere within that time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from evidence_store.tokens import TokenInfo

SCOPE_IMPLIES = {"admin": {"read", "fit", "admit", "feedback", "admin"}, "admit": {"admit", "fit", "read"},
                 "fit": {"fit", "read"}, "feedback": {"feedback", "read"}, "read": {"read"}}


def granted(scopes: frozenset[str]) -> set[str]:
    out: set[str] = set()
    for s in scopes:
        out |= SCOPE_IMPLIES.get(s, set())
    return out


@dataclass
class _Cached:
    info: TokenInfo | None
    at: float


class TokenCache:
    def __init__(self, verify: Callable[[str, dt.datetime], TokenInfo | None], ttl_s: float) -> None:
        self._verify = verify
        self._ttl_s = ttl_s
        self._cache: dict[str, _Cached] = {}

    def cached(self, token: str, now: dt.datetime) -> tuple[bool, TokenInfo | None]:
        """(True, record-or-None) when the cache can answer without the store; (False, None) otherwise."""
        hit = self._cache.get(hashlib.sha256(token.encode("utf-8")).hexdigest())
        if hit is None or time.monotonic() - hit.at >= self._ttl_s:
            return False, None
        if hit.info is not None and not hit.info.active_at(now):
            return True, None
        return True, hit.info

    def check(self, token: str, now: dt.datetime) -> TokenInfo | None:
        """The token's record when valid and active, else ``None`` (cached either way for ``ttl_s``)."""
        key = hashlib.sha256(token.encode("utf-8")).hexdigest()
        hit = self._cache.get(key)
        mono = time.monotonic()
        if hit is not None and mono - hit.at < self._ttl_s:
            if hit.info is not None and not hit.info.active_at(now):
                return None
            return hit.info
        info = self._verify(token, now)
        if len(self._cache) > 10_000:  # bound memory under a flood of bad tokens
            self._cache.clear()
        self._cache[key] = _Cached(info, mono)
        return info


class HttpProblem(Exception):
    """An answer other than 2xx with ``{"detail": …}`` (the app's exception handler writes it)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.headers = headers or {}


async def authorize(svc: Any, headers: Any, scope: str, *, extender: bool = False) -> None:
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
