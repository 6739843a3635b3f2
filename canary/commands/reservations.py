"""``canary reservations list|release`` — memory (and MPS share, MIG instance) booked on devices.

An admit books what it needs in the evidence store, so that two concurrent admissions cannot both take
the last free memory. Bookings end when released or when their lease expires.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canary.errors import EXIT_ADMIT, InputError


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "reservations", help="device bookings: list, release", description=__doc__
    )
    sub = parser.add_subparsers(dest="reservations_command", metavar="ACTION", required=True)

    ls = sub.add_parser("list", help="active bookings (all devices, or one)")
    ls.add_argument(
        "--device", metavar="D", help="only this device: the id bookings are held under (sim:h100-sxm, a GPU UUID, "
        "file:…, snapshot:…), or a device as canary fit names it (a catalog name or alias such as h100, a "
        "snapshot file, agent:NODE/NAME)"
    )
    ls.add_argument("--all", action="store_true", help="include released and expired bookings")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(handler=run_list)

    rel = sub.add_parser("release", help="free a booking")
    rel.add_argument("id", metavar="ID", help="reservation id (or a unique prefix)")
    rel.set_defaults(handler=run_release)


def run_list(args: argparse.Namespace) -> int:
    from canary._model import utcnow
    from canary.tables import table
    from evidence_store.cli_support import reservation_rows, store, write_json
    from evidence_store.database import session_scope
    from evidence_store.reservations import list_reservations

    now = utcnow()
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        device_id = None if args.device is None else booking_device_id(session, args.device)
        records = list_reservations(session, now=now, device_id=device_id, include_inactive=args.all)
    if args.json:
        write_json([r.model_dump(mode="json") | {"active": r.active_at(now)} for r in records])
        return EXIT_ADMIT
    if not records:
        sys.stdout.write("no active reservations\n" if not args.all else "no reservations\n")
        return EXIT_ADMIT
    headers, rows = reservation_rows(records, now)
    sys.stdout.write(table(headers, rows) + "\n")
    return EXIT_ADMIT


def booking_device_id(session: Any, given: str) -> str:
    """The device id ``--device`` names: itself when it has a stored id's form or bookings are held under
    it; else the id an admission on the DEVICE it names books under (``device_id_of``), so ``h100``
    finds the bookings held under ``sim:h100-sxm``. A name that is neither is an ``InputError`` (exit 2)
    naming ``--device`` (for a catalog name: the closest names), not an empty list."""
    from canary.admission.request import device_id_of
    from canary.backends import resolve_device
    from evidence_store import published
    from evidence_store.reservations import stored_device_id

    stored = stored_device_id(session, given)
    if stored is not None:
        return stored
    if given.startswith(published.AGENT_REF_PREFIX):
        pub = published.get_by_ref(session, given)
        if pub is None:
            raise InputError(f"no node agent publishes {given!r}, and no booking is held under it", field="--device")
        return pub.device_id  # agent_device_id: what probes and bookings of the device are keyed by
    try:
        device = resolve_device(given)
    except InputError as exc:
        raise InputError(f"{exc.problem}; nor is it the device id of a booking", field="--device") from None
    return device_id_of(device)


def run_release(args: argparse.Namespace) -> int:
    from canary._model import utcnow
    from evidence_store.cli_support import resolve_reservation_id, store
    from evidence_store.database import session_scope
    from evidence_store.reservations import release

    with store(args.db) as engine, session_scope(engine) as session:
        full_id = resolve_reservation_id(session, args.id)
        release(session, full_id, now=utcnow())
    sys.stdout.write(f"released {full_id}\n")
    return EXIT_ADMIT
