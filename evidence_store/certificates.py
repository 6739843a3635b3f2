"""Certificates in the store: each stored with its digest and linked to the evidence behind it.

Functions take the caller's ``Session`` and never commit; none reads the clock.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.models import Certificate, CertificateEvidence, Evidence
from evidence_store.schemas import CertificateOut, to_utc


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
