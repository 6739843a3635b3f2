"""A certificate decided from stored evidence is valid no longer than that evidence: its expiry is the
first instant some pair's evidence runs out — a record's own ``expires_at`` where it comes first (an
import, or a record made under a policy with a shorter TTL), else its creation plus the policy's TTL
— and evidence judged against another bound does not decide. End to end on a real SQLite store."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from canary.admission import admit, load_request, pair_key
from evidence_store.database import session_scope
from evidence_store.evidence import record_evidence
from evidence_store.migrate import open_store
from evidence_store.schemas import EvidenceIn
from tests.support.paths import EXAMPLES
from tests.support.stores import migrated_sqlite

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def _store(tmp_path: Path, *, outcome: str, slowdown: float, interval: tuple[float, float],
           created: dt.datetime, expires: dt.datetime, source: str = "canary") -> str:
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    req = load_request(SNAP, EMB)
    key = pair_key(req, req.snapshot.residents[0])
    assert key is not None
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            record_evidence(session, EvidenceIn(
                probe_id="p-1", key=key, source=source, outcome=outcome,  # type: ignore[arg-type]
                driver_version=req.snapshot.driver_version, resident_slowdown_pct=slowdown,
                resident_slowdown_low_pct=interval[0], resident_slowdown_high_pct=interval[1], samples=200,
                exposure_used=50, time_used_s=60.0, confidence=0.95, created_at=created, expires_at=expires))
    finally:
        engine.dispose()
    return url


def test_an_admission_from_evidence_expires_with_that_evidence(tmp_path: Path) -> None:
    """Safe evidence made an hour ago that expires in an hour: the default policy's TTL (7 days) would
    say 'valid for 7 days', but the lookup stops using the record in an hour, and so does the certificate."""
    created, expires = NOW - dt.timedelta(hours=1), NOW + dt.timedelta(hours=1)
    url = _store(tmp_path, outcome="safe", slowdown=3.0, interval=(1.0, 5.0), created=created, expires=expires)
    cert = admit(load_request(SNAP, EMB), db_url=url, probe=False, now=lambda: NOW)
    assert cert.verdict == "admit" and cert.decided_by == "cache"
    assert cert.expiry_or_revalidation_trigger.expires_at == expires


def test_a_rejection_from_evidence_expires_with_that_evidence(tmp_path: Path) -> None:
    """An unsafe record (created two hours ago, expiring in three) rejects until it runs out, not for a
    new TTL counted from the moment of the decision."""
    created, expires = NOW - dt.timedelta(hours=2), NOW + dt.timedelta(hours=3)
    url = _store(tmp_path, outcome="unsafe", slowdown=40.0, interval=(30.0, 50.0), created=created, expires=expires)
    cert = admit(load_request(SNAP, EMB), db_url=url, probe=False, now=lambda: NOW)
    assert cert.verdict == "reject" and cert.decided_by == "cache"
    assert cert.expiry_or_revalidation_trigger.expires_at == expires


def test_an_imported_safe_record_over_the_residents_bound_does_not_admit(tmp_path: Path) -> None:
    """An import says safe at 20% (it was judged against a 25% bound elsewhere); the resident, a
    training workload, is bounded at 15% by the default policy: the record decides nothing, and the
    answer is unknown with the pair left to probe."""
    url = _store(tmp_path, outcome="safe", slowdown=20.0, interval=(18.0, 22.0), source="import",
                 created=NOW - dt.timedelta(hours=1), expires=NOW + dt.timedelta(days=2))
    cert = admit(load_request(SNAP, EMB), db_url=url, probe=False, now=lambda: NOW)
    assert cert.verdict == "unknown"
    assert "upper end 22.00% is over the resident's bound of 15% today" in cert.reason
