"""Repository behaviour on both backends: idempotent writes, lookup pooling rules, the lifecycle
(expire, revoke, driver change, supersession, history), certificates, the probe journal, reservations."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine

from canary._model import PairKey
from canary.certificate import Certificate
from canary.errors import InputError
from evidence_store.certificates import certificate_digest, get_certificate, record_certificate
from evidence_store.database import session_scope
from evidence_store.errors import LeaseLost, ReservationConflict
from evidence_store.evidence import (
    expire,
    get_evidence,
    history,
    list_evidence,
    mark_stale,
    record_evidence,
    revoke,
)
from evidence_store.journal import (
    expired_probes,
    journal_get,
    journal_heartbeat,
    journal_start,
    journal_update,
)
from evidence_store.lookup import lookup
from evidence_store.models import Certificate as CertificateRow
from evidence_store.reservations import active_reservations, release, reserve, reserved_bytes
from evidence_store.schemas import EvidenceIn, EvidenceOut
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence
from tests.support.paths import EXAMPLES

GIB = 2**30
HOUR = timedelta(hours=1)
OTHER_KEY = PairKey(**{**KEY.as_dict(), "candidate_version": "sha256:aaaa"})


def _record(engine: Engine, *records: EvidenceIn) -> list[EvidenceOut]:
    with session_scope(engine) as session:
        return [record_evidence(session, r) for r in records]


# --- writes ---------------------------------------------------------------------------------------


def test_record_round_trips_every_field_in_utc(engine: Engine) -> None:
    given = evidence("p1", created_at=datetime(2026, 11, 30, 8, 0, tzinfo=timezone(timedelta(hours=2))))
    (stored,) = _record(engine, given)
    with session_scope(engine, read_only=True) as session:
        again = get_evidence(session, stored.id)
    assert again is not None
    assert again.as_input() == given
    assert again.created_at.tzinfo is not None and again.created_at.utcoffset() == timedelta(0)
    assert again.created_at == datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    assert again.status == "current" and again.key_digest == KEY.digest()
    assert again.superseded_by is None


def test_retried_write_is_idempotent_on_probe_id(engine: Engine) -> None:
    (first,) = _record(engine, evidence("p1"))
    (second,) = _record(engine, evidence("p1"))
    assert second.id == first.id
    with session_scope(engine, read_only=True) as session:
        assert len(list_evidence(session)) == 1


def test_same_probe_id_with_other_content_is_refused(engine: Engine) -> None:
    _record(engine, evidence("p1", outcome="safe"))
    with pytest.raises(InputError, match="already recorded") as info:
        _record(engine, evidence("p1", outcome="unsafe"))
    assert info.value.field == "outcome"


def test_naive_or_inconsistent_records_are_rejected() -> None:
    good = evidence("p1").model_dump()
    with pytest.raises(ValidationError, match="timezone"):
        EvidenceIn.model_validate({**good, "created_at": datetime(2026, 11, 30, 6, 0)})
    with pytest.raises(ValidationError, match="expires_at"):
        EvidenceIn.model_validate({**good, "expires_at": good["created_at"]})
    with pytest.raises(ValidationError, match="resident_slowdown_low_pct <= resident_slowdown_pct"):
        EvidenceIn.model_validate({**good, "resident_slowdown_pct": 50.0})
    with pytest.raises(ValidationError, match="confidence"):
        EvidenceIn.model_validate({**good, "confidence": 1.5})


def test_newer_evidence_supersedes_and_history_is_kept(engine: Engine) -> None:
    old, _, _ = _record(
        engine,
        evidence("p-old", created_at=T0),
        evidence("p-new", created_at=T0 + 2 * HOUR),
        evidence("p-mid", created_at=T0 + HOUR),  # arrives late: the chain still follows time
    )
    with session_scope(engine, read_only=True) as session:
        chain = history(session, old.id)
    assert [r.probe_id for r in chain] == ["p-new", "p-mid", "p-old"]
    assert chain[2].superseded_by == chain[1].id
    assert chain[1].superseded_by == chain[0].id
    assert chain[0].superseded_by is None


# --- lookup ---------------------------------------------------------------------------------------

NOW = T0 + 2 * HOUR


def _lookup(engine: Engine, **overrides: object) -> object:
    options: dict[str, object] = {
        "driver_version": "550.54.15",
        "now": NOW,
        "ttl_s": 86400.0,
        "allow_cross_driver": False,
    }
    options.update(overrides)
    with session_scope(engine, read_only=True) as session:
        return lookup(session, KEY, **options)  # type: ignore[arg-type]


LOOKUP_CASES: list[tuple[str, list[EvidenceIn], dict[str, object], str | None, str]] = [
    ("nothing recorded", [], {}, None, "no current evidence"),
    ("one safe probe", [evidence("a")], {}, "safe", "found this pair safe"),
    ("other pair only", [evidence("a", key=OTHER_KEY)], {}, None, "no current evidence"),
    ("expired record", [evidence("a", ttl=HOUR)], {}, None, "no current evidence"),
    ("older than policy TTL", [evidence("a")], {"ttl_s": 3600.0}, None, "no current evidence"),
    ("inconclusive is not evidence", [evidence("a", outcome="inconclusive")], {}, None, "inconclusive"),
    ("aborted is not evidence", [evidence("a", outcome="aborted")], {}, None, "not evidence"),
    (
        "canary unsafe beats canary safe",
        [evidence("a"), evidence("b", outcome="unsafe", created_at=T0 - HOUR, confidence=0.9)],
        {},
        "unsafe",
        "1 of 2",
    ),
    (
        "production violation outweighs earlier passes",
        [
            evidence("a", created_at=T0 - HOUR),
            evidence("b", created_at=T0 - 2 * HOUR),
            evidence(
                "v",
                source="production",
                outcome="unsafe",
                created_at=T0,
                confidence=None,
                slowdown=None,
                interval=None,
            ),
        ],
        {},
        "unsafe",
        "outweighs 2 earlier",
    ),
    (
        "other driver, not allowed",
        [evidence("a", driver_version="535.0")],
        {},
        None,
        "only under driver(s) 535.0",
    ),
    (
        "unknown current driver, not allowed",
        [evidence("a")],
        {"driver_version": None},
        None,
        "unknown current driver",
    ),
    (
        "other driver, allowed",
        [evidence("a", driver_version="535.0")],
        {"allow_cross_driver": True},
        "safe",
        "scaled by 0.5",
    ),
]


@pytest.mark.parametrize(
    ("records", "options", "outcome", "reason"),
    [pytest.param(r, o, out, why, id=name) for name, r, o, out, why in LOOKUP_CASES],
)
def test_lookup_rules(
    engine: Engine, records: list[EvidenceIn], options: dict[str, object], outcome: str | None, reason: str
) -> None:
    _record(engine, *records)
    result = _lookup(engine, **options)
    assert result.outcome == outcome  # type: ignore[attr-defined]
    assert reason in result.reason  # type: ignore[attr-defined]
    if outcome is None:
        assert result.evidence_ids == () and result.confidence is None  # type: ignore[attr-defined]


def test_lookup_pools_numbers(engine: Engine) -> None:
    _record(
        engine,
        evidence("a", created_at=T0, confidence=0.95, slowdown=2.0, interval=(1.0, 3.0), samples=100),
        evidence(
            "b", created_at=T0 + HOUR, confidence=0.99, slowdown=5.0, interval=(4.0, 8.0), samples=300
        ),
    )
    result = _lookup(engine)
    assert result.outcome == "safe"  # type: ignore[attr-defined]
    assert result.samples == 400  # type: ignore[attr-defined]
    assert result.confidence == pytest.approx(0.99)  # type: ignore[attr-defined]
    assert result.slowdown_estimate_pct == pytest.approx((2.0 * 100 + 5.0 * 300) / 400)  # type: ignore[attr-defined]
    assert result.slowdown_interval_pct == (1.0, 8.0)  # type: ignore[attr-defined]
    assert result.evidence_timestamp == T0 + HOUR  # type: ignore[attr-defined]
    assert result.sources == ("canary",)  # type: ignore[attr-defined]
    assert len(result.evidence_ids) == 2 and not result.cross_driver  # type: ignore[attr-defined]


def test_lookup_prefers_same_driver_and_scales_cross_driver_confidence(engine: Engine) -> None:
    _record(engine, evidence("old-driver", driver_version="535.0", confidence=0.9))
    crossed = _lookup(engine, allow_cross_driver=True, cross_driver_confidence_factor=0.5)
    assert crossed.cross_driver and crossed.confidence == pytest.approx(0.45)  # type: ignore[attr-defined]
    _record(engine, evidence("same-driver", confidence=0.8))
    same = _lookup(engine, allow_cross_driver=True)
    assert not same.cross_driver and same.confidence == pytest.approx(0.8)  # type: ignore[attr-defined]


def test_unknown_confidence_stays_unknown(engine: Engine) -> None:
    _record(engine, evidence("a", confidence=None, slowdown=None, interval=None))
    result = _lookup(engine)
    assert result.outcome == "safe"  # type: ignore[attr-defined]
    assert result.confidence is None and result.slowdown_estimate_pct is None  # type: ignore[attr-defined]
    assert result.slowdown_interval_pct is None  # type: ignore[attr-defined]


def test_lookup_refuses_bad_ttl(engine: Engine) -> None:
    with pytest.raises(InputError, match="TTL"):
        _lookup(engine, ttl_s=0.0)


# --- lifecycle ------------------------------------------------------------------------------------


def test_expire_revoke_and_driver_change_keep_history(engine: Engine) -> None:
    a, _, _, d = _record(
        engine,
        evidence("a", created_at=T0 - 3 * HOUR),
        evidence("b", created_at=T0 - 2 * HOUR, driver_version="535.0"),
        evidence("c", created_at=T0 - HOUR, driver_version=None),
        evidence("d", key=OTHER_KEY, created_at=T0),
    )
    with session_scope(engine) as session:
        assert mark_stale(session, driver_not="550.54.15", device_type="a100-80gb") == 0
        assert mark_stale(session, driver_not="550.54.15") == 2  # b (other driver) and c (unknown)
        assert expire(session, before=T0 - 150 * timedelta(minutes=1)) == 1  # a only
        revoke(session, d.id, "harness bug in that run")
        revoke(session, d.id, "a second reason is ignored")
        assert expire(session, key=OTHER_KEY) == 0  # revoked is not current
    with session_scope(engine, read_only=True) as session:
        statuses = {
            r.probe_id: (r.status, r.stale_reason or r.revoked_reason) for r in list_evidence(session)
        }
        assert len(history(session, a.id)) == 3
    assert statuses["a"][0] == "stale" and "expired" in str(statuses["a"][1])
    assert statuses["b"] == ("stale", "driver changed to 550.54.15")
    assert statuses["c"][0] == "stale"
    assert statuses["d"] == ("revoked", "harness bug in that run")
    assert _lookup(engine).outcome is None  # type: ignore[attr-defined]
    with session_scope(engine) as session, pytest.raises(InputError, match="no evidence"):
        revoke(session, "no-such-id", "x")


def test_list_filters(engine: Engine) -> None:
    _record(engine, evidence("a"), evidence("b", key=OTHER_KEY))
    with session_scope(engine, read_only=True) as session:
        pair = f"{KEY.resident_version}:{KEY.candidate_version}"  # both versions contain ':'
        assert [r.probe_id for r in list_evidence(session, pair=pair)] == ["a"]
        assert len(list_evidence(session, device_type="h100-sxm")) == 2
        assert list_evidence(session, device_type="mi300x") == []
        assert list_evidence(session, status="stale") == []


# --- certificates ---------------------------------------------------------------------------------


def test_certificates_link_to_existing_evidence(engine: Engine) -> None:
    a, b = _record(engine, evidence("a"), evidence("b"))
    cert = {"verdict": "admit", "confidence": 0.95, "evidence": {"ids": [a.id, b.id]}}
    with session_scope(engine) as session:
        cert_id = record_certificate(session, cert, [a.id, b.id, a.id], recorded_at=NOW)
    with session_scope(engine, read_only=True) as session:
        stored = get_certificate(session, cert_id)
        assert get_certificate(session, "missing") is None
    assert stored is not None
    assert stored.certificate_json == cert
    assert stored.evidence_ids == tuple(sorted([a.id, b.id]))
    assert stored.recorded_at == NOW
    with session_scope(engine) as session, pytest.raises(InputError, match="no evidence with id"):
        record_certificate(session, cert, ["nope"])
    with session_scope(engine) as session, pytest.raises(InputError, match="not plain JSON"):
        record_certificate(session, {"when": datetime.now(UTC)}, [])


def _admission_certificate() -> Certificate:
    """A certificate as an admission makes it (a real request, stage 1, ``make_certificate``)."""
    from canary.admission import load_request
    from canary.admission.decisions import Decision, hard_fit, make_certificate

    req = load_request(str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"),
                       str(EXAMPLES / "profiles" / "embedding-service.yaml"))
    return make_certificate(req, hard_fit(req), Decision("admit", "fits", "hard-fit", confidence=1.0), NOW)


def test_a_certificate_is_stored_as_its_model_dump_and_reads_back(engine: Engine) -> None:
    cert = _admission_certificate()
    # The form certificates were stored in before (indented JSON text read back, then canonical text read
    # back): a row written that way keeps its digest and reads as the same certificate.
    before = json.loads(json.dumps(json.loads(cert.to_json()), sort_keys=True, separators=(",", ":")))
    old_digest = hashlib.sha256(json.dumps(before, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    with session_scope(engine) as session:
        session.add(CertificateRow(id="stored-before", digest=old_digest, certificate_json=before, recorded_at=NOW))
        cert_id = record_certificate(session, cert, [], recorded_at=NOW)
    with session_scope(engine, read_only=True) as session:
        new, old = get_certificate(session, cert_id), get_certificate(session, "stored-before")
    assert new is not None and old is not None
    assert new.certificate_json == cert.model_dump(mode="json") == old.certificate_json
    assert new.digest == old.digest == certificate_digest(old.certificate_json)
    for stored in (new, old):
        assert Certificate.model_validate_json(json.dumps(stored.certificate_json)) == cert


# --- probe journal --------------------------------------------------------------------------------


def test_journal_lease_lifecycle(engine: Engine) -> None:
    def start() -> None:
        with session_scope(engine) as session:
            journal_start(
                session,
                probe_id="probe-1",
                key=KEY,
                owner="node-7",
                lease_s=30,
                pid=4242,
                pgid=4242,
                budget_json={"max_probe_time_s": 120},
                now=T0,
            )

    start()
    start()  # a retried start is harmless
    with session_scope(engine) as session:
        assert expired_probes(session, T0 + timedelta(seconds=29)) == []
        journal_heartbeat(session, "probe-1", 30, T0 + timedelta(seconds=20))
        assert expired_probes(session, T0 + timedelta(seconds=45)) == []
        expired = expired_probes(session, T0 + timedelta(seconds=51))
        assert [p.probe_id for p in expired] == ["probe-1"]
        assert expired[0].key == KEY and expired[0].pid == 4242
        journal_update(
            session,
            "probe-1",
            state="aborted",
            result_json={"reason": "lease expired"},
            now=T0 + timedelta(seconds=60),
        )
        assert expired_probes(session, T0 + timedelta(days=1)) == []
    with session_scope(engine, read_only=True) as session:
        row = journal_get(session, "probe-1")
        assert journal_get(session, "probe-2") is None
    assert row is not None and row.state == "aborted" and row.result_json == {"reason": "lease expired"}
    with session_scope(engine) as session, pytest.raises(LeaseLost, match="aborted"):
        journal_heartbeat(session, "probe-1", 30, T0 + timedelta(seconds=61))
    with session_scope(engine) as session, pytest.raises(InputError, match="already in the journal"):
        journal_start(
            session,
            probe_id="probe-1",
            key=KEY,
            owner="node-8",
            lease_s=30,
            pid=1,
            pgid=1,
            budget_json={},
            now=T0,
        )


# --- reservations ---------------------------------------------------------------------------------


def _reserve(engine: Engine, memory_gib: float, *, now: datetime = T0, **extra: object) -> str:
    options: dict[str, object] = {
        "device_id": "GPU-1b2c3d4e",
        "holder": "admit-1",
        "memory_bytes": int(memory_gib * GIB),
        "capacity_memory_bytes": 40 * GIB,
        "lease_s": 600.0,
        "now": now,
    }
    options.update(extra)
    with session_scope(engine) as session:
        return reserve(session, **options).id  # type: ignore[arg-type]


def test_reservations_book_release_and_expire(engine: Engine) -> None:
    first = _reserve(engine, 20)
    _reserve(engine, 20, now=T0 + timedelta(seconds=300), lease_s=60.0)
    with pytest.raises(ReservationConflict, match="no room") as info:
        _reserve(engine, 1, now=T0 + timedelta(seconds=301))
    assert info.value.exit_code == 1 and info.value.resource == "memory"
    assert info.value.reserved == 40 * GIB
    # The second booking's lease ends at T0+360 s: it frees itself.
    _reserve(engine, 20, now=T0 + timedelta(seconds=361))
    with session_scope(engine) as session:
        assert reserved_bytes(session, "GPU-1b2c3d4e", T0 + timedelta(seconds=362)) == 40 * GIB
        release(session, first)
        release(session, first)  # releasing twice changes nothing
        assert reserved_bytes(session, "GPU-1b2c3d4e", T0 + timedelta(seconds=362)) == 20 * GIB
        assert reserved_bytes(session, "other-gpu", T0) == 0
        assert len(active_reservations(session, "GPU-1b2c3d4e", T0 + timedelta(seconds=362))) == 1
        with pytest.raises(InputError, match="no reservation"):
            release(session, "nope")


def test_mps_share_and_mig_instance_are_booked(engine: Engine) -> None:
    _reserve(engine, 1, mps_pct=60.0, capacity_mps_pct=100.0, mig_instance="1g.10gb:0")
    with pytest.raises(ReservationConflict) as mps:
        _reserve(engine, 1, mps_pct=50.0, capacity_mps_pct=100.0)
    assert mps.value.resource == "mps"
    with pytest.raises(ReservationConflict) as mig:
        _reserve(engine, 1, mig_instance="1g.10gb:0")
    assert mig.value.resource == "mig"
    _reserve(engine, 1, mps_pct=40.0, capacity_mps_pct=100.0, mig_instance="1g.10gb:1")
    with pytest.raises(InputError, match="unknown MPS capacity"):
        _reserve(engine, 1, mps_pct=10.0)


def test_concurrent_writers_of_one_probe_id_store_it_once(engine: Engine, backend: str) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite writers are serialized at BEGIN IMMEDIATE; the race needs concurrent writers")
    import threading

    first_inserted = threading.Event()
    release_first = threading.Event()
    results: dict[str, str] = {}

    def first() -> None:
        with session_scope(engine) as session:
            results["first"] = record_evidence(session, evidence("p-race")).id
            first_inserted.set()
            release_first.wait(10)  # hold the uncommitted row while the second writer arrives

    def second() -> None:
        first_inserted.wait(10)
        with session_scope(engine) as session:
            # Blocks on the unique index until the first commits, then takes the savepoint path.
            results["second"] = record_evidence(session, evidence("p-race")).id

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_inserted.wait(10)
    import time

    time.sleep(0.3)
    release_first.set()
    for t in threads:
        t.join(20)
    assert results["first"] == results["second"]
    with session_scope(engine, read_only=True) as session:
        assert [r.probe_id for r in list_evidence(session)] == ["p-race"]
