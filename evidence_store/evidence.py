"""Evidence records: append, read, list, and the lifecycle (expire, revoke, mark stale after a driver
change). Every function takes the caller's ``Session`` and never commits; none reads the clock.

Evidence is append-only: nothing here deletes a record. Expiry, staleness and revocation are status
changes with a reason; ``superseded_by`` links each record to the next newer one of the same key.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from canary._model import PairKey
from canary.errors import InputError
from evidence_store.models import Evidence
from evidence_store.schemas import STATUSES, EvidenceIn, EvidenceOut, Status, to_utc


def evidence_row_values(rec: EvidenceIn, *, evidence_id: str, status: Status = "current") -> dict[str, Any]:
    """Column values for one record (also used by bulk loaders)."""
    key = rec.key
    return {
        "id": evidence_id,
        "key_digest": key.digest(),
        "resident_version": key.resident_version,
        "resident_shape_family": key.resident_shape_family,
        "candidate_version": key.candidate_version,
        "candidate_shape_family": key.candidate_shape_family,
        "device_type": key.device_type,
        "regime": key.regime,
        "driver_version": rec.driver_version,
        "cuda_version": rec.cuda_version,
        "device_uuid": rec.device_uuid,
        "probe_id": rec.probe_id,
        "source": rec.source,
        "outcome": rec.outcome,
        "resident_slowdown_pct": rec.resident_slowdown_pct,
        "resident_slowdown_low_pct": rec.resident_slowdown_low_pct,
        "resident_slowdown_high_pct": rec.resident_slowdown_high_pct,
        "candidate_slowdown_pct": rec.candidate_slowdown_pct,
        "samples": rec.samples,
        "exposure_used": rec.exposure_used,
        "time_used_s": rec.time_used_s,
        "confidence": rec.confidence,
        "created_at": rec.created_at,
        "expires_at": rec.expires_at,
        "status": status,
        "superseded_by": None,
        "revoked_reason": None,
        "stale_reason": None,
        "status_changed_at": None,
    }


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


def first_difference(stored: dict[str, Any], given: dict[str, Any]) -> str | None:
    """The first field of ``given`` whose value differs from ``stored``, or ``None``."""
    for name in given:
        if stored.get(name) != given[name]:
            return name
    return None


def by_probe_id(session: Session, probe_id: str) -> Evidence | None:
    """The stored row of this probe, or ``None``."""
    return session.scalar(select(Evidence).where(Evidence.probe_id == probe_id))


def _same_or_conflict(existing: Evidence, rec: EvidenceIn) -> EvidenceOut:
    out = EvidenceOut.model_validate(existing)
    stored, given = out.as_input().content(), rec.content()
    differing = first_difference(stored, given)
    if differing is not None:
        raise InputError(
            f"probe id {rec.probe_id!r} is already recorded (evidence {existing.id}) with different content: "
            f"stored {stored[differing]!r}, given {given[differing]!r}",
            field=differing,
        )
    return out


def relink(session: Session, key_digest: str) -> None:
    """Point each record of the key at the next newer one; the newest points nowhere."""
    rows = session.execute(
        select(Evidence.id, Evidence.superseded_by)
        .where(Evidence.key_digest == key_digest)
        .order_by(Evidence.created_at, Evidence.id)
    ).all()
    for (row_id, superseded_by), following in zip(rows, [*rows[1:], None], strict=True):
        wanted = following[0] if following is not None else None
        if superseded_by != wanted:
            session.execute(update(Evidence).where(Evidence.id == row_id).values(superseded_by=wanted))


def _link_new(session: Session, row: Evidence) -> None:
    """Splice a new record into its key's chain: its predecessor points to it, it points to its
    successor (usually none: the new record is normally the newest). Two indexed queries, however long
    the key's history."""
    same_key = [Evidence.key_digest == row.key_digest, Evidence.id != row.id]
    earlier = or_(
        Evidence.created_at < row.created_at,
        and_(Evidence.created_at == row.created_at, Evidence.id < row.id),
    )
    later = or_(
        Evidence.created_at > row.created_at,
        and_(Evidence.created_at == row.created_at, Evidence.id > row.id),
    )
    predecessor = session.scalar(
        select(Evidence.id)
        .where(*same_key, earlier)
        .order_by(Evidence.created_at.desc(), Evidence.id.desc())
        .limit(1)
    )
    successor = session.scalar(
        select(Evidence.id).where(*same_key, later).order_by(Evidence.created_at, Evidence.id).limit(1)
    )
    row.superseded_by = successor
    if predecessor is not None:
        session.execute(update(Evidence).where(Evidence.id == predecessor).values(superseded_by=row.id))


def record_evidence(session: Session, rec: EvidenceIn) -> EvidenceOut:
    """Append ``rec``; idempotent on ``probe_id``.

    A retried write of the same record returns the stored row (no duplicate); the same probe id with a
    different payload raises ``InputError`` naming the first differing field.
    """
    existing = by_probe_id(session, rec.probe_id)
    if existing is not None:
        return _same_or_conflict(existing, rec)
    row = Evidence(**evidence_row_values(rec, evidence_id=str(uuid.uuid4())))
    try:
        # A savepoint, so that a concurrent writer of the same probe id costs this insert only,
        # not the caller's whole transaction.
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        existing = by_probe_id(session, rec.probe_id)
        if existing is None:
            raise
        return _same_or_conflict(existing, rec)
    _link_new(session, row)
    session.flush()
    return EvidenceOut.model_validate(row)


def get_evidence(session: Session, evidence_id: str) -> EvidenceOut | None:
    """The record with this id, or ``None`` when there is none."""
    row = session.get(Evidence, evidence_id)
    return EvidenceOut.model_validate(row) if row is not None else None


def _require(session: Session, evidence_id: str) -> Evidence:
    row = session.get(Evidence, evidence_id)
    if row is None:
        raise InputError(f"no evidence with id {evidence_id!r}", field="id")
    return row


def history(session: Session, evidence_id: str) -> list[EvidenceOut]:
    """Every record of the same pair key as ``evidence_id`` (any status, any driver), newest first."""
    row = _require(session, evidence_id)
    rows = session.scalars(
        select(Evidence)
        .where(Evidence.key_digest == row.key_digest)
        .order_by(Evidence.created_at.desc(), Evidence.id.desc())
    ).all()
    return [EvidenceOut.model_validate(r) for r in rows]


def _pair_filter(pair: str) -> ColumnElement[bool]:
    # Versions may contain ':' themselves (``sha256:…``), so match the joined form exactly instead of
    # guessing where to split.
    return (Evidence.resident_version + ":" + Evidence.candidate_version) == pair


def list_evidence(
    session: Session,
    *,
    pair: str | None = None,
    device_type: str | None = None,
    status: Status | None = None,
    limit: int | None = None,
) -> list[EvidenceOut]:
    """Records newest first, filtered by ``RESIDENT_VERSION:CANDIDATE_VERSION``, device type, status."""
    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r}; one of {', '.join(STATUSES)}", field="status")
    query: Select[Evidence] = select(Evidence)
    if pair is not None:
        query = query.where(_pair_filter(pair))
    return newest_records(session, query, device_type=device_type, status=status, limit=limit)


def newest_records(
    session: Session, query: Select[Evidence], *, device_type: str | None, status: str | None, limit: int | None
) -> list[EvidenceOut]:
    """``query``'s records filtered by device type and status, newest first, at most ``limit``: the one
    listing rule every evidence listing shares."""
    query = _filtered(query, device_type=device_type, status=status)
    query = query.order_by(Evidence.created_at.desc(), Evidence.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [EvidenceOut.model_validate(r) for r in session.scalars(query)]


def _filtered(query: Select[Evidence], *, device_type: str | None, status: str | None) -> Select[Evidence]:
    if device_type is not None:
        query = query.where(Evidence.device_type == device_type)
    if status is not None:
        query = query.where(Evidence.status == status)
    return query


def count_records(
    session: Session, query: Select[Evidence] | None = None, *, device_type: str | None = None,
    status: str | None = None,
) -> int:
    """How many records ``query`` (default: every record) selects, filtered as ``newest_records`` filters
    them: the total a limited listing is a part of."""
    from sqlalchemy import func

    inner = _filtered(query if query is not None else select(Evidence), device_type=device_type, status=status)
    return int(session.scalar(select(func.count()).select_from(inner.subquery())) or 0)


def _changed_at(session: Session, now: datetime | None) -> Any:
    """The time a status change is recorded at: ``now`` (UTC) when the caller gives it, else the store's
    own clock at the write (this module never reads the process's clock)."""
    if now is not None:
        return to_utc(now)
    from sqlalchemy import func

    if session.get_bind().dialect.name == "sqlite":
        # SQLite's CURRENT_TIMESTAMP has whole seconds; this is UTC to the millisecond, in the text form
        # the column's type reads back as UTC.
        return func.strftime("%Y-%m-%d %H:%M:%f", "now")
    return func.now()


def expire(
    session: Session, *, key: PairKey | None = None, before: datetime | None = None, now: datetime | None = None
) -> int:
    """Mark current records stale (all, those of ``key``, and/or those created before ``before``), at
    ``now`` (``status_changed_at``; default: the store's clock).

    Returns how many records changed. Nothing is deleted.
    """
    conditions: list[ColumnElement[bool]] = [Evidence.status == "current"]
    reason = "expired on request"
    if key is not None:
        conditions.append(Evidence.key_digest == key.digest())
    if before is not None:
        before = to_utc(before)
        conditions.append(Evidence.created_at < before)
        reason += f" (created before {before.isoformat()})"
    result = session.execute(
        update(Evidence).where(*conditions).values(
            status="stale", stale_reason=reason, status_changed_at=_changed_at(session, now)
        ),
        execution_options={"synchronize_session": False},
    )
    return _rowcount(result)


def revoke(session: Session, evidence_id: str, why: str, *, now: datetime | None = None) -> None:
    """Revoke one record with a reason, at ``now`` (``status_changed_at``; default: the store's clock).
    Revoking a revoked record keeps its first reason and time."""
    if not why.strip():
        raise InputError("a revocation needs a reason", field="why")
    row = _require(session, evidence_id)
    if row.status == "revoked":
        return
    row.status = "revoked"
    row.revoked_reason = why.strip()
    row.status_changed_at = _changed_at(session, now)
    session.flush()
    if now is None:
        session.refresh(row, ["status_changed_at"])  # the store's clock wrote it: read what it wrote


def mark_stale(
    session: Session, *, driver_not: str, device_type: str | None = None, now: datetime | None = None
) -> int:
    """After a driver change: current records not recorded under ``driver_not`` become stale
    (records with an unknown driver too: they were not shown to hold under it), at ``now``
    (``status_changed_at``; default: the store's clock). Returns the count."""
    conditions: list[ColumnElement[bool]] = [
        Evidence.status == "current",
        (Evidence.driver_version != driver_not) | Evidence.driver_version.is_(None),
    ]
    if device_type is not None:
        conditions.append(Evidence.device_type == device_type)
    result = session.execute(
        update(Evidence)
        .where(*conditions)
        .values(status="stale", stale_reason=f"driver changed to {driver_not}",
                status_changed_at=_changed_at(session, now)),
        execution_options={"synchronize_session": False},
    )
    return _rowcount(result)


def expiring_evidence(session: Session, *, now: datetime, within_s: float) -> list[Evidence]:
    """Current records that expire within ``within_s`` of ``now`` (not yet expired), soonest first: the
    pairs the nightly warm job renews before they lapse."""
    now = to_utc(now)
    return list(session.scalars(
        select(Evidence).where(Evidence.status == "current", Evidence.expires_at > now,
                               Evidence.expires_at <= now + timedelta(seconds=within_s))
        .order_by(Evidence.expires_at)
    ).all())
