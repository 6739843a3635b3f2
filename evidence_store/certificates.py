"""Certificates in the store: each stored with its digest and linked to the evidence behind it.

A certificate is stored as its model's ``model_dump(mode="json")`` (``certificate_document``): the JSON
value the model writes, held as it is; its digest is the sha256 of that value's canonical text (sorted
keys, no whitespace), so a certificate's digest does not depend on how it reached the store.

Functions take the caller's ``Session`` and never commit; none reads the clock.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.models import Certificate, CertificateEvidence, Evidence
from evidence_store.schemas import CertificateOut, to_utc


def certificate_document(certificate: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON value a certificate is stored as: a model's ``model_dump(mode="json")``; a mapping (a
    certificate already in its JSON form) as it is."""
    return certificate.model_dump(mode="json") if isinstance(certificate, BaseModel) else dict(certificate)


def certificate_digest(document: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical text of a certificate's JSON value (sorted keys, no whitespace);
    ``InputError`` when the value is not plain JSON (a NaN, an object JSON cannot hold)."""
    try:
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InputError(f"certificate is not plain JSON: {err}", field="certificate_json") from err
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def record_certificate(
    session: Session,
    certificate: BaseModel | Mapping[str, Any],
    evidence_ids: list[str],
    *,
    recorded_at: datetime | None = None,
) -> str:
    """Store a certificate (a ``canary.certificate.Certificate``, or its JSON value) and link it to the
    evidence behind it; returns the certificate id.

    Every evidence id must exist (``InputError`` naming the missing ones). ``recorded_at`` is stored as
    given (``None``: not known to the store; the certificate's own fields carry its times).
    """
    document = certificate_document(certificate)
    digest = certificate_digest(document)
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
            digest=digest,
            certificate_json=document,
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
