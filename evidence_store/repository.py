"""Transition only: the store's operations now live by aggregate, and this module re-exports them for
callers that have not moved yet (``canary/admission.py`` while it is being split). New code imports
from the aggregate modules; remove this module once nothing imports it.

- ``evidence_store.evidence``: record, read, list and the lifecycle of evidence records
- ``evidence_store.lookup``: the pair lookup (``evidence_store.pooling`` holds the pooling rule)
- ``evidence_store.certificates``: certificates and their evidence links
- ``evidence_store.journal``: the probe journal
- ``evidence_store.reservations``: device reservations
- ``evidence_store.transfer``: export stream and import
"""

from __future__ import annotations

from evidence_store.certificates import get_certificate, record_certificate
from evidence_store.evidence import (
    evidence_row_values,
    expire,
    get_evidence,
    history,
    list_evidence,
    mark_stale,
    record_evidence,
    revoke,
)
from evidence_store.journal import (
    expired_probes,
    journal_get,
    journal_heartbeat,
    journal_start,
    journal_update,
)
from evidence_store.lookup import lookup, lookup_query
from evidence_store.reservations import (
    active_reservations,
    list_reservations,
    release,
    reserve,
    reserved_bytes,
)
from evidence_store.transfer import ImportConflict, ImportResult, import_records, iter_evidence

__all__ = [
    "ImportConflict",
    "ImportResult",
    "active_reservations",
    "evidence_row_values",
    "expire",
    "expired_probes",
    "get_certificate",
    "get_evidence",
    "history",
    "import_records",
    "iter_evidence",
    "journal_get",
    "journal_heartbeat",
    "journal_start",
    "journal_update",
    "list_evidence",
    "list_reservations",
    "lookup",
    "lookup_query",
    "mark_stale",
    "record_certificate",
    "record_evidence",
    "release",
    "reserve",
    "reserved_bytes",
    "revoke",
]
