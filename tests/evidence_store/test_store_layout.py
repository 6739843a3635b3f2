"""The store's concepts written once (``evidence_store.conditions``), and its old module names still
naming the same objects as their new homes."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from sqlalchemy import Engine, bindparam, select

from evidence_store.conditions import active_booking, usable_evidence
from evidence_store.database import session_scope
from evidence_store.evidence import record_evidence, revoke
from evidence_store.models import Evidence, Reservation
from evidence_store.reservations import release, reserve
from evidence_store.schemas import ReservationOut
from tests.evidence_store.evidence_store_testkit import T0, evidence

GIB = 2**30


def test_active_booking_in_sql_is_active_at_in_python(engine: Engine) -> None:
    """Released, expired, expiring exactly now and live bookings: the SQL condition and
    ``ReservationOut.active_at`` say the same, at several instants."""
    with session_scope(engine) as session:
        for holder, lease_s in (("short", 60.0), ("long", 3600.0), ("gone", 3600.0)):
            booking = reserve(session, device_id="gpu-0", holder=holder, memory_bytes=GIB,
                              capacity_memory_bytes=80 * GIB, lease_s=lease_s, now=T0)
            if holder == "gone":
                release(session, booking.id, now=T0 + timedelta(seconds=1))
    for at in (T0, T0 + timedelta(seconds=30), T0 + timedelta(seconds=60), T0 + timedelta(hours=2)):
        with session_scope(engine, read_only=True) as session:
            rows = [ReservationOut.model_validate(r) for r in session.scalars(select(Reservation))]
            in_sql = set(session.scalars(select(Reservation.holder).where(active_booking(at))))
            bound = set(session.scalars(
                select(Reservation.holder).where(active_booking(bindparam("now", type_=Reservation.expires_at.type))),
                {"now": at}))
        in_python = {r.holder for r in rows if r.active_at(at)}
        assert in_sql == bound == in_python, at
    assert in_python == set()  # two hours on: every lease has run out


def test_usable_evidence_is_current_unexpired_and_within_the_ttl(engine: Engine) -> None:
    with session_scope(engine) as session:
        old = record_evidence(session, evidence("old", created_at=T0 - timedelta(days=10), ttl=timedelta(days=30)))
        fresh = record_evidence(session, evidence("fresh", created_at=T0))
        revoked = record_evidence(session, evidence("revoked", created_at=T0))
        lapsing = record_evidence(session, evidence("lapsing", created_at=T0, ttl=timedelta(hours=1)))
        revoke(session, revoked.id, "bad probe")
    now = T0 + timedelta(hours=1)  # "lapsing" expires exactly now: no longer usable
    with session_scope(engine, read_only=True) as session:
        usable = set(session.scalars(select(Evidence.id).where(usable_evidence(now, now - timedelta(days=7)))))
        wider = set(session.scalars(select(Evidence.id).where(usable_evidence(now, now - timedelta(days=20)))))
    assert usable == {fresh.id}
    assert wider == {fresh.id, old.id}
    assert lapsing.id not in wider and revoked.id not in wider


@pytest.mark.parametrize(("old", "new", "names"), [
    pytest.param("evidence_store.keys", "canary._model", ["PairKey", "KEY_FIELDS"], id="keys"),
    pytest.param("evidence_store.engine", "evidence_store.database",
                 ["make_engine", "session_scope", "run_transaction", "RetryPolicy", "redact"], id="engine-database"),
    pytest.param("evidence_store.engine", "evidence_store.migrate",
                 ["upgrade", "downgrade", "current", "check_schema", "open_store", "SCHEMA_HEAD"], id="engine-migrate"),
    pytest.param("evidence_store.fleet", "evidence_store.published", ["publish", "DeviceClaimed"], id="fleet-published"),
    pytest.param("evidence_store.fleet", "evidence_store.admission_log",
                 ["log_admissions", "hot_pairs", "PRUNE_BATCH"], id="fleet-admission-log"),
    pytest.param("evidence_store.fleet", "evidence_store.drift", ["record_drift", "drift_report"], id="fleet-drift"),
    pytest.param("evidence_store.fleet", "evidence_store.service.probe_queue",
                 ["submit_and_notify", "abort_orphaned_queued"], id="fleet-notify"),
    pytest.param("evidence_store.tokens", "evidence_store.service.tokens", ["create", "verify"], id="tokens"),
    pytest.param("evidence_store.registry", "evidence_store.service.registry", ["put", "get"], id="registry"),
    pytest.param("evidence_store.serve_models", "evidence_store.service.models", ["ServeProbe", "ApiToken"],
                 id="serve-models"),
    pytest.param("evidence_store.cli_support", "evidence_store.export_file", ["read_export", "write_export"],
                 id="export-file"),
])
def test_each_name_has_one_home_and_the_old_module_is_gone(old: str, new: str, names: list[str]) -> None:
    """One import path per name: the modules the store was split out of no longer exist (a re-export
    left behind lets a patch of the old name miss the code that runs), and the names are in their
    aggregate's module."""
    home = importlib.import_module(new)
    for name in names:
        assert hasattr(home, name), f"{new} lacks {name}"
    if old == "evidence_store.cli_support":
        still = [n for n in names if hasattr(importlib.import_module(old), n)]
        assert not still, f"{old} still re-exports {still}"
    else:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_the_store_journal_takes_the_key_itself_or_its_parts(engine: Engine) -> None:
    """The probe's journal may hand over the ``PairKey`` (a models type now) or its six parts by name;
    either way the row holds the same key, and a malformed one is refused before anything is written."""
    from canary.errors import InputError
    from evidence_store.journal import StoreJournal, journal_get
    from tests.evidence_store.evidence_store_testkit import KEY

    journal = StoreJournal(engine)
    journal.start("as-key", KEY, owner="t", lease_s=30, pid=1, pgid=1, budget_json={})
    journal.start("as-parts", KEY.as_dict(), owner="t", lease_s=30, pid=1, pgid=1, budget_json={})
    with pytest.raises(InputError, match="regime"):
        journal.start("bad", {**KEY.as_dict(), "regime": ""}, owner="t", lease_s=30, pid=1, pgid=1, budget_json={})
    with session_scope(engine, read_only=True) as session:
        rows = [journal_get(session, probe_id) for probe_id in ("as-key", "as-parts", "bad")]
    assert rows[0] is not None and rows[1] is not None and rows[2] is None
    assert rows[0].key == rows[1].key == KEY and rows[0].key_digest == rows[1].key_digest == KEY.digest()
