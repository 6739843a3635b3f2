"""Device reservations: memory (and an MPS share, a MIG instance) booked on a device under a lease.

Functions take the caller's ``Session`` and never commit; none reads the clock (callers pass ``now``).
A booking is atomic against concurrent bookings of the same device (``reserve`` locks the device).
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime

from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from canary.errors import InputError
from evidence_store.errors import ReservationConflict
from evidence_store.leases import lease_until
from evidence_store.models import Device, Reservation
from evidence_store.schemas import ReservationOut, to_utc


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
    Reservation.released_at.is_(None),
    Reservation.expires_at > bindparam("now"),
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
        query = query.where(Reservation.released_at.is_(None), Reservation.expires_at > to_utc(now))
    query = query.order_by(Reservation.device_id, Reservation.created_at, Reservation.id)
    return [ReservationOut.model_validate(r) for r in session.scalars(query)]
