"""Device reservations: memory (and an MPS share, a MIG instance) booked on a device under a lease.

Functions take the caller's ``Session`` and never commit; none reads the clock (callers pass ``now``).
A booking is atomic against concurrent bookings of the same device (``reserve`` locks the device).

A new MIG GPU instance is booked with ``reserve_mig_instance``: its memory against the instance's own
device, ``DEVICE/mig:PROFILE@START`` (``mig_instance_device``), and its placement against the physical
device, which it locks, so no two active bookings hold overlapping memory slices. ``mig_bookings``
lists the MIG instances booked on a physical device, for stage 1 to count as taken.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from canary.errors import InputError
from canary.regime import parse_mig_instance
from evidence_store.conditions import active_booking
from evidence_store.errors import ReservationConflict
from evidence_store.leases import lease_until
from evidence_store.models import Device, Reservation
from evidence_store.schemas import ReservationOut, to_utc

#: Between a physical device's id and a MIG instance's name in the id its bookings are made against.
MIG_INSTANCE_SEPARATOR = "/mig:"
#: Prefixes of the device ids bookings are made against (``canary.admission.request.device_id_of``) that
#: no DEVICE a user types has.
STORED_ID_PREFIXES = ("sim:", "file:", "snapshot:")
#: Ending in a device UUID (``GPU-…``, ``MIG-…``, a bare one, or a snapshot's own ``GPU-name-<uuid>``):
#: what bookings on a live device, or a snapshot naming one, are made against.
_DEVICE_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def stored_device_id(session: Session, given: str) -> str | None:
    """``given`` itself when it is a device id as bookings store it — a stored id's form, or one bookings
    are held under — else ``None`` (the caller resolves it as a DEVICE). The CLI's and the service's
    booking lists both ask here first."""
    if given.startswith(STORED_ID_PREFIXES) or MIG_INSTANCE_SEPARATOR in given or _DEVICE_UUID.search(given):
        return given
    if session.scalar(select(Reservation.id).where(Reservation.device_id == given).limit(1)) is not None:
        return given  # another form of device id bookings are held under
    return None


def mig_instance_device(device_id: str, instance: str) -> str:
    """The device id a MIG instance's bookings are made against: ``DEVICE/mig:PROFILE@START`` (the
    instance's memory is its own, shared with nothing else on the physical device)."""
    return f"{device_id}{MIG_INSTANCE_SEPARATOR}{instance}"


def lock_device(session: Session, device_id: str, now: datetime) -> None:
    """Hold the booking lock of ``device_id`` until the caller's transaction ends (``_lock_device``):
    what is read after it sees every booking committed before, and no booking of the device can be
    added until the transaction ends."""
    _lock_device(session, device_id, now)


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
            active_booking(now),
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
    until = lease_until(now, lease_s)

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
    return ReservationOut.model_validate(row)


def _slices(instance: str | None, profile_slices: Mapping[str, int]) -> tuple[int, int] | None:
    """``[start, end)`` of a booked ``PROFILE@START`` instance; ``None`` when where it sits is unknown
    (no start, or a profile ``profile_slices`` lacks)."""
    if instance is None:
        return None
    try:
        profile, start = parse_mig_instance(instance)
    except InputError:
        return None
    size = profile_slices.get(profile)
    return None if start is None or size is None else (start, start + size)


def reserve_mig_instance(
    session: Session,
    *,
    device_id: str,
    holder: str,
    profile: str,
    start: int,
    size: int,
    profile_slices: Mapping[str, int],
    memory_bytes: int,
    capacity_memory_bytes: int,
    lease_s: float,
    now: datetime,
) -> ReservationOut:
    """Book a new MIG GPU instance of ``profile`` at memory slices ``[start, start + size)`` of the
    physical device ``device_id``, with ``memory_bytes`` of its memory (against
    ``capacity_memory_bytes``, the instance's own, on ``mig_instance_device``).

    Atomic against concurrent bookings of the device: the physical device is locked, then the
    instance is refused (``ReservationConflict``, resource ``mig``, exit 1) when its slices overlap
    those of a MIG instance another active booking holds there. ``profile_slices`` (profile name →
    memory slices: the device's catalog table) places the other bookings by their names; one whose
    place cannot be told (a profile it lacks) counts as overlapping. The conflict names every
    instance booked on the device and its holder."""
    if size < 1 or start < 0:
        raise InputError(f"a MIG placement needs start >= 0 and size >= 1, got start {start}, size {size}",
                         field="mig_instance")
    instance = f"{profile}@{start}"
    _lock_device(session, device_id, to_utc(now))
    held = mig_bookings(session, device_id, now)
    clashes = []
    for booking in held:
        span = _slices(booking.mig_instance, profile_slices)
        if span is None or (span[0] < start + size and start < span[1]):
            clashes.append(booking)
    if clashes:
        named = ", ".join(f"{b.mig_instance} (held by {b.holder})" for b in clashes)
        by_start = sorted(held, key=lambda b: (_slices(b.mig_instance, profile_slices) or (1 << 30, 0),
                                               b.mig_instance or ""))  # by first slice; unknown places last
        every = ", ".join(f"{b.mig_instance}" for b in by_start)
        raise ReservationConflict(
            device_id=device_id,
            resource="mig",
            requested=1,
            reserved=1,
            capacity=1,
            detail=(f"MIG instance {instance} (memory slices [{start},{start + size})) overlaps {named}; "
                    f"MIG instances booked on the device: {every}"),
        )
    return reserve(session, device_id=mig_instance_device(device_id, instance), holder=holder,
                   memory_bytes=memory_bytes, mig_instance=instance, capacity_memory_bytes=capacity_memory_bytes,
                   lease_s=lease_s, now=now)


def mig_bookings(session: Session | Connection, device_id: str, now: datetime) -> list[ReservationOut]:
    """The MIG instances booked on the physical device ``device_id`` that count at ``now`` (unreleased,
    lease not expired), oldest first: the bookings made against ``mig_instance_device(device_id, …)``.
    ``session`` may be a Core ``Connection`` (the admission's read) or a ``Session``."""
    prefix = device_id + MIG_INSTANCE_SEPARATOR
    r = Reservation
    query = (
        select(r.id, r.device_id, r.holder, r.memory_bytes, r.mps_pct, r.mig_instance, r.created_at, r.expires_at,
               r.released_at)
        .where(
            # LIKE finds the candidates (SQLite's LIKE ignores ASCII case); the exact id is checked below.
            r.device_id.startswith(prefix, autoescape=True),
            r.mig_instance.is_not(None),
            active_booking(now),
        )
        .order_by(r.created_at, r.id)
    )
    rows = [ReservationOut.model_validate(dict(row._mapping)) for row in session.execute(query)]
    return [row for row in rows if row.device_id == prefix + (row.mig_instance or "")]


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
    return [ReservationOut.model_validate(r) for r in session.scalars(_active_query(device_id, now))]


# Built once: the sum sits on every admission's hot path, and building the statement (and its cache key
# from scratch) cost more CPU than running it.
_RESERVED_BYTES = select(func.coalesce(func.sum(Reservation.memory_bytes), 0)).where(
    Reservation.device_id == bindparam("device_id"),
    active_booking(bindparam("now", type_=Reservation.expires_at.type)),
)


def reserved_bytes(session: Session | Connection, device_id: str, now: datetime) -> int:
    """Memory booked on the device at ``now``; 0 means no active bookings (a fact, not an unknown).
    ``session`` may be a Core ``Connection`` (the admission's read-only transaction) or a ``Session``."""
    total = session.execute(_RESERVED_BYTES, {"device_id": device_id, "now": to_utc(now)}).scalar()
    return int(total or 0)


def list_reservations(
    session: Session, *, now: datetime, device_id: str | None = None, include_inactive: bool = False
) -> list[ReservationOut]:
    """Bookings (active at ``now`` unless ``include_inactive``), by device then age."""
    query = select(Reservation)
    if device_id is not None:
        query = query.where(Reservation.device_id == device_id)
    if not include_inactive:
        query = query.where(active_booking(now))
    query = query.order_by(Reservation.device_id, Reservation.created_at, Reservation.id)
    return [ReservationOut.model_validate(r) for r in session.scalars(query)]
