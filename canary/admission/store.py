"""Admission's access to the evidence store: where it is, whether it exists, reading evidence and
reservations for a decision, opening it for writing, and the evidence rows admission writes.

When the default SQLite store does not exist yet, ``EvidenceAccess`` answers "no evidence yet"
without importing SQLAlchemy (which keeps ``gpu-fit`` fast); a store that exists but cannot be read
is an operational error (exit 4), never an empty answer. SQLAlchemy and the store's modules are
imported only when a store is really opened.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from canary.admission.decisions import (
    Decision,
    PairEvidence,
    ProbeRun,
    Settled,
    hard_fit,
    hard_fit_decision,
    reservation_plan,
    settle,
)
from canary.admission.request import QueuedDevice, QueuedRequest, Request, pair_key, with_mig_bookings
from canary.certificate import GpuInstancePlacement, ReservationRef
from canary.errors import InputError, note
from canary.hardfit import MigBooking
from canary.regime import parse_mig_instance
from canary.snapshot import Resident

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    from canary._model import PairKey
    from canary.catalog import DeviceSpec
    from canary.certificate import HardFit
    from evidence_store.schemas import EvidenceIn, LookupResult, ReservationOut

T = TypeVar("T")


def store_url(explicit: str | None) -> str:
    """``explicit``, or the default store's URL."""
    from evidence_store.location import default_db_url

    return explicit or default_db_url()


def store_exists(url: str) -> bool:
    """False only for a SQLite file that does not exist yet (nothing recorded); servers are assumed to."""
    from evidence_store.location import sqlite_file

    path = sqlite_file(url)
    return path is None or path.exists()


@dataclasses.dataclass(frozen=True)
class Settlement:
    """``EvidenceAccess.read_and_settle``: the request as decided (MIG bookings applied), stage 1's
    answer, each resident's evidence and what they settle before any probe."""

    req: Request
    hard: HardFit
    evidence: list[PairEvidence]
    settled: Settled


class EvidenceAccess:
    """Reads evidence and reservations from the store for stage-1 and cache decisions.

    ``EvidenceAccess(url)`` opens the store at ``url`` (the default store for ``None``) on first
    use, if it exists; ``EvidenceAccess.over(engine)`` reads through an engine the caller already
    opened (the service's, an admission's)."""

    def __init__(self, url: str | None, *, engine: Engine | None = None) -> None:
        self.url = store_url(url) if engine is None else engine.url.render_as_string(hide_password=True)
        self.present = engine is not None or store_exists(self.url)
        self._engine = engine

    @classmethod
    def over(cls, engine: Engine) -> EvidenceAccess:
        """Access through ``engine``, an open store at the current schema."""
        return cls(None, engine=engine)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            from evidence_store.migrate import open_store

            self._engine = open_store(self.url)  # checks the schema revision
        return self._engine

    def _read(self, fn: Callable[[Connection], T]) -> T:
        with _read_transaction(self.engine) as connection:
            return fn(connection)

    def reserved_bytes(self, device_id: str, now: dt.datetime) -> int:
        if not self.present:
            return 0
        from evidence_store.reservations import reserved_bytes

        return int(self._read(lambda session: reserved_bytes(session, device_id, now)))

    def bookings(self, device_id: str, now: dt.datetime) -> tuple[int, str]:
        """Memory other admissions booked on the device, and where that number comes from."""
        if not self.present:
            return 0, f"no evidence store yet ({self.url}): no admission could have booked memory"
        return self.reserved_bytes(device_id, now), BOOKED_SOURCE

    def lookup(self, req: Request, resident: Resident, now: dt.datetime, *,
               as_of: dt.datetime | None = None) -> PairEvidence:
        """The pooled evidence for (``resident``, the candidate) that is fresh at ``as_of`` (default
        ``now``; an earlier time counts as ``now``: a lookup never revives expired evidence)."""
        at = evidence_time(now, as_of)
        key = pair_key(req, resident)
        if key is None or not self.present:
            return self._without_rows(resident, key)
        from evidence_store.lookup import lookup

        policy = req.policy
        res = self._read(lambda session: lookup(
            session,
            key,
            driver_version=req.snapshot.driver_version,
            now=at,
            ttl_s=policy.evidence_ttl_s,
            allow_cross_driver=policy.allow_cross_driver_evidence,
            cross_driver_confidence_factor=policy.cross_driver_confidence_factor,
        ))
        return _pair_evidence(resident.name, key, res, at=at, now=now)

    def decision_inputs(self, req: Request, now: dt.datetime, *,
                        as_of: dt.datetime | None = None) -> tuple[int, str, list[PairEvidence]]:
        """``bookings`` and a ``lookup`` for every resident, read in one statement (one snapshot of the
        store, one round trip, no transaction around it; ``evidence_store.lookup.decision_read``)."""
        if not self.present:
            reserved, source = self.bookings(req.device_id, now)
            return reserved, source, [self.lookup(req, r, now, as_of=as_of) for r in req.snapshot.residents]
        from evidence_store.lookup import decision_read

        at = evidence_time(now, as_of)
        keys = request_keys(req)
        booked, rows = self._statement(lambda connection: decision_read(
            connection, device_id=req.device_id, keys=[k for k in keys if k is not None], booked_at=now,
            evidence_at=at, ttl_s=req.policy.evidence_ttl_s))
        return booked, BOOKED_SOURCE, evidence_from_rows(req, keys, rows, at=at, now=now)

    def with_mig_bookings(self, req: Request, now: dt.datetime) -> Request:
        """``req`` as of the MIG instances other admissions booked on its device at ``now``
        (``request.with_mig_bookings``): one read, only where MIG is enabled and a store exists."""
        if not req.snapshot.mig.enabled or not self.present:
            return req
        from evidence_store.reservations import mig_bookings

        rows = self._statement(lambda connection: mig_bookings(connection, req.device_id, now))
        return with_mig_bookings(req, booked_mig_instances(req.spec, rows))

    def read_and_settle(self, req: Request, now: dt.datetime, *, stage1: Callable[..., HardFit] = hard_fit,
                        as_of: dt.datetime | None = None) -> Settlement:
        """Everything a decision before any probe needs, from one read of the store: the request as of
        the MIG instances others booked (``with_mig_bookings``), the bookings and evidence in one
        statement (``decision_inputs``; ``as_of``: only evidence still fresh then counts), stage 1
        (``stage1``: ``hard_fit`` or a memo of it) and ``settle``. ``canary fit``, the probe
        coordination (``pairs_to_probe``), the extender's device check and the CLI admission all start
        here, so they cannot read or settle differently."""
        req = self.with_mig_bookings(req, now)
        reserved, source, evidence = self.decision_inputs(req, now, as_of=as_of)
        hard = stage1(req, reserved_bytes_by_others=reserved, reservations_source=source)
        return Settlement(req, hard, evidence, settle(req, hard, evidence, booked_bytes=reserved))

    def _statement(self, fn: Callable[[Connection], T]) -> T:
        """``fn``'s read, one statement, outside any transaction (``_single_statement``)."""
        with _single_statement(self.engine) as connection:
            return fn(connection)

    def _without_rows(self, resident: Resident, key: PairKey | None) -> PairEvidence:
        if key is None:
            return PairEvidence(resident.name, None, None,
                                reason=f"resident {resident.name} has no profile, so no pairwise evidence can be keyed")
        return PairEvidence(resident.name, key, None, reason=f"no evidence store yet ({self.url}): no evidence for this pair")


#: Where the booked memory of a decision comes from, when a store was read.
BOOKED_SOURCE = "evidence store: memory booked by other admissions on this device"


def booked_mig_instances(spec: DeviceSpec, rows: list[ReservationOut]) -> tuple[MigBooking, ...]:
    """The MIG instances of these bookings (``evidence_store.reservations.mig_bookings``), placed by the
    catalog's profile sizes; a booking whose profile or start cannot be read keeps its name without a
    placement (stage 1 then cannot call any placement free)."""
    out = []
    for row in rows:
        instance = row.mig_instance or ""
        placement = None
        try:
            name, start = parse_mig_instance(instance)
            profile = spec.mig_profile(name)
        except InputError:
            start = None
        else:
            if start is not None:
                placement = GpuInstancePlacement(profile=profile.name, start=start, size=profile.memory_slices)
        out.append(MigBooking(instance=instance, holder=row.holder, placement=placement))
    return tuple(out)


def book(session: Session, req: Request, hard: HardFit, now: dt.datetime) -> ReservationRef:
    """Book an admitted candidate (``decisions.reservation_plan``) in the caller's transaction: its memory
    on the device, or under MIG a new GPU instance at stage 1's placement (its memory against the
    instance's own; ``evidence_store.reservations.reserve_mig_instance``). Raises ``ReservationConflict``
    when another admission booked it first."""
    from evidence_store.reservations import reserve, reserve_mig_instance

    plan = reservation_plan(req, hard)
    holder = f"{req.candidate.name}@{req.candidate.version}"
    if plan.mig_instance is not None and hard.mig_placement is not None:
        spot = hard.mig_placement
        booking = reserve_mig_instance(
            session, device_id=req.device_id, holder=holder, profile=spot.profile, start=spot.start, size=spot.size,
            profile_slices={p.name: p.memory_slices for p in req.spec.mig_profiles}, memory_bytes=plan.memory_bytes,
            capacity_memory_bytes=plan.capacity_bytes, lease_s=req.policy.reservation_lease_s, now=now)
    else:
        booking = reserve(session, device_id=plan.device_id, holder=holder, memory_bytes=plan.memory_bytes,
                          capacity_memory_bytes=plan.capacity_bytes, lease_s=req.policy.reservation_lease_s, now=now)
    return ReservationRef(id=booking.id, memory_bytes=booking.memory_bytes, mig_instance=plan.mig_instance,
                          lease_expires_at=booking.expires_at)


def refit_mig(session: Session, req: Request, hard: HardFit, decision: Decision,
              now: dt.datetime) -> tuple[Request, HardFit, Decision]:
    """An admission under MIG, decided again against the MIG instances booked on the device when it
    books: the device's booking lock is taken first (``evidence_store.reservations.lock_device``), so
    a booking committed since the decision's read is seen, and the candidate takes another free
    placement (or another profile it accepts, when the regime was chosen) — or is rejected, naming the
    placements held. The request, stage 1 and decision to record; the same ones when nothing changed."""
    from evidence_store.reservations import lock_device, mig_bookings

    lock_device(session, req.device_id, now)
    again = with_mig_bookings(req, booked_mig_instances(req.spec, mig_bookings(session, req.device_id, now)))
    if again is req:
        return req, hard, decision
    # Under MIG the instance's memory is its own: the device's memory bookings do not enter stage 1.
    refit = hard_fit(again, reserved_bytes_by_others=0,
                     reservations_source="not counted under MIG: the new instance's memory is its own")
    decided = hard_fit_decision(again, refit)
    assert decided is not None  # stage 1 decides every MIG admission by itself
    return again, refit, dataclasses.replace(decided, evidence=decision.evidence, probe=decision.probe)


def evidence_time(now: dt.datetime, as_of: dt.datetime | None) -> dt.datetime:
    """The instant evidence must be fresh at: ``as_of`` when later than ``now`` (never earlier: a lookup
    never revives expired evidence)."""
    return now if as_of is None or as_of <= now else as_of


def request_keys(req: Request) -> tuple[PairKey | None, ...]:
    """Each resident's pair key with the candidate, in resident order (``None``: unprofiled)."""
    return tuple(pair_key(req, r) for r in req.snapshot.residents)


def evidence_from_rows(req: Request, keys: tuple[PairKey | None, ...], rows: dict[str, list[Any]], *,
                       at: dt.datetime, now: dt.datetime) -> list[PairEvidence]:
    """Each resident's pooled evidence from the decision read's rows by key digest
    (``evidence_store.lookup.decision_read``), ``keys`` being ``request_keys(req)``."""
    from evidence_store.lookup import key_digest, pool_candidates

    policy = req.policy
    evidence = []
    for resident, key in zip(req.snapshot.residents, keys, strict=True):
        if key is None:
            evidence.append(PairEvidence(
                resident.name, None, None,
                reason=f"resident {resident.name} has no profile, so no pairwise evidence can be keyed"))
            continue
        res = pool_candidates(
            rows.get(key_digest(key), []), ttl_s=policy.evidence_ttl_s, driver_version=req.snapshot.driver_version,
            allow_cross_driver=policy.allow_cross_driver_evidence,
            cross_driver_confidence_factor=policy.cross_driver_confidence_factor)
        evidence.append(_pair_evidence(resident.name, key, res, at=at, now=now))
    return evidence


def _pair_evidence(resident: str, key: PairKey, res: LookupResult, *, at: dt.datetime,
                   now: dt.datetime) -> PairEvidence:
    return PairEvidence(
        resident=resident,
        key=key,
        outcome=res.outcome,
        ids=tuple(res.evidence_ids),
        timestamp=res.evidence_timestamp,
        expires_at=res.evidence_expires_at,
        confidence=res.confidence,
        slowdown_pct=res.slowdown_estimate_pct,
        interval_pct=res.slowdown_interval_pct,
        sources=tuple(res.sources),
        cross_driver=res.cross_driver,
        reason=res.reason if at == now or res.outcome is not None else
        f"{res.reason} (looked up as of {at.isoformat(timespec='seconds')}: evidence must stay fresh until then)",
    )


@contextmanager
def _read_transaction(engine: Engine) -> Iterator[Connection]:
    """One read-only transaction on a Core connection: the decision's reads are plain statements that
    return rows, so they need none of a ``Session``'s bookkeeping (identity map, unit of work), which
    cost more CPU than the statements. Errors leave as ``session_scope``'s do (``TransientStoreError``,
    ``StoreUnavailable``); the transaction is read from the store on every call, nothing is kept."""
    from sqlalchemy import exc

    from evidence_store.database import translate

    try:
        with engine.connect() as connection, connection.begin():
            yield connection
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err


@contextmanager
def _single_statement(engine: Engine) -> Iterator[Connection]:
    """A connection for reads that are one statement, which needs no transaction around it: a single
    statement sees one snapshot of the store by itself. On PostgreSQL the connection is in autocommit
    for the duration, which saves the BEGIN and COMMIT round trips (two of the three a decision's read
    took); SQLite's connections run a statement outside ``BEGIN`` in autocommit already (the store
    leaves ``BEGIN`` to SQLAlchemy, which emits it only for a transaction)."""
    from sqlalchemy import exc

    from evidence_store.database import translate

    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            yield connection
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err


def open_store_for_writing(url: str | None, *, announce: Callable[[str], object] | None = note) -> Engine:
    """The store's engine, at the current schema. A SQLite store that does not exist yet — no file,
    or a file without a single table — is created at the current schema (zero setup) and ``announce``
    says so (default: a note on stderr; ``None``: silent); a store with an older schema is never
    migrated here: that is ``canary db upgrade`` (exit 4 says so)."""
    from evidence_store.location import check_db_url, sqlite_file
    from evidence_store.migrate import check_schema, open_store, upgrade

    resolved = store_url(url)
    check_db_url(resolved)  # a mistyped SQLite directory is an error, never a new empty store
    path = sqlite_file(resolved)
    if path is not None and (not path.exists() or _sqlite_is_blank(path)):
        path.parent.mkdir(parents=True, exist_ok=True)
        upgrade(resolved)
        if announce is not None:
            announce(f"created a new evidence store at {resolved}")
    engine = open_store(resolved)
    check_schema(engine)
    return engine


def _sqlite_is_blank(path: Path) -> bool:
    """A SQLite file with no table at all (created by a read that found nothing): nothing to migrate."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables: int = conn.execute("select count(*) from sqlite_master where type = 'table'").fetchone()[0]
            return tables == 0
    except sqlite3.DatabaseError:
        return False  # not a SQLite file: open_store reports it


def probe_evidence(req: Request, run: ProbeRun, now: dt.datetime) -> EvidenceIn:
    """The evidence row of one probe run, recorded at ``now`` (slowdowns in percent, as everywhere; an
    estimate or interval the probe could not bound is left out)."""
    from evidence_store.schemas import EvidenceIn

    r = run.result
    est = r.slowdown_estimate_pct
    interval = r.slowdown_interval_pct
    finite = interval is not None and all(abs(v) != float("inf") for v in interval) and est is not None
    return EvidenceIn(
        probe_id=r.probe_id,
        key=run.key,
        driver_version=req.snapshot.driver_version,
        cuda_version=req.snapshot.cuda_driver_version,
        device_uuid=req.snapshot.uuid,
        source="canary",
        outcome=r.outcome,
        resident_slowdown_pct=None if est is None or est != est or abs(est) == float("inf") else est,
        resident_slowdown_low_pct=interval[0] if finite and interval else None,
        resident_slowdown_high_pct=interval[1] if finite and interval else None,
        samples=r.samples,
        exposure_used=r.exposure_used,
        time_used_s=r.time_used_s,
        confidence=r.confidence,
        created_at=now,
        expires_at=now + dt.timedelta(seconds=req.policy.evidence_ttl_s),
    )


def feedback_evidence(
    req: Request, resident: Resident, *, observed_slowdown_pct: float | None, now: dt.datetime
) -> EvidenceIn:
    """The evidence row of a production SLO violation reported for (``resident``, the candidate)."""
    import uuid

    from canary.errors import InputError
    from evidence_store.schemas import EvidenceIn

    key = pair_key(req, resident)
    if key is None:
        raise InputError(f"resident {resident.name!r} has no profile, so no pair key", field="--resident-name")
    return EvidenceIn(
        probe_id=f"feedback-{uuid.uuid4()}", key=key, driver_version=req.snapshot.driver_version,
        cuda_version=req.snapshot.cuda_driver_version, device_uuid=req.snapshot.uuid, source="production",
        outcome="unsafe", resident_slowdown_pct=None if observed_slowdown_pct is None else observed_slowdown_pct,
        samples=0, exposure_used=0, time_used_s=0.0, confidence=None, created_at=now,
        expires_at=now + dt.timedelta(seconds=req.policy.evidence_ttl_s),
    )


def history_entry(req: Request, verdict: str, now: dt.datetime) -> dict[str, Any] | None:
    """The admission-history row of a CLI admission (``evidence_store.admission_log.log_admission``'s
    arguments, the same row the service writes), so ``canary warm --from-history`` sees admissions made
    with ``canary admit`` too; ``None`` when there is no pair to warm (an idle device, unprofiled
    residents). The request is kept by value, as the service keeps it: ``QueuedRequest.stored``, its
    residents already on the snapshot."""
    from evidence_store.lookup import key_digest
    from evidence_store.service import probe_queue

    keyed = [k for k in (pair_key(req, r) for r in req.snapshot.residents) if k is not None]
    if not keyed:
        return None
    residents = "+".join(r.name for r in req.snapshot.residents)
    given = req.regime_chosen_by.startswith("given")
    queued = QueuedRequest(device=QueuedDevice(kind=req.device.kind, ref=req.device.ref, snapshot=req.snapshot),
                           candidate=req.candidate, regime=str(req.regime) if given else None, policy=req.policy.name)
    return {"pair_digest": probe_queue.pair_digest(keyed), "key_digests": [key_digest(k) for k in keyed],
            "device_type": req.spec.name, "device_id": req.device_id,
            "label": f"{req.candidate.name}@{req.candidate.version} beside {residents} on {req.spec.name} "
                     f"({req.regime})",
            "verdict": verdict, "now": now, "request_json": queued.stored()}
