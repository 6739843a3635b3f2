"""Bearer tokens with scopes: ``read``, ``fit``, ``admit``, ``feedback``, ``admin`` (admin implies all);
the check itself is ``canary.serve.deps.authorize``.

The store keeps only scrypt hashes (``evidence_store.service.tokens``). A verified token is cached in this
process, keyed by the SHA-256 of the token, for ``token_cache_s``: the slow hash is paid once per
token and worker, and a revoked token stops working everywhere within that time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from evidence_store.service.tokens import TokenInfo

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
