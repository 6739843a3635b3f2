"""``canary db upgrade|current|downgrade [REV]`` — the evidence store's schema;
``canary db prune`` — its retention.

The store is never migrated behind the user's back: every other command refuses a store that is not
at the newest revision and says to run ``canary db upgrade``.

``prune`` deletes the admission history (what the service logs for every admission, the source of
``canary warm --from-history`` and of driver-change revalidation) older than ``--admission-log-older-than``
(default 30 days). Node agents do the same hourly with their ``admission_log_retention_days``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from canary.errors import EXIT_ADMIT

if TYPE_CHECKING:
    from evidence_store.migrate import DowngradePreview


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "db", help="evidence store schema: upgrade, current, downgrade; retention: prune", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    down.add_argument("revision", nargs="?", default="-1", metavar="REV",
                      help="target revision: a revision id, -N steps, or 'base' (default: -1, one step)")
    down.add_argument("--yes", action="store_true",
                      help="do it (without: say which revisions and how many rows it would remove)")
    down.set_defaults(handler=run_downgrade)

    prune = sub.add_parser("prune", help="delete admission history older than the retention (default 30d)")
    prune.add_argument("--admission-log-older-than", dest="older_than", default=None, metavar="AGE",
                       help="age beyond which admission history is deleted: 30d, 12h, 2w (default: 30d)")
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    prune.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    prune.set_defaults(handler=run_prune)


def _describe(url: str | None) -> str:
    from evidence_store.database import redact
    from evidence_store.location import default_db_url
    from evidence_store.migrate import current, head_revisions

    at = current(url)
    heads = head_revisions()
    where = redact(url or default_db_url())
    if not at:
        return f"{where}: no schema (head is {', '.join(heads)}): run canary db upgrade"
    state = "head" if at == heads else f"not at head {', '.join(heads)}: run canary db upgrade"
    return f"{where}: revision {', '.join(at)} ({state})"


def run_upgrade(args: argparse.Namespace) -> int:
    from evidence_store.migrate import upgrade

    upgrade(args.db, args.revision)
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT


def run_current(args: argparse.Namespace) -> int:
    from evidence_store.database import redact
    from evidence_store.location import check_db_url, default_db_url, sqlite_file

    url = args.db or default_db_url()
    check_db_url(url)
    path = sqlite_file(url)
    if path is not None and not path.exists():
        # Reading the revision would create an empty file there; a question creates nothing.
        sys.stdout.write(f"{redact(url)}: no schema, no store there yet (nothing created): canary db upgrade creates one\n")
        return EXIT_ADMIT
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT


def _preview_text(preview: DowngradePreview) -> str:
    """What a downgrade removes and changes, from ``downgrade_preview``: only what the steps undone touch."""
    parts: list[str] = []
    if preview.dropped_tables:
        parts.append("drops table(s) " + ", ".join(f"{t} ({n} row(s))" for t, n in preview.dropped_tables))
    if preview.dropped_columns:
        parts.append("drops column(s) " + ", ".join(
            f"{t}.{c} ({n} row(s) with a value)" for t, c, n in preview.dropped_columns))
    if preview.added_columns:
        parts.append("restores the older column(s) " + ", ".join(f"{t}.{c}" for t, c in preview.added_columns))
    if preview.changed_rows:
        parts.append("changes the row count of " + ", ".join(
            f"{t} ({before} row(s) become {after})" for t, before, after in preview.changed_rows))
    return "; ".join(parts) or "drops no table or column holding rows (indexes and constraints only)"


def run_downgrade(args: argparse.Namespace) -> int:
    from evidence_store.cli_support import require_existing_store
    from evidence_store.database import redact
    from evidence_store.location import default_db_url
    from evidence_store.migrate import check_revision, downgrade, downgrade_preview

    check_revision(args.revision)
    require_existing_store(args.db)  # a missing SQLite file has nothing to downgrade; never create one
    if not args.yes:  # a preview, not an error: say what would happen and how to do it
        preview = downgrade_preview(args.db, args.revision)
        where = redact(args.db or default_db_url())
        if not preview.at:
            sys.stdout.write(f"{where} has no schema: nothing to downgrade\n")
            return EXIT_ADMIT
        to = ", ".join(preview.to) or "base (no tables)"
        if preview.to == preview.at:
            sys.stdout.write(f"{where} is at revision {', '.join(preview.at)} already: nothing to downgrade\n")
            return EXIT_ADMIT
        steps = "".join(f"\n  undo {rev}: {title}" for rev, title in preview.steps)
        sys.stdout.write(
            f"preview: nothing changed. `canary db downgrade {args.revision}` would migrate {where} from revision "
            f"{', '.join(preview.at)} down to {to}, undoing:{steps}\n"
            f"it {_preview_text(preview)}.\n"
            f"to do it: canary db downgrade {args.revision} --yes\n")
        return EXIT_ADMIT
    downgrade(args.db, args.revision)
    sys.stdout.write(_describe(args.db) + "\n")
    return EXIT_ADMIT


def run_prune(args: argparse.Namespace) -> int:
    import datetime as dt
    import json

    from canary.admission import open_store_for_writing
    from canary.jobs.history import parse_duration, prune_admission_log
    from evidence_store.admission_log import ADMISSION_LOG_RETENTION_DAYS

    text = args.older_than if args.older_than is not None else f"{ADMISSION_LOG_RETENTION_DAYS:g}d"
    age_s = parse_duration(text, "--admission-log-older-than")
    now = dt.datetime.now(dt.UTC)
    try:
        before = now - dt.timedelta(seconds=age_s)
    except OverflowError:
        from canary.errors import InputError

        raise InputError(f"{text!r} reaches back before year 1", field="--admission-log-older-than") from None
    engine = open_store_for_writing(args.db)
    try:
        report = prune_admission_log(engine, before=before, dry_run=args.dry_run)
    finally:
        engine.dispose()
    oldest = None if report.remaining_oldest is None else report.remaining_oldest.isoformat()
    if args.json:
        sys.stdout.write(json.dumps({"table": "admission_log", "older_than": text, "before": before.isoformat(),
                                     "dry_run": args.dry_run, "deleted": 0 if args.dry_run else report.deleted,
                                     "would_delete": report.deleted if args.dry_run else None,
                                     "oldest_kept": oldest}, indent=2) + "\n")
        return EXIT_ADMIT
    verb = "would delete" if args.dry_run else "deleted"
    sys.stdout.write(f"admission_log: {verb} {report.deleted} row(s) older than {text} (before "
                     f"{before.isoformat(timespec='seconds')}); oldest row now: {oldest or 'none'}\n")
    return EXIT_ADMIT
