"""What estimators and their calibration read from the evidence store (read only).

- ``StoreReader``: the evidence records an estimator may use (current and stale; revoked never),
  through ``evidence_store.evidence.list_evidence``, read once per reader.
- ``recorded_outcomes``: calibration outcomes. The transfer estimator's are recomputed from the
  records alone: each measured record is predicted from the records created before it. Any other
  estimator's are the predictions admissions wrote into their certificates (``predictions``, made
  before the probe ran) set against the slowdown that probe's evidence record measured — a read-only
  query over the store's certificate tables (no public function lists certificates with their
  evidence).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from canary.estimate.base import Estimate
from canary.estimate.calibration import Outcome
from canary.estimate.transfer import NAME as TRANSFER
from canary.estimate.transfer import before, transfer_estimate

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from evidence_store.schemas import EvidenceOut

#: Sources whose slowdown was measured by a probe or in production (imports are other stores' claims).
MEASURED_SOURCES = ("canary", "production")


class StoreReader:
    """Evidence records of the store behind ``engine`` (``None``: no store, no records)."""

    def __init__(self, engine: Engine | None) -> None:
        self._engine = engine
        self._records: list[EvidenceOut] | None = None

    def records(self) -> Sequence[EvidenceOut]:
        if self._records is None:
            self._records = [] if self._engine is None else _read_records(self._engine)
        return self._records


def _read_records(engine: Engine) -> list[EvidenceOut]:
    from evidence_store.database import session_scope
    from evidence_store.evidence import list_evidence

    with session_scope(engine, read_only=True) as session:
        rows = list_evidence(session, status="current") + list_evidence(session, status="stale")
    return sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)


def _measured(rec: EvidenceOut) -> bool:
    return (rec.source in MEASURED_SOURCES and rec.resident_slowdown_pct is not None
            and rec.outcome in ("safe", "unsafe"))


#: Calibration reads at most this many of a device type's newest measured records (the recomputation
#: is quadratic in the store's size; the newest outcomes are also the most relevant).
MAX_TRANSFER_OUTCOMES = 500


def transfer_outcomes(records: Sequence[EvidenceOut], *, device_types: Sequence[str] | None = None,
                      limit: int = MAX_TRANSFER_OUTCOMES) -> list[Outcome]:
    """The transfer estimator's outcomes: each measured record (of ``device_types``, all when ``None``;
    the newest ``limit`` of each) against the transfer estimate of its key from the records created
    strictly before it."""
    out = []
    taken: dict[str, int] = {}
    for rec in sorted(records, key=lambda r: (r.created_at, r.id), reverse=True):
        device = rec.key.device_type
        if not _measured(rec) or (device_types is not None and device not in device_types):
            continue
        if taken.get(device, 0) >= limit:
            continue
        taken[device] = taken.get(device, 0) + 1
        est = transfer_estimate(rec.key, records, keep=before(rec.created_at))
        if not isinstance(est, Estimate):
            continue
        assert rec.resident_slowdown_pct is not None
        out.append(Outcome(TRANSFER, rec.key.device_type, est.lo_pct, est.hi_pct, est.point_pct,
                           float(rec.resident_slowdown_pct), rec.created_at, rec.id, group=est.group))
    return out


#: Calibration reads at most this many of the newest probe measurements that have a certificate
#: (each may carry several estimators' predictions): an admission's read stays bounded as the store
#: grows, and the newest outcomes are the most relevant.
MAX_CERTIFICATE_OUTCOMES = 2000


def certificate_outcomes(engine: Engine, *, device_types: Sequence[str] | None = None,
                         limit: int = MAX_CERTIFICATE_OUTCOMES) -> list[Outcome]:
    """Predictions recorded in certificates against the measurement of the probe that followed them
    (the certificate's linked evidence of the same pair key): of the newest ``limit`` such
    measurements on ``device_types`` (all device types when ``None``)."""
    from sqlalchemy import select

    from evidence_store.database import session_scope
    from evidence_store.models import Certificate, CertificateEvidence, Evidence

    query = (select(Certificate.certificate_json, Evidence)
             .join(CertificateEvidence, CertificateEvidence.certificate_id == Certificate.id)
             .join(Evidence, Evidence.id == CertificateEvidence.evidence_id)
             .where(Evidence.source == "canary", Evidence.resident_slowdown_pct.is_not(None),
                    Evidence.outcome.in_(("safe", "unsafe")), Evidence.status != "revoked"))
    if device_types is not None:
        query = query.where(Evidence.device_type.in_(list(device_types)))
    query = query.order_by(Evidence.created_at.desc(), Evidence.id.desc()).limit(limit)
    out: list[Outcome] = []
    with session_scope(engine, read_only=True) as session:
        for cert, ev in session.execute(query):
            out.extend(_from_certificate(cert, ev.key_digest, ev.device_type, float(ev.resident_slowdown_pct),
                                         ev.created_at, ev.id))
    return out


def _from_certificate(cert: Any, key_digest: str, device_type: str, measured: float, at: dt.datetime,
                      evidence_id: str) -> list[Outcome]:
    if not isinstance(cert, dict):
        return []
    out = []
    for p in cert.get("predictions") or ():
        if not isinstance(p, dict) or p.get("key_digest") != key_digest or p.get("used_as") == "decision":
            continue  # a prediction that decided had no probe after it: nothing measured it
        try:
            out.append(Outcome(str(p["estimator"]), device_type, float(p["lo_pct"]), float(p["hi_pct"]),
                               float(p["point_pct"]), measured, at, evidence_id, group=str(p.get("group") or "")))
        except (KeyError, TypeError, ValueError):
            continue  # a certificate written by another version: not an outcome we can read
    return out


def recorded_outcomes(engine: Engine | None, reader: StoreReader, *,
                      device_types: Sequence[str] | None = None) -> list[Outcome]:
    """The calibration outcomes the store holds (of ``device_types``, all when ``None``; empty without
    a store)."""
    if engine is None:
        return []
    outcomes = transfer_outcomes(reader.records(), device_types=device_types)
    outcomes += [o for o in certificate_outcomes(engine, device_types=device_types) if o.estimator != TRANSFER]
    return outcomes
