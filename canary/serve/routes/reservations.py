"""Bookings: list them, release one."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from canary.admission import utcnow
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require

router = APIRouter(tags=["reservations"])


@router.get("/v1/reservations", dependencies=[Depends(require("read"))], responses=ERRORS)
async def list_reservations(
    svc: Svc, device: Annotated[str | None, Query(max_length=200)] = None,
    all: Annotated[bool, Query(description="include released and expired bookings")] = False,
) -> list[dict[str, Any]]:
    """Bookings, by device then age."""
    from evidence_store.reservations import list_reservations as repo_list

    now = utcnow()
    rows = await anyio.to_thread.run_sync(lambda: svc.db("reservations_list", lambda s: repo_list(
        s, now=now, device_id=device, include_inactive=all), read_only=True))
    return [r.model_dump(mode="json") | {"active": r.active_at(now)} for r in rows]


@router.delete("/v1/reservations/{reservation_id}", dependencies=[Depends(require("admit"))],
               responses={404: PROBLEM, **ERRORS})
async def release_reservation(reservation_id: str, svc: Svc) -> dict[str, str]:
    """Free a booking (releasing a released one changes nothing)."""
    from evidence_store.models import Reservation
    from evidence_store.reservations import release

    def work(s: Session) -> bool:
        if s.get(Reservation, reservation_id) is None:
            return False
        release(s, reservation_id, now=utcnow())
        return True

    if not await anyio.to_thread.run_sync(lambda: svc.db("reservation_release", work)):
        raise HttpProblem(404, f"no reservation {reservation_id!r}")
    return {"released": reservation_id}
