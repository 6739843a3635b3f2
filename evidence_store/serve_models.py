"""The service's ORM classes moved to ``evidence_store.service.models``; this name is kept for importers not yet moved; new code imports the new module."""

from __future__ import annotations

from evidence_store.service.models import (
    REGISTRY_KINDS,
    SERVE_PROBE_STATES,
    TOKEN_SCOPES,
    ApiToken,
    RegistryEntry,
    ServeProbe,
)

__all__ = [
    "REGISTRY_KINDS",
    "SERVE_PROBE_STATES",
    "TOKEN_SCOPES",
    "ApiToken",
    "RegistryEntry",
    "ServeProbe",
]
