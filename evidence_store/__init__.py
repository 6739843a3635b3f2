"""The pairwise evidence cache, certificates, probe journal and device reservations.

SQLAlchemy 2.x on SQLite (default, zero setup) or PostgreSQL (a fleet sharing one store); the schema
changes only through the Alembic migrations in ``migrations/``.

Importing this package is cheap: ``PairKey`` (``evidence_store.keys``) needs no SQLAlchemy, and the
names below that do are imported on first use, so ``gpu-fit`` starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evidence_store.keys import PairKey

if TYPE_CHECKING:
    from evidence_store.engine import (
        RetryPolicy,
        check_schema,
        current,
        downgrade,
        make_engine,
        open_store,
        redact,
        run_transaction,
        session_scope,
        upgrade,
    )
    from evidence_store.errors import LeaseLost, ReservationConflict, TransientStoreError
    from evidence_store.location import default_db_url
    from evidence_store.repository import (
        active_reservations,
        expire,
        expired_probes,
        get_certificate,
        get_evidence,
        history,
        journal_get,
        journal_heartbeat,
        journal_start,
        journal_update,
        lookup,
        mark_stale,
        record_certificate,
        record_evidence,
        release,
        reserve,
        reserved_bytes,
        revoke,
    )
    from evidence_store.schemas import (
        CertificateOut,
        EvidenceIn,
        EvidenceOut,
        LookupResult,
        ProbeRow,
        ReservationOut,
    )

_LAZY: dict[str, str] = {
    "CertificateOut": "evidence_store.schemas",
    "EvidenceIn": "evidence_store.schemas",
    "EvidenceOut": "evidence_store.schemas",
    "LeaseLost": "evidence_store.errors",
    "LookupResult": "evidence_store.schemas",
    "ProbeRow": "evidence_store.schemas",
    "ReservationConflict": "evidence_store.errors",
    "ReservationOut": "evidence_store.schemas",
    "RetryPolicy": "evidence_store.engine",
    "TransientStoreError": "evidence_store.errors",
    "active_reservations": "evidence_store.repository",
    "check_schema": "evidence_store.engine",
    "current": "evidence_store.engine",
    "default_db_url": "evidence_store.location",
    "downgrade": "evidence_store.engine",
    "expire": "evidence_store.repository",
    "expired_probes": "evidence_store.repository",
    "get_certificate": "evidence_store.repository",
    "get_evidence": "evidence_store.repository",
    "history": "evidence_store.repository",
    "journal_get": "evidence_store.repository",
    "journal_heartbeat": "evidence_store.repository",
    "journal_start": "evidence_store.repository",
    "journal_update": "evidence_store.repository",
    "lookup": "evidence_store.repository",
    "make_engine": "evidence_store.engine",
    "mark_stale": "evidence_store.repository",
    "open_store": "evidence_store.engine",
    "record_certificate": "evidence_store.repository",
    "record_evidence": "evidence_store.repository",
    "redact": "evidence_store.engine",
    "release": "evidence_store.repository",
    "reserve": "evidence_store.repository",
    "reserved_bytes": "evidence_store.repository",
    "revoke": "evidence_store.repository",
    "run_transaction": "evidence_store.engine",
    "session_scope": "evidence_store.engine",
    "upgrade": "evidence_store.engine",
}

__all__ = [
    "CertificateOut",
    "EvidenceIn",
    "EvidenceOut",
    "LeaseLost",
    "LookupResult",
    "PairKey",
    "ProbeRow",
    "ReservationConflict",
    "ReservationOut",
    "RetryPolicy",
    "TransientStoreError",
    "active_reservations",
    "check_schema",
    "current",
    "default_db_url",
    "downgrade",
    "expire",
    "expired_probes",
    "get_certificate",
    "get_evidence",
    "history",
    "journal_get",
    "journal_heartbeat",
    "journal_start",
    "journal_update",
    "lookup",
    "make_engine",
    "mark_stale",
    "open_store",
    "record_certificate",
    "record_evidence",
    "redact",
    "release",
    "reserve",
    "reserved_bytes",
    "revoke",
    "run_transaction",
    "session_scope",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evidence_store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
