"""``canary reservations list|release`` — memory (and MPS share, MIG instance) booked on devices.

An admit books what it needs in the evidence store, so that two concurrent admissions cannot both take
the last free memory. Bookings end when released or when their lease expires.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canary.errors import EXIT_ADMIT


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "reservations", help="device bookings: list, release", description=__doc__
    )
    sub = parser.add_subparsers(dest="reservations_command", metavar="ACTION", required=True)

    ls = sub.add_parser("list", help="active bookings (all devices, or one)")
    ls.add_argument("--device", metavar="D", help="only this device id")
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
        records = list_reservations(session, now=now, device_id=args.device, include_inactive=args.all)
    if args.json:
        write_json([r.model_dump(mode="json") | {"active": r.active_at(now)} for r in records])
        return EXIT_ADMIT
    if not records:
        sys.stdout.write("no active reservations\n" if not args.all else "no reservations\n")
        return EXIT_ADMIT
    headers, rows = reservation_rows(records, now)
    sys.stdout.write(table(headers, rows) + "\n")
    return EXIT_ADMIT


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
