"""The regime of an admitted pair, for ``POST /v1/feedback`` without one: production reports a violation
for a pair canary admitted, so the evidence goes under the regime that admission decided, read from the
stored certificates of admissions of this candidate beside this resident on this device."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from canary.admission.request import Request, pair_key
from canary.snapshot import Resident


@dataclass(frozen=True)
class Admitted:
    """One regime the pair was admitted under: the newest such certificate, and whether a booking it
    made is still held."""

    regime: str
    certificate_id: str
    held: bool


def _names_pair(cert: dict[str, Any], req: Request, resident: Resident) -> bool:
    device = cert.get("device") or {}
    residents = cert.get("residents") or []
    return (cert.get("verdict") == "admit" and device.get("uuid") == req.snapshot.uuid
            and cert.get("workload_name") == req.candidate.name and cert.get("workload_version") == req.candidate.version
            and any(isinstance(r, dict) and r.get("name") == resident.name for r in residents))


def admitted_regimes(session: Session, req: Request, resident: Resident, now: dt.datetime) -> list[Admitted]:
    """The regimes stored admissions of (``resident``, the candidate) on this device were decided under,
    those with a booking still held first; empty when none is stored (an admission with
    ``reserve: false`` stores no certificate). An admission beside a resident has evidence of the pair,
    so its certificate is found through that evidence (indexed), whatever the regime."""
    from evidence_store.models import Certificate, CertificateEvidence, Evidence, Reservation

    key = pair_key(req, resident)
    if key is None:
        return []
    evidence = select(Evidence.id).where(
        Evidence.resident_version == key.resident_version, Evidence.resident_shape_family == key.resident_shape_family,
        Evidence.candidate_version == key.candidate_version,
        Evidence.candidate_shape_family == key.candidate_shape_family, Evidence.device_type == key.device_type)
    certificate_ids = select(CertificateEvidence.certificate_id).where(CertificateEvidence.evidence_id.in_(evidence))
    certificates = session.execute(select(Certificate.id, Certificate.certificate_json)
                                   .where(Certificate.id.in_(certificate_ids))).all()
    found: dict[str, Admitted] = {}
    for cert_id, cert in certificates:
        if not isinstance(cert, dict) or not _names_pair(cert, req, resident) or not cert.get("regime"):
            continue
        booked = [b.get("id") for b in cert.get("resource_reservations") or [] if isinstance(b, dict)]
        held = bool(booked) and session.scalar(
            select(Reservation.id).where(Reservation.id.in_(booked), Reservation.released_at.is_(None),
                                         Reservation.expires_at > now).limit(1)) is not None
        regime = str(cert["regime"])
        if regime not in found or (held and not found[regime].held):
            found[regime] = Admitted(regime=regime, certificate_id=str(cert_id), held=held)
    admitted = sorted(found.values(), key=lambda a: (not a.held, a.regime))
    if any(a.held for a in admitted):
        return [a for a in admitted if a.held]
    return admitted


def several_regimes(resident_name: str, req: Request, admitted: list[Admitted]) -> str:
    """Why feedback without a regime cannot be placed: the pair was admitted under several (the words
    of ``POST /v1/feedback`` and of ``canary feedback``; each adds where the regime is given)."""
    held = " with bookings held" if admitted[0].held else ""
    return (f"the pair ({resident_name}, {req.candidate.name}@{req.candidate.version}) was admitted on this device "
            f"under {len(admitted)} regimes{held}: "
            f"{', '.join(f'{a.regime} (certificate {a.certificate_id[:8]})' for a in admitted)}; say which one the "
            "violation was seen under")
