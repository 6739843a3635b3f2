"""API bearer tokens for ``canary serve``: stored as a salted scrypt hash, never in clear.

A token reads ``cnr_<id>_<secret>``: the id finds the row, the secret is checked against the hash in
constant time. scrypt (``hashlib``, no extra dependency) is memory-hard like argon2; a stolen table
therefore costs an attacker real work even though the secrets are already 256-bit random. Because a
hash costs milliseconds, the service keeps verified tokens in a short-lived in-memory cache
(``canary.serve.auth``), so the hash is paid once per token and worker, not per request.

Functions take the caller's session and never commit.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.schemas import to_utc
from evidence_store.service.models import TOKEN_SCOPES, ApiToken

PREFIX = "cnr"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    name: str
    scopes: frozenset[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def active_at(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(row.id, row.name, frozenset(s for s in row.scopes.split(",") if s), row.created_at,
                     row.expires_at, row.revoked_at)


def hash_secret(secret: str, salt: bytes) -> str:
    return hashlib.scrypt(secret.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32).hex()


def parse_scopes(scopes: Collection[str]) -> frozenset[str]:
    wanted = frozenset(s.strip() for s in scopes if s.strip())
    unknown = sorted(wanted - set(TOKEN_SCOPES))
    if unknown:
        raise InputError(f"unknown scope(s) {', '.join(unknown)}; scopes are {', '.join(TOKEN_SCOPES)}",
                         field="scopes")
    if not wanted:
        raise InputError(f"at least one scope is needed ({', '.join(TOKEN_SCOPES)})", field="scopes")
    return wanted


def create(session: Session, *, name: str, scopes: Collection[str], now: datetime,
           expires_at: datetime | None = None) -> tuple[str, TokenInfo]:
    """A new token; returns the clear token (shown once) and its record."""
    if not name or len(name) > 200:
        raise InputError("must be 1-200 characters", field="name")
    chosen = parse_scopes(scopes)
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    row = ApiToken(id=token_id, name=name, scopes=",".join(sorted(chosen)), salt=salt.hex(),
                   secret_hash=hash_secret(secret, salt), created_at=to_utc(now),
                   expires_at=None if expires_at is None else to_utc(expires_at), revoked_at=None)
    session.add(row)
    session.flush()
    return f"{PREFIX}_{token_id}_{secret}", _info(row)


def split(token: str) -> tuple[str, str] | None:
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def verify(session: Session, token: str, *, now: datetime) -> TokenInfo | None:
    """The token's record when the secret matches and the token is active; else ``None``."""
    parsed = split(token)
    if parsed is None:
        return None
    row = session.get(ApiToken, parsed[0])
    if row is None:
        return None
    computed = hash_secret(parsed[1], bytes.fromhex(row.salt))
    if not hmac.compare_digest(computed, row.secret_hash):
        return None
    info = _info(row)
    return info if info.active_at(to_utc(now)) else None


def status(session: Session, token_id: str) -> TokenInfo | None:
    row = session.get(ApiToken, token_id)
    return None if row is None else _info(row)


def revoke(session: Session, token_id: str, *, now: datetime) -> TokenInfo:
    row = session.get(ApiToken, token_id, with_for_update=True)
    if row is None:
        raise InputError(f"no token {token_id!r}", field="id")
    if row.revoked_at is None:
        row.revoked_at = to_utc(now)
    session.flush()
    return _info(row)


def list_tokens(session: Session) -> list[TokenInfo]:
    return [_info(r) for r in session.scalars(select(ApiToken).order_by(ApiToken.created_at)).all()]
