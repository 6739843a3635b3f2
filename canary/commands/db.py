"""``canary db upgrade|current|downgrade [REV]`` — the evidence store's schema.

The store is never migrated behind the user's back: every other command refuses a store that is not
at the newest revision and says to run ``canary db upgrade``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canary.errors import EXIT_ADMIT


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "db", help="evidence store schema: upgrade, current, downgrade", description=__doc__
    )
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)

    up = sub.add_parser("upgrade", help="migrate the store to the newest schema (or to REV)")
    up.add_argument(
        "revision", nargs="?", default="head", metavar="REV", help="target revision (default: head)"
    )
    up.set_defaults(handler=run_upgrade)

    cur = sub.add_parser("current", help="show the store's schema revision")
    cur.set_defaults(handler=run_current)

    down = sub.add_parser(
        "downgrade", help="migrate the store down to REV (default: one step; 'base' = empty)"
    )
    down.add_argument("revision", nargs="?", default="-1", metavar="REV")
    down.set_defaults(handler=run_downgrade)


def _describe(url: str | None) -> str:
    from evidence_store.engine import current, head_revisions, redact
    from evidence_store.location import default_db_url

    at = current(url)
    heads = head_revisions()
    where = redact(url or default_db_url())
    if not at:
        return f"{where}: no schema (head is {', '.join(heads)}): run canary db upgrade"
    state = "head" if at == heads else f"not at head {', '.join(heads)}: run canary db upgrade"
    return f"{where}: revision {', '.join(at)} ({state})"


def run_upgrade(args: argparse.Namespace) -> int:
    from evidence_store.engine import upgrade

    upgrade(args.db, args.revision)
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT


def run_current(args: argparse.Namespace) -> int:
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT


def run_downgrade(args: argparse.Namespace) -> int:
    from evidence_store.engine import downgrade

    downgrade(args.db, args.revision)
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT
