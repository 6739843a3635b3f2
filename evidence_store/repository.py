"""The evidence store's operations. Every function takes the caller's ``Session`` and never commits:
the use case commits once (``session_scope`` / ``run_transaction``), so an admission's evidence,
certificate and reservation land together or not at all. No function reads the clock; callers pass
``now``.

Evidence is append-only: nothing here deletes a record. Expiry, staleness and revocation are status
changes with a reason; ``superseded_by`` links each record to the next newer one of the same key.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.errors import LeaseLost, ReservationConflict
from evidence_store.keys import PairKey
from evidence_store.models import (
    Certificate,
    CertificateEvidence,
    Device,
    Evidence,
    ProbeJournal,
    Reservation,
)
from evidence_store.schemas import (
    PROBE_STATES,
    STATUSES,
    CertificateOut,
    EvidenceIn,
    EvidenceOut,
    LookupResult,
    ProbeRow,
    ProbeState,
    ReservationOut,
    Status,
    to_utc,
)

# --- conversions ----------------------------------------------------------------------------------


def _key_of(row: Evidence) -> PairKey:
    return PairKey(
        resident_version=row.resident_version,
        resident_shape_family=row.resident_shape_family,
        candidate_version=row.candidate_version,
        candidate_shape_family=row.candidate_shape_family,
        device_type=row.device_type,
        regime=row.regime,
    )


def _evidence_out(row: Evidence) -> EvidenceOut:
    return EvidenceOut(
        id=row.id,
        key_digest=row.key_digest,
        probe_id=row.probe_id,
        key=_key_of(row),
        driver_version=row.driver_version,
        cuda_version=row.cuda_version,
        device_uuid=row.device_uuid,
        source=cast(Any, row.source),
        outcome=cast(Any, row.outcome),
        resident_slowdown=row.resident_slowdown,
        resident_slowdown_low=row.resident_slowdown_low,
        resident_slowdown_high=row.resident_slowdown_high,
        candidate_slowdown=row.candidate_slowdown,
        samples=row.samples,
        exposure_used=row.exposure_used,
        time_used_s=row.time_used_s,
        confidence=row.confidence,
        created_at=row.created_at,
        expires_at=row.expires_at,
        status=cast(Any, row.status),
        superseded_by=row.superseded_by,
        revoked_reason=row.revoked_reason,
        stale_reason=row.stale_reason,
        origin=row.origin,
    )


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
        "resident_slowdown": rec.resident_slowdown,
        "resident_slowdown_low": rec.resident_slowdown_low,
        "resident_slowdown_high": rec.resident_slowdown_high,
        "candidate_slowdown": rec.candidate_slowdown,
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
    }


def _rowcount(result: Any) -> int:
    return int(cast(CursorResult[Any], result).rowcount)


def _first_difference(stored: dict[str, Any], given: dict[str, Any]) -> str | None:
    for name in given:
        if stored.get(name) != given[name]:
            return name
    return None


# --- evidence -------------------------------------------------------------------------------------


def _by_probe_id(session: Session, probe_id: str) -> Evidence | None:
    return session.scalar(select(Evidence).where(Evidence.probe_id == probe_id))


def _same_or_conflict(existing: Evidence, rec: EvidenceIn) -> EvidenceOut:
    out = _evidence_out(existing)
    stored, given = out.as_input().content(), rec.content()
    differing = _first_difference(stored, given)
    if differing is not None:
        raise InputError(
            f"probe id {rec.probe_id!r} is already recorded (evidence {existing.id}) with different content: "
            f"stored {stored[differing]!r}, given {given[differing]!r}",
            field=differing,
        )
    return out


def _relink(session: Session, key_digest: str) -> None:
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
    existing = _by_probe_id(session, rec.probe_id)
    if existing is not None:
        return _same_or_conflict(existing, rec)
    row = Evidence(**evidence_row_values(rec, evidence_id=str(uuid.uuid4())))
    try:
        # A savepoint, so that a concurrent writer of the same probe id costs this insert only,
        # not the caller's whole transaction.
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        existing = _by_probe_id(session, rec.probe_id)
        if existing is None:
            raise
        return _same_or_conflict(existing, rec)
    _link_new(session, row)
    session.flush()
    return _evidence_out(row)


def get_evidence(session: Session, evidence_id: str) -> EvidenceOut | None:
    """The record with this id, or ``None`` when there is none."""
    row = session.get(Evidence, evidence_id)
    return _evidence_out(row) if row is not None else None


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
    return [_evidence_out(r) for r in rows]


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
    if device_type is not None:
        query = query.where(Evidence.device_type == device_type)
    if status is not None:
        query = query.where(Evidence.status == status)
    query = query.order_by(Evidence.created_at.desc(), Evidence.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_evidence_out(r) for r in session.scalars(query)]


def iter_evidence(session: Session, *, batch_rows: int = 1000) -> Iterator[EvidenceOut]:
    """Every record, oldest first, streamed in batches (for export)."""
    query = (
        select(Evidence).order_by(Evidence.created_at, Evidence.id).execution_options(yield_per=batch_rows)
    )
    for row in session.scalars(query):
        yield _evidence_out(row)


def expire(session: Session, *, key: PairKey | None = None, before: datetime | None = None) -> int:
    """Mark current records stale (all, those of ``key``, and/or those created before ``before``).

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
        update(Evidence).where(*conditions).values(status="stale", stale_reason=reason),
        execution_options={"synchronize_session": False},
    )
    return _rowcount(result)


def revoke(session: Session, evidence_id: str, why: str) -> None:
    """Revoke one record with a reason. Revoking a revoked record keeps its first reason."""
    if not why.strip():
        raise InputError("a revocation needs a reason", field="why")
    row = _require(session, evidence_id)
    if row.status == "revoked":
        return
    row.status = "revoked"
    row.revoked_reason = why.strip()
    session.flush()


def mark_stale(session: Session, *, driver_not: str, device_type: str | None = None) -> int:
    """After a driver change: current records not recorded under ``driver_not`` become stale
    (records with an unknown driver too: they were not shown to hold under it). Returns the count."""
    conditions: list[ColumnElement[bool]] = [
        Evidence.status == "current",
        (Evidence.driver_version != driver_not) | Evidence.driver_version.is_(None),
    ]
    if device_type is not None:
        conditions.append(Evidence.device_type == device_type)
    result = session.execute(
        update(Evidence)
        .where(*conditions)
        .values(status="stale", stale_reason=f"driver changed to {driver_not}"),
        execution_options={"synchronize_session": False},
    )
    return _rowcount(result)


# --- lookup ---------------------------------------------------------------------------------------


def _when(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def _weighted_estimate(rows: Sequence[Any]) -> float | None:
    measured = [r for r in rows if r.resident_slowdown is not None]
    if not measured:
        return None
    weights = [float(r.samples) for r in measured]
    values = [r.resident_slowdown for r in measured if r.resident_slowdown is not None]
    if sum(weights) > 0:
        return math.fsum(w * v for w, v in zip(weights, values, strict=True)) / math.fsum(weights)
    return math.fsum(values) / len(values)


def _envelope(rows: Sequence[Any]) -> tuple[float, float] | None:
    bounded: list[tuple[float, float]] = [
        (r.resident_slowdown_low, r.resident_slowdown_high)
        for r in rows
        if r.resident_slowdown_low is not None and r.resident_slowdown_high is not None
    ]
    if not bounded:
        return None
    return (min(lo for lo, _ in bounded), max(hi for _, hi in bounded))


_LOOKUP_COLUMNS = (
    Evidence.id,
    Evidence.driver_version,
    Evidence.source,
    Evidence.outcome,
    Evidence.resident_slowdown,
    Evidence.resident_slowdown_low,
    Evidence.resident_slowdown_high,
    Evidence.samples,
    Evidence.confidence,
    Evidence.created_at,
)


# Built once: a lookup sits on the admission's hot path, and constructing the statement costs more
# than running it.
_LOOKUP_STATEMENT = (
    select(*_LOOKUP_COLUMNS)
    .where(
        Evidence.key_digest == bindparam("key_digest"),
        Evidence.status == "current",
        Evidence.expires_at > bindparam("now"),
        Evidence.created_at > bindparam("oldest"),
    )
    .order_by(Evidence.created_at.desc(), Evidence.id.desc())
)


def _lookup_params(key: PairKey, now: datetime, ttl_s: float) -> dict[str, Any]:
    now = to_utc(now)
    return {"key_digest": key.digest(), "now": now, "oldest": now - timedelta(seconds=ttl_s)}


def lookup_query(key: PairKey, *, now: datetime, ttl_s: float) -> Select[*tuple[Any, ...]]:
    """The candidate rows of a lookup, with its parameters bound (for ``EXPLAIN``): current,
    unexpired, within the TTL, newest first; only the columns pooling reads.

    Served by the composite index ``ix_evidence_lookup (key_digest, status, expires_at)``.
    """
    return _LOOKUP_STATEMENT.params(**_lookup_params(key, now, ttl_s))


def lookup(
    session: Session,
    key: PairKey,
    *,
    driver_version: str | None,
    now: datetime,
    ttl_s: float,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float = 0.5,
) -> LookupResult:
    """Pool the usable evidence for ``key`` at ``now``.

    Usable: status ``current``, ``expires_at > now``, created within ``ttl_s``, outcome ``safe`` or
    ``unsafe`` (inconclusive and aborted probes are not evidence), recorded under ``driver_version``.
    When ``allow_cross_driver`` and no same-driver record exists, other drivers' records are used with
    their confidence multiplied by ``cross_driver_confidence_factor`` and ``cross_driver=True``.

    Pooling: imported records (source ``import``) count only when the store has none of its own for
    the key (of the driver pool chosen); then the newest production SLO violation outweighs every record before it. The outcome is
    ``unsafe`` if any remaining record is unsafe, else ``safe``. Its confidence is the highest
    confidence among the records with that outcome (each is a complete sequential test whose error
    guarantee holds alone; records are not assumed independent, so confidences are not multiplied).
    The slowdown estimate is the sample-weighted mean of those records, the interval their envelope.

    Returns ``outcome=None`` (and ``reason`` saying why) when no usable evidence exists;
    ``confidence`` is ``None`` when none of the deciding records carried one.
    """
    if not ttl_s > 0:
        raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
    if not 0.0 <= cross_driver_confidence_factor <= 1.0:
        raise InputError(
            f"must be within 0..1, got {cross_driver_confidence_factor}",
            field="cross_driver_confidence_factor",
        )
    rows: Sequence[Any] = session.execute(_LOOKUP_STATEMENT, _lookup_params(key, now, ttl_s)).all()
    if not rows:
        return LookupResult(
            outcome=None, reason=f"no current evidence within the last {ttl_s:g} s for this pair"
        )
    conclusive = [r for r in rows if r.outcome in ("safe", "unsafe")]
    if not conclusive:
        return LookupResult(
            outcome=None,
            reason=f"the {len(rows)} current record(s) for this pair are inconclusive or aborted probes, not evidence",
        )
    same_driver = [r for r in conclusive if driver_version is not None and r.driver_version == driver_version]
    cross_driver = False
    pool: list[Any]
    if same_driver:
        pool = same_driver
    elif allow_cross_driver:
        pool, cross_driver = conclusive, True
    else:
        drivers = sorted({r.driver_version or "unknown" for r in conclusive})
        current = (
            f"the current driver {driver_version}"
            if driver_version is not None
            else "an unknown current driver"
        )
        return LookupResult(
            outcome=None,
            reason=(
                f"evidence exists only under driver(s) {', '.join(drivers)}, not {current}, "
                f"and the policy does not allow evidence across drivers"
            ),
        )

    local = [r for r in pool if r.source != "import"]
    ignored_imports = len(pool) - len(local) if local else 0
    if local:  # imported evidence never outweighs this store's own for the same key
        pool = local
    violations = [r for r in pool if r.source == "production" and r.outcome == "unsafe"]
    outweighed = 0
    if violations:
        newest_violation = max(violations, key=lambda r: (r.created_at, r.id))
        kept = [r for r in pool if (r.created_at, r.id) >= (newest_violation.created_at, newest_violation.id)]
        outweighed = len(pool) - len(kept)
        pool = kept
    outcome = "unsafe" if any(r.outcome == "unsafe" for r in pool) else "safe"
    deciding = [r for r in pool if r.outcome == outcome]
    confidences = [r.confidence for r in deciding if r.confidence is not None]
    confidence = max(confidences) if confidences else None
    if cross_driver and confidence is not None:
        confidence *= cross_driver_confidence_factor
    newest = deciding[0].created_at  # rows arrive newest first

    if violations:
        reason = f"a production SLO violation recorded at {_when(newest_violation.created_at)} makes this pair unsafe"
        if outweighed:
            reason += f" and outweighs {outweighed} earlier record(s)"
    elif outcome == "unsafe":
        reason = f"{len(deciding)} of {len(pool)} current record(s) found this pair unsafe (newest {_when(newest)})"
    else:
        reason = f"{len(deciding)} current record(s) found this pair safe (newest {_when(newest)})"
    if ignored_imports:
        reason += f"; {ignored_imports} imported record(s) set aside: this store's own evidence decides"
    if cross_driver:
        drivers = sorted({r.driver_version or "unknown" for r in deciding})
        reason += (
            f"; recorded under driver(s) {', '.join(drivers)}, not "
            f"{driver_version if driver_version is not None else 'the (unknown) current driver'}, "
            f"so confidence is scaled by {cross_driver_confidence_factor:g}"
        )

    return LookupResult(
        outcome=outcome,
        evidence_ids=tuple(r.id for r in deciding),
        evidence_timestamp=newest,
        confidence=confidence,
        slowdown_estimate=_weighted_estimate(deciding),
        slowdown_interval=_envelope(deciding),
        samples=sum(r.samples for r in deciding),
        sources=tuple(sorted({cast(Any, r.source) for r in deciding})),
        cross_driver=cross_driver,
        reason=reason,
    )


# --- import ---------------------------------------------------------------------------------------


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
    roll back. Statuses and reasons are kept as exported; ``superseded_by`` is recomputed for every key
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
        existing = _by_probe_id(session, rec.probe_id)
        if existing is not None:
            stored = _evidence_out(existing)
            # The observation must agree; the source differs by design (this store marked it imported).
            stored_content = {"id": stored.id, **stored.as_input().content(), "source": None}
            given_content = {"id": rec.id, **rec.as_input().content(), "source": None}
            differing = _first_difference(stored_content, given_content)
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
        session.add(Evidence(**values))
    session.flush()
    for digest in sorted({rec.key_digest for _, rec in to_insert}):
        _relink(session, digest)
    session.flush()
    return ImportResult(inserted=len(to_insert), unchanged=len(records) - len(to_insert))


# --- certificates ---------------------------------------------------------------------------------


def record_certificate(
    session: Session,
    certificate_json: dict[str, Any],
    evidence_ids: list[str],
    *,
    recorded_at: datetime | None = None,
) -> str:
    """Store a certificate and link it to the evidence behind it; returns the certificate id.

    Every evidence id must exist (``InputError`` naming the missing ones). ``recorded_at`` is stored as
    given (``None``: not known to the store; the certificate's own fields carry its times).
    """
    try:
        canonical = json.dumps(certificate_json, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InputError(f"certificate is not plain JSON: {err}", field="certificate_json") from err
    unique_ids = list(dict.fromkeys(evidence_ids))
    if unique_ids:
        found = set(session.scalars(select(Evidence.id).where(Evidence.id.in_(unique_ids))))
        missing = [i for i in unique_ids if i not in found]
        if missing:
            raise InputError(f"no evidence with id(s) {', '.join(missing)}", field="evidence_ids")
    certificate_id = str(uuid.uuid4())
    session.add(
        Certificate(
            id=certificate_id,
            digest=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
            certificate_json=json.loads(canonical),
            recorded_at=to_utc(recorded_at) if recorded_at is not None else None,
        )
    )
    session.flush()
    session.add_all(CertificateEvidence(certificate_id=certificate_id, evidence_id=e) for e in unique_ids)
    session.flush()
    return certificate_id


def get_certificate(session: Session, certificate_id: str) -> CertificateOut | None:
    """The stored certificate, or ``None`` when there is none with this id."""
    row = session.get(Certificate, certificate_id)
    if row is None:
        return None
    linked = session.scalars(
        select(CertificateEvidence.evidence_id)
        .where(CertificateEvidence.certificate_id == certificate_id)
        .order_by(CertificateEvidence.evidence_id)
    ).all()
    return CertificateOut(
        id=row.id,
        digest=row.digest,
        certificate_json=row.certificate_json,
        evidence_ids=tuple(linked),
        recorded_at=row.recorded_at,
    )


# --- probe journal --------------------------------------------------------------------------------


def _probe_row(row: ProbeJournal) -> ProbeRow:
    return ProbeRow(
        probe_id=row.probe_id,
        key=PairKey.from_dict(row.key_json),
        key_digest=row.key_digest,
        owner=row.owner,
        pid=row.pid,
        pgid=row.pgid,
        budget_json=row.budget_json,
        state=cast(ProbeState, row.state),
        result_json=row.result_json,
        started_at=row.started_at,
        updated_at=row.updated_at,
        lease_expires_at=row.lease_expires_at,
    )


def _lease_until(now: datetime, lease_s: float) -> datetime:
    if not lease_s > 0:
        raise InputError(f"a lease must be positive, got {lease_s} s", field="lease_s")
    return to_utc(now) + timedelta(seconds=lease_s)


def journal_start(
    session: Session,
    *,
    probe_id: str,
    key: PairKey,
    owner: str,
    lease_s: float,
    pid: int,
    pgid: int,
    budget_json: dict[str, Any],
    now: datetime,
) -> None:
    """Write the probe as ``running`` with its owner and lease, before the candidate starts.

    Repeating the same start is harmless; a different probe under the same id is an ``InputError``.
    """
    until = _lease_until(now, lease_s)
    existing = session.get(ProbeJournal, probe_id)
    if existing is not None:
        same = (
            existing.state == "running"
            and existing.key_digest == key.digest()
            and (existing.owner, existing.pid, existing.pgid) == (owner, pid, pgid)
            and existing.budget_json == budget_json
        )
        if same:
            return
        raise InputError(
            f"probe id {probe_id!r} is already in the journal ({existing.state}, owner {existing.owner})",
            field="probe_id",
        )
    now = to_utc(now)
    session.add(
        ProbeJournal(
            probe_id=probe_id,
            key_digest=key.digest(),
            key_json=key.as_dict(),
            owner=owner,
            pid=pid,
            pgid=pgid,
            budget_json=budget_json,
            state="running",
            result_json=None,
            started_at=now,
            updated_at=now,
            lease_expires_at=until,
        )
    )
    session.flush()


def _journal_row(session: Session, probe_id: str) -> ProbeJournal:
    row = session.get(ProbeJournal, probe_id)
    if row is None:
        raise InputError(f"no probe {probe_id!r} in the journal", field="probe_id")
    return row


def journal_update(
    session: Session,
    probe_id: str,
    *,
    state: ProbeState,
    result_json: dict[str, Any] | None = None,
    now: datetime,
) -> None:
    """Move the probe to ``state``; ``result_json`` replaces the stored result when given."""
    if state not in PROBE_STATES:
        raise InputError(f"unknown probe state {state!r}; one of {', '.join(PROBE_STATES)}", field="state")
    row = _journal_row(session, probe_id)
    row.state = state
    row.updated_at = to_utc(now)
    if result_json is not None:
        row.result_json = result_json
    session.flush()


def journal_heartbeat(session: Session, probe_id: str, lease_s: float, now: datetime) -> None:
    """Renew a running probe's lease to ``now + lease_s``.

    Raises ``LeaseLost`` when the journal no longer says ``running`` (recovery took the probe over).
    """
    until = _lease_until(now, lease_s)
    row = _journal_row(session, probe_id)
    if row.state != "running":
        raise LeaseLost(f"probe {probe_id} is {row.state}, not running: its lease cannot be renewed")
    row.lease_expires_at = until
    row.updated_at = to_utc(now)
    session.flush()


def expired_probes(session: Session, now: datetime) -> list[ProbeRow]:
    """Running probes whose lease ended before ``now``, oldest lease first."""
    rows = session.scalars(
        select(ProbeJournal)
        .where(ProbeJournal.state == "running", ProbeJournal.lease_expires_at < to_utc(now))
        .order_by(ProbeJournal.lease_expires_at, ProbeJournal.probe_id)
    ).all()
    return [_probe_row(r) for r in rows]


def journal_get(session: Session, probe_id: str) -> ProbeRow | None:
    """The journal entry, or ``None`` when there is none."""
    row = session.get(ProbeJournal, probe_id)
    return _probe_row(row) if row is not None else None


# --- reservations ---------------------------------------------------------------------------------


def _reservation_out(row: Reservation) -> ReservationOut:
    return ReservationOut(
        id=row.id,
        device_id=row.device_id,
        holder=row.holder,
        memory_bytes=row.memory_bytes,
        mps_pct=row.mps_pct,
        mig_instance=row.mig_instance,
        created_at=row.created_at,
        expires_at=row.expires_at,
        released_at=row.released_at,
    )


def _lock_device(session: Session, device_id: str, now: datetime) -> None:
    """Serialize bookings of one device until the caller's transaction ends.

    PostgreSQL: create the device row if needed, then ``SELECT … FOR UPDATE`` it; a second admission
    for the same device waits here and then sees the first one's committed booking. SQLite: the insert
    is a write, so the transaction holds the database write lock from here on (a writing
    ``session_scope`` already took it at ``BEGIN IMMEDIATE``).
    """
    dialect = session.get_bind().dialect.name
    values = {"device_id": device_id, "first_reserved_at": now}
    if dialect == "postgresql":
        session.execute(
            pg_insert(Device).values(**values).on_conflict_do_nothing(index_elements=["device_id"])
        )
        session.execute(select(Device.device_id).where(Device.device_id == device_id).with_for_update())
    elif dialect == "sqlite":
        session.execute(
            sqlite_insert(Device).values(**values).on_conflict_do_nothing(index_elements=["device_id"])
        )
    else:  # pragma: no cover - make_engine admits only these two
        raise InputError(f"reservations are not implemented for {dialect}")


def _active_query(device_id: str, now: datetime) -> Select[Reservation]:
    return (
        select(Reservation)
        .where(
            Reservation.device_id == device_id,
            Reservation.released_at.is_(None),
            Reservation.expires_at > to_utc(now),
        )
        .order_by(Reservation.created_at, Reservation.id)
    )


def reserve(
    session: Session,
    *,
    device_id: str,
    holder: str,
    memory_bytes: int,
    mps_pct: float | None = None,
    mig_instance: str | None = None,
    capacity_memory_bytes: int,
    capacity_mps_pct: float | None = None,
    lease_s: float,
    now: datetime,
) -> ReservationOut:
    """Book ``memory_bytes`` (and an MPS share, a MIG instance) on ``device_id`` for ``lease_s``.

    Atomic against concurrent bookings of the same device: the device is locked, active bookings are
    summed, and the new one is added only if everything fits within the capacity stage 1 computed.
    Raises ``ReservationConflict`` (exit 1, a reject) when it does not fit. An MPS share needs a known
    ``capacity_mps_pct``: a share cannot be booked against an unknown capacity (``InputError``).
    """
    if memory_bytes < 0:
        raise InputError(f"must not be negative, got {memory_bytes}", field="memory_bytes")
    if capacity_memory_bytes < 0:
        raise InputError(f"must not be negative, got {capacity_memory_bytes}", field="capacity_memory_bytes")
    if mps_pct is not None and not 0 < mps_pct <= 100:
        raise InputError(f"must be within (0, 100], got {mps_pct}", field="mps_pct")
    if mps_pct is not None and capacity_mps_pct is None:
        raise InputError(
            "an MPS share cannot be booked against an unknown MPS capacity", field="capacity_mps_pct"
        )
    if not device_id or not holder:
        raise InputError(
            "device_id and holder must not be empty", field="device_id" if not device_id else "holder"
        )
    now = to_utc(now)
    until = _lease_until(now, lease_s)

    _lock_device(session, device_id, now)
    active = session.scalars(_active_query(device_id, now)).all()
    reserved_memory = sum(r.memory_bytes for r in active)
    if reserved_memory + memory_bytes > capacity_memory_bytes:
        raise ReservationConflict(
            device_id=device_id,
            resource="memory",
            requested=memory_bytes,
            reserved=reserved_memory,
            capacity=capacity_memory_bytes,
            detail=(
                f"{memory_bytes} bytes requested, {reserved_memory} of {capacity_memory_bytes} bytes already "
                f"reserved by {len(active)} active booking(s)"
            ),
        )
    if mps_pct is not None and capacity_mps_pct is not None:
        reserved_pct = math.fsum(r.mps_pct for r in active if r.mps_pct is not None)
        if reserved_pct + mps_pct > capacity_mps_pct + 1e-9:
            raise ReservationConflict(
                device_id=device_id,
                resource="mps",
                requested=mps_pct,
                reserved=reserved_pct,
                capacity=capacity_mps_pct,
                detail=f"{mps_pct:g}% requested, {reserved_pct:g}% of {capacity_mps_pct:g}% already reserved",
            )
    if mig_instance is not None:
        holders = [r.holder for r in active if r.mig_instance == mig_instance]
        if holders:
            raise ReservationConflict(
                device_id=device_id,
                resource="mig",
                requested=1,
                reserved=1,
                capacity=1,
                detail=f"MIG instance {mig_instance} is held by {holders[0]}",
            )
    row = Reservation(
        id=str(uuid.uuid4()),
        device_id=device_id,
        holder=holder,
        memory_bytes=memory_bytes,
        mps_pct=mps_pct,
        mig_instance=mig_instance,
        created_at=now,
        expires_at=until,
        released_at=None,
    )
    session.add(row)
    session.flush()
    return _reservation_out(row)


def release(session: Session, reservation_id: str, *, now: datetime | None = None) -> None:
    """Free a booking. Releasing a released booking changes nothing.

    ``now`` is recorded as the release time; without it the database's own clock is recorded (the
    booking stops counting either way, since only unreleased bookings count).
    """
    row = session.get(Reservation, reservation_id)
    if row is None:
        raise InputError(f"no reservation with id {reservation_id!r}", field="id")
    if row.released_at is not None:
        return
    session.execute(
        update(Reservation)
        .where(Reservation.id == reservation_id, Reservation.released_at.is_(None))
        .values(released_at=to_utc(now) if now is not None else func.current_timestamp()),
        execution_options={"synchronize_session": False},
    )
    session.expire(row)


def active_reservations(session: Session, device_id: str, now: datetime) -> list[ReservationOut]:
    """Bookings that count at ``now``: unreleased, lease not expired (expired leases free themselves)."""
    return [_reservation_out(r) for r in session.scalars(_active_query(device_id, now))]


def reserved_bytes(session: Session, device_id: str, now: datetime) -> int:
    """Memory booked on the device at ``now``; 0 means no active bookings (a fact, not an unknown)."""
    total = session.scalar(
        select(func.coalesce(func.sum(Reservation.memory_bytes), 0)).where(
            Reservation.device_id == device_id,
            Reservation.released_at.is_(None),
            Reservation.expires_at > to_utc(now),
        )
    )
    return int(total or 0)


def list_reservations(
    session: Session, *, now: datetime, device_id: str | None = None, include_inactive: bool = False
) -> list[ReservationOut]:
    """Bookings (active at ``now`` unless ``include_inactive``), by device then age."""
    query = select(Reservation)
    if device_id is not None:
        query = query.where(Reservation.device_id == device_id)
    if not include_inactive:
        query = query.where(Reservation.released_at.is_(None), Reservation.expires_at > to_utc(now))
    query = query.order_by(Reservation.device_id, Reservation.created_at, Reservation.id)
    return [_reservation_out(r) for r in session.scalars(query)]
