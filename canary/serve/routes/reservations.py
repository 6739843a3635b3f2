"""Bookings: list them, release one."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy.orm import Session

from canary.admission import utcnow
from canary.errors import InputError
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require
from canary.serve.resolve import booking_device_id, cached_policy

router = APIRouter(tags=["reservations"])


DEVICE_DOC = ("a device as decisions name it — a catalog name or alias (h100), a snapshot name@version, "
              "agent:NODE/NAME — or the device id bookings are stored under (sim:h100-sxm, snapshot:…, a GPU "
              "UUID, with /mig:… for a MIG instance); a name that is neither is a 422")


def _device_id(s: Session, svc: Svc, given: str) -> str:
    """The device id ``given`` names: itself when bookings are held under it or it has a stored id's
    form, else the id decisions book the DEVICE it names under (422 naming ``query.device`` for none)."""
    from evidence_store.reservations import stored_device_id

    stored = stored_device_id(s, given)
    if stored is not None:
        return stored
    try:
        return booking_device_id(given, svc.registry_get, policy=cached_policy(svc.config.default_policy),
                                 published=svc.published_get)
    except InputError as exc:
        raise HttpProblem(422, f"field 'query.device': {exc.problem}; nor is it the device id of a booking") from None


@router.get("/v1/reservations", dependencies=[Depends(require("read"))], responses=ERRORS)
async def list_reservations(
    svc: Svc, device: Annotated[str | None, Query(max_length=200, description=DEVICE_DOC)] = None,
    all: Annotated[bool, Query(description="include released and expired bookings")] = False,
) -> list[dict[str, Any]]:
    """Bookings, by device then age."""
    from evidence_store.reservations import list_reservations as repo_list

    now = utcnow()

    def work(s: Session) -> Any:
        device_id = None if device is None else _device_id(s, svc, device)
        return repo_list(s, now=now, device_id=device_id, include_inactive=all)

    rows = await anyio.to_thread.run_sync(lambda: svc.db("reservations_list", work, read_only=True))
    return [r.model_dump(mode="json") | {"active": r.active_at(now)} for r in rows]


@router.delete("/v1/reservations/{reservation_id}", dependencies=[Depends(require("admit"))],
               responses={404: PROBLEM, **ERRORS})
async def release_reservation(
    reservation_id: Annotated[str, Path(max_length=200, description="a booking's id or a unique prefix of one "
                                        "(the tables print 8 characters), as `canary reservations release` takes")],
    svc: Svc,
) -> dict[str, Any]:
    """Free a booking. Releasing a released one changes nothing, and the answer says it was already
    released (``already_released``, with the time it was)."""
    from evidence_store.cli_support import resolve_reservation_id
    from evidence_store.errors import NoSuchId
    from evidence_store.models import Reservation
    from evidence_store.reservations import release

    def work(s: Session) -> dict[str, Any] | None:
        try:
            full_id = resolve_reservation_id(s, reservation_id)
        except NoSuchId:
            return None
        except InputError as exc:  # an ambiguous prefix
            raise HttpProblem(422, f"field 'path.reservation_id': {exc.problem}") from None
        row = s.get(Reservation, full_id)
        assert row is not None
        before, now = row.released_at, utcnow()
        if before is None:
            release(s, full_id, now=now)
        return {"released": full_id, "already_released": before is not None,
                "released_at": (now if before is None else before).isoformat()}

    answer: dict[str, Any] | None = await anyio.to_thread.run_sync(lambda: svc.db("reservation_release", work))
    if answer is None:
        raise HttpProblem(404, f"no reservation {reservation_id!r}")
    return answer
