"""``canary profiles put|list|show``: the profile and snapshot registry of the store, so that a
scheduler or platform sends ``name@version`` instead of a file. Entries are immutable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from canary.errors import EXIT_ADMIT


def add_parser(sub: Any) -> None:
    p = sub.add_parser("profiles", help="the profile/snapshot registry: put, list, show",
                       description=__doc__)
    ps = p.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)
    put = ps.add_parser("put", help="store a profile (under its name@version) or, with --snapshot, a snapshot")
    put.add_argument("file", metavar="FILE", help="a workload profile (or, with --snapshot, a device snapshot)")
    put.add_argument("--snapshot", action="store_true", help="FILE is a device snapshot (needs --name, --version)")
    put.add_argument("--name", help="snapshot name")
    put.add_argument("--version", help="snapshot version")
    put.set_defaults(handler=run_put)
    ls = ps.add_parser("list", help="entries of the registry")
    ls.add_argument("--snapshots", action="store_true", help="list snapshots instead of profiles")
    ls.set_defaults(handler=run_list)
    show = ps.add_parser("show", help="one entry as JSON")
    show.add_argument("ref", metavar="NAME@VERSION", help="the entry's name and version")
    show.add_argument("--snapshot", action="store_true", help="show a snapshot, not a profile")
    show.set_defaults(handler=run_show)


def run_put(args: argparse.Namespace) -> int:
    from canary._model import check_cli_name
    from canary.admission import open_store_for_writing, utcnow
    from canary.errors import InputError
    from canary.serve.resolve import registry_document
    from evidence_store.database import session_scope
    from evidence_store.service import registry

    if args.snapshot:
        from canary.snapshot import load_snapshot

        if not args.name or not args.version:
            raise InputError("a snapshot needs --name and --version", field="--name")
        check_cli_name(args.name, option="--name")
        check_cli_name(args.version, option="--version")
        snap = load_snapshot(args.file)
        kind, name, version, document = "snapshot", args.name, args.version, registry_document(snap, file=args.file)
    else:
        from canary.profile import load_profile

        profile = load_profile(args.file)
        kind, name, version, document = "profile", profile.name, profile.version, registry_document(
            profile, file=args.file)
    engine = open_store_for_writing(args.db)
    try:
        with session_scope(engine) as session:
            entry, created = registry.put(session, kind=kind, name=name, version=version, document=document,
                                          now=utcnow())
    finally:
        engine.dispose()
    sys.stdout.write(f"{'stored' if created else 'already stored'} {kind} {entry.ref} (digest {entry.digest[:12]})\n")
    return EXIT_ADMIT


def run_list(args: argparse.Namespace) -> int:
    from canary.tables import table
    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.service import registry

    kind = "snapshot" if args.snapshots else "profile"
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        entries = registry.list_entries(session, kind=kind)
    rows = [[e.ref, e.digest[:12], e.created_at.isoformat(timespec="seconds")] for e in entries]
    sys.stdout.write(table(["name@version", "digest", "created"], rows) + "\n" if rows else f"no {kind}s\n")
    return EXIT_ADMIT


def run_show(args: argparse.Namespace) -> int:
    from canary.errors import InputError
    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.service import registry

    kind = "snapshot" if args.snapshot else "profile"
    name, version = registry.parse_ref(args.ref, field="NAME@VERSION")
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        entry = registry.get(session, kind=kind, name=name, version=version)
    if entry is None:
        raise InputError(f"no {kind} {args.ref} in the registry", field="NAME@VERSION")
    sys.stdout.write(json.dumps(entry.document, indent=2) + "\n")
    return EXIT_ADMIT
