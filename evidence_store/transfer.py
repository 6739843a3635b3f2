"""Moving evidence between stores: the export stream and the import that never overwrites.

Functions take the caller's ``Session`` and never commit. The file formats (header, signature, line
checks) live in ``evidence_store.export_file`` and ``evidence_store.import_check``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from evidence_store.evidence import by_probe_id, evidence_row_values, first_difference, relink
from evidence_store.models import Evidence
from evidence_store.schemas import EvidenceOut


def iter_evidence(session: Session, *, batch_rows: int = 1000) -> Iterator[EvidenceOut]:
    """Every record, oldest first, streamed in batches (for export)."""
    query = (
        select(Evidence).order_by(Evidence.created_at, Evidence.id).execution_options(yield_per=batch_rows)
    )
    for row in session.scalars(query):
        yield EvidenceOut.model_validate(row)


@dataclass(frozen=True, slots=True)
class ImportConflict:
    """Record ``index`` (0-based, in the order given) disagrees with the store on ``field``."""

    index: int
    probe_id: str
    field: str
    stored: Any
    given: Any


@dataclass(frozen=True, slots=True)
class ImportResult:
    inserted: int
    unchanged: int
    conflicts: list[ImportConflict] = field(default_factory=list)


def _imported(rec: EvidenceOut, origin: str) -> EvidenceOut:
    """The record as this store keeps it: source ``import``, and where it came from."""
    if rec.source == "import":
        return rec if rec.origin else rec.model_copy(update={"origin": origin})
    return rec.model_copy(update={"source": "import", "origin": f"{origin}; exported with source {rec.source}"})


def import_records(
    session: Session, records: Sequence[EvidenceOut], *, origin: str = "import"
) -> ImportResult:
    """Add exported records, never overwriting, each marked as imported.

    Every record is stored with source ``import`` and ``origin`` (where it came from and the source the
    exporting store gave it), so ``lookup`` never lets it outweigh this store's own evidence. A record
    whose probe id is already stored with the same observation is left as it is (``unchanged``); one
    with a different observation, or whose id belongs to another probe, is a conflict. When there is
    any conflict nothing is inserted and the conflicts are returned, so the caller can report them and
    roll back. Statuses, reasons and the time of a status change are kept as exported; ``superseded_by`` is recomputed for every key
    touched. The records must already have been checked (``evidence_store.import_check``).
    """
    conflicts: list[ImportConflict] = []
    to_insert: list[tuple[int, EvidenceOut]] = []
    seen_probe_ids: dict[str, int] = {}
    for index, rec in enumerate(records):
        if rec.key_digest != rec.key.digest():
            conflicts.append(
                ImportConflict(index, rec.probe_id, "key_digest", rec.key.digest(), rec.key_digest)
            )
            continue
        if rec.probe_id in seen_probe_ids:
            conflicts.append(
                ImportConflict(index, rec.probe_id, "probe_id", "earlier in the same file", rec.probe_id)
            )
            continue
        seen_probe_ids[rec.probe_id] = index
        existing = by_probe_id(session, rec.probe_id)
        if existing is not None:
            stored = EvidenceOut.model_validate(existing)
            # The observation must agree; the source differs by design (this store marked it imported).
            stored_content = {"id": stored.id, **stored.as_input().content(), "source": None}
            given_content = {"id": rec.id, **rec.as_input().content(), "source": None}
            differing = first_difference(stored_content, given_content)
            if differing is not None:
                conflicts.append(
                    ImportConflict(
                        index, rec.probe_id, differing, stored_content[differing], given_content[differing]
                    )
                )
            continue
        other = session.get(Evidence, rec.id)
        if other is not None:
            conflicts.append(
                ImportConflict(index, rec.probe_id, "id", f"used by probe {other.probe_id}", rec.id)
            )
            continue
        to_insert.append((index, _imported(rec, origin)))
    if conflicts:
        return ImportResult(inserted=0, unchanged=0, conflicts=conflicts)
    for _, rec in to_insert:
        values = evidence_row_values(rec.as_input(), evidence_id=rec.id, status=rec.status)
        values["revoked_reason"] = rec.revoked_reason
        values["stale_reason"] = rec.stale_reason
        values["origin"] = rec.origin
        values["status_changed_at"] = rec.status_changed_at
        session.add(Evidence(**values))
    session.flush()
    for digest in sorted({rec.key_digest for _, rec in to_insert}):
        relink(session, digest)
    session.flush()
    return ImportResult(inserted=len(to_insert), unchanged=len(records) - len(to_insert))
