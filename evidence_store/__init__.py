"""The pairwise evidence cache, certificates, probe journal and device reservations.

SQLAlchemy 2.x on SQLite (default, zero setup) or PostgreSQL (a fleet sharing one store); the schema
changes only through the Alembic migrations in ``migrations/``.

Importing this package is cheap: the names below are imported on first use, so ``gpu-fit``, which
imports ``evidence_store.location`` to check a store URL, starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canary._model import PairKey
    from evidence_store.certificates import get_certificate, record_certificate
    from evidence_store.database import RetryPolicy, make_engine, redact, run_transaction, session_scope
    from evidence_store.errors import LeaseLost, ReservationConflict, TransientStoreError
    from evidence_store.evidence import expire, get_evidence, history, mark_stale, record_evidence, revoke
    from evidence_store.journal import (
        expired_probes,
        journal_get,
        journal_heartbeat,
        journal_start,
        journal_update,
    )
    from evidence_store.location import default_db_url
    from evidence_store.lookup import lookup
    from evidence_store.migrate import check_schema, current, downgrade, open_store, upgrade
    from evidence_store.reservations import active_reservations, release, reserve, reserved_bytes
    from evidence_store.schemas import (
        CertificateOut,
        EvidenceIn,
        EvidenceOut,
        LookupResult,
        ProbeRow,
        ReservationOut,
    )

_LAZY: dict[str, str] = {
    "PairKey": "canary._model",
    "CertificateOut": "evidence_store.schemas",
    "EvidenceIn": "evidence_store.schemas",
    "EvidenceOut": "evidence_store.schemas",
    "LeaseLost": "evidence_store.errors",
    "LookupResult": "evidence_store.schemas",
    "ProbeRow": "evidence_store.schemas",
    "ReservationConflict": "evidence_store.errors",
    "ReservationOut": "evidence_store.schemas",
    "RetryPolicy": "evidence_store.database",
    "TransientStoreError": "evidence_store.errors",
    "active_reservations": "evidence_store.reservations",
    "check_schema": "evidence_store.migrate",
    "current": "evidence_store.migrate",
    "default_db_url": "evidence_store.location",
    "downgrade": "evidence_store.migrate",
    "expire": "evidence_store.evidence",
    "expired_probes": "evidence_store.journal",
    "get_certificate": "evidence_store.certificates",
    "get_evidence": "evidence_store.evidence",
    "history": "evidence_store.evidence",
    "journal_get": "evidence_store.journal",
    "journal_heartbeat": "evidence_store.journal",
    "journal_start": "evidence_store.journal",
    "journal_update": "evidence_store.journal",
    "lookup": "evidence_store.lookup",
    "make_engine": "evidence_store.database",
    "mark_stale": "evidence_store.evidence",
    "open_store": "evidence_store.migrate",
    "record_certificate": "evidence_store.certificates",
    "record_evidence": "evidence_store.evidence",
    "redact": "evidence_store.database",
    "release": "evidence_store.reservations",
    "reserve": "evidence_store.reservations",
    "reserved_bytes": "evidence_store.reservations",
    "revoke": "evidence_store.evidence",
    "run_transaction": "evidence_store.database",
    "session_scope": "evidence_store.database",
    "upgrade": "evidence_store.migrate",
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
