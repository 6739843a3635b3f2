"""The registry moved to ``evidence_store.service.registry``; this name is kept for importers not yet moved; new code imports the new module."""

from __future__ import annotations

from evidence_store.service.registry import (
    Entry,
    RegistryConflict,
    document_digest,
    get,
    list_entries,
    parse_ref,
    put,
)

__all__ = [
    "Entry",
    "RegistryConflict",
    "document_digest",
    "get",
    "list_entries",
    "parse_ref",
    "put",
]
