"""The profile and snapshot registry: documents stored by value under ``name@version`` so that a
scheduler sends a name, not a file. Entries are immutable: writing the same ``name@version`` again with
the same content is a no-op; with different content it is refused (publish a new version).

Functions take the caller's session and never commit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.schemas import to_utc
from evidence_store.service.models import REGISTRY_KINDS, RegistryEntry


class RegistryConflict(InputError):
    """``name@version`` already holds a different document."""


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str
    name: str
    version: str
    digest: str
    document: dict[str, Any]
    created_at: datetime

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def document_digest(document: dict[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def parse_ref(ref: str, *, field: str) -> tuple[str, str | None]:
    """``name@version`` → (name, version); ``name`` alone → (name, None): the newest version."""
    name, _, version = ref.partition("@")
    if not name or (("@" in ref) and not version):
        raise InputError(f"not a registry reference {ref!r}: use name@version", field=field)
    return name, version or None


def _entry(row: RegistryEntry) -> Entry:
    return Entry(row.kind, row.name, row.version, row.digest, dict(row.document_json), row.created_at)


def _check_kind(kind: str) -> None:
    if kind not in REGISTRY_KINDS:
        raise InputError(f"unknown registry kind {kind!r} (one of {', '.join(REGISTRY_KINDS)})", field="kind")


def put(session: Session, *, kind: str, name: str, version: str, document: dict[str, Any],
        now: datetime) -> tuple[Entry, bool]:
    """Store a document; returns the entry and whether this call created it."""
    _check_kind(kind)
    for value, field in ((name, "name"), (version, "version")):
        if not value or len(value) > 200 or "@" in value:
            raise InputError(f"must be 1-200 characters without '@', got {value!r}", field=field)
    digest = document_digest(document)
    row = session.get(RegistryEntry, (kind, name, version), with_for_update=True)
    if row is not None:
        if row.digest != digest:
            raise RegistryConflict(f"{kind} {name}@{version} already exists with different content "
                                   f"(digest {row.digest[:12]}); publish a new version", field="version")
        return _entry(row), False
    row = RegistryEntry(kind=kind, name=name, version=version, digest=digest, document_json=dict(document),
                        created_at=to_utc(now))
    session.add(row)
    session.flush()
    return _entry(row), True


def get(session: Session, *, kind: str, name: str, version: str | None) -> Entry | None:
    """The entry, or the newest version of ``name`` when ``version`` is ``None``; ``None`` when absent."""
    _check_kind(kind)
    if version is not None:
        row = session.get(RegistryEntry, (kind, name, version))
        return None if row is None else _entry(row)
    newest = session.scalars(
        select(RegistryEntry).where(RegistryEntry.kind == kind, RegistryEntry.name == name)
        .order_by(RegistryEntry.created_at.desc(), RegistryEntry.version.desc()).limit(1)
    ).first()
    return None if newest is None else _entry(newest)


def list_entries(session: Session, *, kind: str) -> list[Entry]:
    _check_kind(kind)
    rows = session.scalars(
        select(RegistryEntry).where(RegistryEntry.kind == kind).order_by(RegistryEntry.name, RegistryEntry.created_at)
    ).all()
    return [_entry(r) for r in rows]
