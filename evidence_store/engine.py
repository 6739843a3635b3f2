"""The old home of the store's connections and schema handling, kept for importers not yet moved:
connections are ``evidence_store.database``, the Alembic schema ``evidence_store.migrate``.
New code imports those modules; this one only re-exports their names."""

from __future__ import annotations

from evidence_store.database import (
    DEFAULT_RETRY,
    PING_AFTER_IDLE_S,
    RetryPolicy,
    is_transient,
    make_engine,
    normalize_url,
    redact,
    run_transaction,
    session_scope,
    short_error,
    translate,
)
from evidence_store.location import default_db_url
from evidence_store.migrate import (
    SCHEMA_HEAD,
    alembic_config,
    check_revision,
    check_schema,
    current,
    downgrade,
    head_revisions,
    migrations_dir,
    open_store,
    upgrade,
)

__all__ = [
    "DEFAULT_RETRY",
    "PING_AFTER_IDLE_S",
    "SCHEMA_HEAD",
    "RetryPolicy",
    "alembic_config",
    "check_revision",
    "check_schema",
    "current",
    "default_db_url",
    "downgrade",
    "head_revisions",
    "is_transient",
    "make_engine",
    "migrations_dir",
    "normalize_url",
    "open_store",
    "redact",
    "run_transaction",
    "session_scope",
    "short_error",
    "translate",
    "upgrade",
]
