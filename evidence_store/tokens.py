"""API tokens moved to ``evidence_store.service.tokens``; this name is kept for importers not yet moved; new code imports the new module."""

from __future__ import annotations

from evidence_store.service.tokens import (
    PREFIX,
    TokenInfo,
    create,
    hash_secret,
    list_tokens,
    parse_scopes,
    revoke,
    split,
    status,
    verify,
)

__all__ = [
    "PREFIX",
    "TokenInfo",
    "create",
    "hash_secret",
    "list_tokens",
    "parse_scopes",
    "revoke",
    "split",
    "status",
    "verify",
]
