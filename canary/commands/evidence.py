"""``canary evidence list|show|certificates|expire|revoke|export|import`` — the pairwise evidence cache
and the stored certificates.

Evidence is append-only: expiring, revoking and driver changes change a record's status, never delete
it. Export writes JSON lines (a header line, then one record per line); import validates every line
first and then adds the records in one transaction, never overwriting: a probe id already stored with
different content is a conflict and nothing is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from canary.errors import EXIT_ADMIT
from canary.tables import key_values


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "evidence",
        help="the pairwise evidence cache and stored certificates: list, show, certificates, expire, revoke, "
        "export, import",
        description=__doc__,
    )
    sub = parser.add_subparsers(dest="evidence_command", metavar="ACTION", required=True)

    ls = sub.add_parser("list", help="records, newest first")
    ls.add_argument(
        "--pair",
        metavar="RESIDENT:CANDIDATE",
        help="only this workload pair; each side a workload name (llm-decode), name@version, or a version "
        "as the table shows it or in full (comms:embedding-service, megakernel@0.9.3:llm-decode)",
    )
    ls.add_argument(
        "--device-type", metavar="T", help="only this device type: a catalog name or alias, as DEVICE of canary fit "
        "(h100 is h100-sxm)"
    )
    ls.add_argument("--status", choices=("current", "stale", "revoked"), help="only this status")
    ls.add_argument(
        "--limit", type=int, default=100, metavar="N", help="at most N records (0: all; default 100)"
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(handler=run_list)

    show = sub.add_parser("show", help="one record and the history of its pair")
    show.add_argument("id", metavar="ID", help="evidence id (or a unique prefix)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=run_show)

    certs = sub.add_parser(
        "certificates",
        help="stored certificates (the decisions, with every reason and the evidence behind them): list, show",
        description="Certificates the store keeps: one per admission that reserved, linked to its evidence.",
    )
    cert_sub = certs.add_subparsers(dest="certificates_command", metavar="ACTION", required=True)
    cls = cert_sub.add_parser("list", help="certificates, newest issued first")
    cls.add_argument(
        "--device", metavar="D", help="only this device type (a catalog name or alias: h100 is h100-sxm) or device UUID"
    )
    cls.add_argument(
        "--workload", metavar="W", help="only this candidate workload: a name, name@version or a version"
    )
    cls.add_argument("--verdict", choices=("admit", "reject", "unknown"), help="only this verdict")
    cls.add_argument(
        "--limit", type=int, default=100, metavar="N", help="at most N certificates (0: all; default 100)"
    )
    cls.add_argument("--json", action="store_true", help="machine-readable output (every stored field)")
    cls.set_defaults(handler=run_certificates_list)
    cshow = cert_sub.add_parser("show", help="one certificate as admit printed it, and its evidence")
    cshow.add_argument("id", metavar="ID", help="certificate id (or a unique prefix)")
    cshow.add_argument("--json", action="store_true", help="machine-readable output")
    cshow.set_defaults(handler=run_certificates_show)

    exp = sub.add_parser("expire", help="mark current records stale (all, or those created before a time)")
    exp.add_argument("--before", metavar="ISO", help="only records created before this time (with a zone)")
    exp.add_argument("--yes", action="store_true", help="do it (without: say how many records it would mark)")
    exp.set_defaults(handler=run_expire)

    rev = sub.add_parser("revoke", help="revoke one record, with a reason")
    rev.add_argument("id", metavar="ID", help="evidence id (or a unique prefix)")
    rev.add_argument("--why", required=True, metavar="TEXT", help="why the record must not be used")
    rev.set_defaults(handler=run_revoke)

    ex = sub.add_parser("export", help="write every record to FILE (JSON lines; '-' for standard output)")
    ex.add_argument("file", metavar="FILE", help="a regular file (replaced atomically) or '-'")
    ex.add_argument("--key", metavar="KEYFILE",
                    help="sign the file with this fleet key (default: $CANARY_FLEET_KEY_FILE; unsigned without)")
    ex.set_defaults(handler=run_export)

    im = sub.add_parser(
        "import",
        help="add the records of FILE (all or nothing; never overwrites; checked against the policy; "
        "marked imported, never outweighing this store's own evidence)",
    )
    im.add_argument("file", metavar="FILE", help="a file written by canary evidence export (JSON lines)")
    im.add_argument("--policy", help="policy the records are checked against (default: default)")
    im.add_argument("--key", metavar="KEYFILE",
                    help="accept only files signed with this fleet key (default: $CANARY_FLEET_KEY_FILE)")
    im.set_defaults(handler=run_import)


def run_list(args: argparse.Namespace) -> int:
    from evidence_store.cli_support import (
        EVIDENCE_FIT,
        check_pair_filter,
        device_type_filter,
        evidence_rows,
        fit_table,
        list_evidence_for_pairs,
        pair_names,
        pairs_named,
        pairs_query,
        store,
        terminal_columns,
        write_json,
    )
    from evidence_store.database import session_scope
    from evidence_store.evidence import count_records, list_evidence
    from evidence_store.models import Evidence

    if not 0 <= args.limit <= 10**9:
        from canary.errors import UsageError

        raise UsageError("must be 0 (all) or a count up to 10**9", field="--limit")
    if args.pair is not None:
        check_pair_filter(args.pair)
    swapped = 0
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        if args.device_type is not None:
            args.device_type = device_type_filter(session, args.device_type, option="--device-type",
                                                  column=Evidence.device_type)
        if args.pair is None:
            records = list_evidence(
                session, device_type=args.device_type, status=args.status, limit=args.limit or None
            )
            names = pair_names(session, {(r.key.resident_version, r.key.candidate_version) for r in records})
        else:
            names = pair_names(session)
            records = list_evidence_for_pairs(
                session,
                pairs_named(session, args.pair, names),
                device_type=args.device_type,
                status=args.status,
                limit=args.limit or None,
            )
            if not records:
                swapped = len(_swapped_matches(args.pair, names))
        matching = len(records)
        if args.limit and matching == args.limit and not args.json:
            # The limit cut the listing: how many records the same filters match in all.
            query = None if args.pair is None else pairs_query(pairs_named(session, args.pair, names))
            matching = count_records(session, query, device_type=args.device_type, status=args.status)
    if args.json:
        out = []
        for r in records:
            resident, candidate = names.get((r.key.resident_version, r.key.candidate_version), (None, None))
            out.append({**r.model_dump(mode="json"), "workload_names": {"resident": resident, "candidate": candidate}})
        write_json(out)
        return EXIT_ADMIT
    if not records:
        sys.stdout.write(_nothing_matches(args, swapped) + "\n")
        return EXIT_ADMIT
    headers, rows = evidence_rows(records, names)
    width = terminal_columns()
    text, dropped = fit_table(
        headers, rows, width=width, steps=EVIDENCE_FIT
    )
    sys.stdout.write(text + "\n")
    if dropped:
        sys.stdout.write(f"(hidden to fit {width} columns: {', '.join(dropped)})\n")
    if len(records) < matching:
        filtered = args.pair is not None or args.device_type is not None or args.status is not None
        what = "match these filters" if filtered else "in the store"
        sys.stdout.write(f"(first {len(records)} shown; {matching} records {what}; --limit 0 shows all)\n")
    return EXIT_ADMIT


def _swapped_matches(pair: str, names: Any) -> list[tuple[str, str]]:
    """The pairs ``pair`` would name with resident and candidate the other way round."""
    from evidence_store.cli_support import pairs_matching

    found: set[tuple[str, str]] = set()
    for i, ch in enumerate(pair):
        if ch == ":":
            found.update(pairs_matching(f"{pair[i + 1:]}:{pair[:i]}", names))
    return sorted(found)


def _nothing_matches(args: argparse.Namespace, swapped: int) -> str:
    filters = [
        f"{flag} {value}"
        for flag, value in (("--pair", args.pair), ("--device-type", args.device_type), ("--status", args.status))
        if value is not None
    ]
    if not filters:
        return "no evidence in the store"
    text = "no evidence matches " + ", ".join(filters)
    if args.pair is not None:
        text += " (RESIDENT:CANDIDATE"
        if swapped:
            text += f"; {swapped} pair(s) match with the two the other way round"
        text += ")"
    return text


def run_show(args: argparse.Namespace) -> int:
    from canary.tables import table
    from evidence_store.cli_support import (
        evidence_rows,
        fmt_record_confidence,
        fmt_slowdown,
        fmt_status_changed,
        fmt_time,
        pair_names,
        probe_decision,
        resolve_evidence_id,
        store,
        write_json,
    )
    from evidence_store.database import session_scope
    from evidence_store.evidence import history

    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        full_id = resolve_evidence_id(session, args.id)
        records = history(session, full_id)
        record = next(r for r in records if r.id == full_id)
        key = record.key
        names = pair_names(session, {(key.resident_version, key.candidate_version)})
        decided = probe_decision(session, record.probe_id)
    resident, candidate = names.get((key.resident_version, key.candidate_version), (None, None))
    if args.json:
        write_json(
            {
                "evidence": record.model_dump(mode="json"),
                "history": [r.model_dump(mode="json") for r in records],
                "workload_names": {"resident": resident, "candidate": candidate},
                "probe_decision": decided,
            }
        )
        return EXIT_ADMIT
    unnamed = "name not recorded"
    details = [
        ("id", record.id),
        ("probe id", record.probe_id),
        ("resident", f"{resident or unnamed}, version {key.resident_version} ({key.resident_shape_family})"),
        ("candidate", f"{candidate or unnamed}, version {key.candidate_version} ({key.candidate_shape_family})"),
        ("device type", key.device_type),
        ("regime", key.regime),
        ("key digest", record.key_digest),
        ("driver / CUDA", f"{record.driver_version or 'unknown'} / {record.cuda_version or 'unknown'}"),
        ("device UUID", record.device_uuid or "unknown"),
        ("source", record.source),
        ("outcome", record.outcome),
        ("resident slowdown", fmt_slowdown(record)),
        (
            "candidate slowdown",
            "unknown" if record.candidate_slowdown_pct is None else f"{record.candidate_slowdown_pct:.1f}%",
        ),
        ("confidence", fmt_record_confidence(record, long=True)),
        ("decided by", "not in this store's probe journal" if decided is None
         else f"{decided['rule'] or 'unknown'}: {decided['reason'] or 'no reason recorded'}"),
        ("samples / exposure", f"{record.samples} / {record.exposure_used}"),
        ("time used", f"{record.time_used_s:.1f} s"),
        ("created / expires", f"{fmt_time(record.created_at)} / {fmt_time(record.expires_at)}"),
        (
            "status",
            record.status
            + (
                f" ({record.revoked_reason or record.stale_reason})"
                if record.revoked_reason or record.stale_reason
                else ""
            ),
        ),
        ("status changed", fmt_status_changed(record)),
        ("superseded by", record.superseded_by or "-"),
    ]
    sys.stdout.write("".join(line + "\n" for line in key_values(details)))
    headers, rows = evidence_rows(records, names)
    sys.stdout.write(f"\nhistory of this pair ({len(records)} record(s), newest first):\n")
    sys.stdout.write(table(headers, rows) + "\n")
    return EXIT_ADMIT


def run_certificates_list(args: argparse.Namespace) -> int:
    from evidence_store.cli_support import (
        CERTIFICATE_FIT,
        certificate_rows,
        fit_table,
        list_certificates,
        store,
        terminal_columns,
        write_json,
    )
    from evidence_store.database import session_scope

    if not 0 <= args.limit <= 10**9:
        from canary.errors import UsageError

        raise UsageError("must be 0 (all) or a count up to 10**9", field="--limit")
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        if args.device is not None:
            args.device = _certificate_device(args.device)
        records, total = list_certificates(
            session, device=args.device, workload=args.workload, verdict=args.verdict, limit=args.limit or None
        )
    if args.json:
        write_json([r.model_dump(mode="json") for r in records])
        return EXIT_ADMIT
    if not records:
        filters = [
            f"{flag} {value}"
            for flag, value in (("--device", args.device), ("--workload", args.workload), ("--verdict", args.verdict))
            if value is not None
        ]
        sys.stdout.write(
            ("no certificate matches " + ", ".join(filters)) if filters else "no certificates in the store"
        )
        sys.stdout.write("\n")
        return EXIT_ADMIT
    headers, rows = certificate_rows(records)
    width = terminal_columns()
    text, dropped = fit_table(
        headers, rows, width=width, steps=CERTIFICATE_FIT
    )
    sys.stdout.write(text + "\n")
    if dropped:
        sys.stdout.write(f"(hidden to fit {width} columns: {', '.join(dropped)})\n")
    if len(records) < total:
        sys.stdout.write(f"(first {len(records)} shown of {total} matching; --limit 0 shows all)\n")
    return EXIT_ADMIT


def _certificate_device(value: str) -> str:
    """``--device`` of ``certificates list``: a catalog name or alias as the catalog names the type
    (``h100`` → ``h100-sxm``, as certificates record it), anything else as given (a device UUID)."""
    from canary.catalog import UnknownDevice, lookup

    try:
        return lookup(value).name
    except UnknownDevice:
        return value


def run_certificates_show(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from canary.certificate import Certificate
    from canary.render import certificate_text
    from evidence_store.certificates import get_certificate
    from evidence_store.cli_support import fmt_time, resolve_certificate_id, store, write_json
    from evidence_store.database import session_scope

    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        stored = get_certificate(session, resolve_certificate_id(session, args.id))
    assert stored is not None  # resolved above, in the same read
    if args.json:
        write_json(stored.model_dump(mode="json"))
        return EXIT_ADMIT
    details = [
        ("certificate id", stored.id),
        ("digest", stored.digest),
        ("recorded", fmt_time(stored.recorded_at) if stored.recorded_at else "not recorded (see issued_at)"),
        ("evidence", ", ".join(stored.evidence_ids) or "none (decided by stage 1 alone, or no record used)"),
    ]
    sys.stdout.write("".join(line + "\n" for line in key_values(details)) + "\n")
    try:  # JSON mode: the stored arrays read as the model's tuples
        cert = Certificate.model_validate_json(json.dumps(stored.certificate_json))
    except ValidationError as err:
        sys.stdout.write(
            f"(this certificate does not read as the current certificate format: {err.errors()[0]['msg']}; "
            "its stored JSON follows)\n"
        )
        write_json(stored.certificate_json)
        return EXIT_ADMIT
    sys.stdout.write(certificate_text(cert) + "\n")
    return EXIT_ADMIT


def run_expire(args: argparse.Namespace) -> int:
    from evidence_store.cli_support import parse_time, store
    from evidence_store.database import session_scope
    from evidence_store.evidence import expire

    before = parse_time(args.before, field="--before") if args.before else None
    if not args.yes:
        from sqlalchemy import func, select

        from evidence_store.models import Evidence

        query = select(func.count()).select_from(Evidence).where(Evidence.status == "current")
        if before is not None:
            query = query.where(Evidence.created_at < before)
        with store(args.db) as engine, session_scope(engine, read_only=True) as session:
            would = session.scalar(query) or 0
        scope = f"created before {args.before}" if before is not None else "(every current record)"
        again = "canary evidence expire" + (f" --before {args.before}" if before is not None else "") + " --yes"
        sys.stdout.write(f"preview: nothing changed. This would mark {would} current record(s) {scope} stale, so "
                         f"no admission can use them.\nto do it: {again}\n")  # a preview is not an error
        return EXIT_ADMIT
    from datetime import UTC, datetime

    with store(args.db) as engine, session_scope(engine) as session:
        count = expire(session, before=before, now=datetime.now(UTC))
    sys.stdout.write(f"{count} record(s) marked stale\n")
    return EXIT_ADMIT


def run_revoke(args: argparse.Namespace) -> int:
    """Revoke one record, now. A record already revoked is left as it is — its first reason and time
    stay — and the command says so (with that time, or that it is unknown for a record revoked before
    the store kept it) and exits 0: the record is revoked, as asked."""
    from datetime import UTC, datetime

    from canary.errors import InputError
    from evidence_store.cli_support import fmt_time, resolve_evidence_id, store
    from evidence_store.database import session_scope
    from evidence_store.evidence import revoke
    from evidence_store.models import Evidence

    why = args.why.strip()
    if not why:
        raise InputError("a revocation needs a reason", field="--why")
    with store(args.db) as engine, session_scope(engine) as session:
        full_id = resolve_evidence_id(session, args.id)
        row = session.get(Evidence, full_id)
        already = row is not None and row.status == "revoked"
        earlier = row.revoked_reason if row is not None else None
        when = row.status_changed_at if row is not None else None
        if not already:
            revoke(session, full_id, why, now=datetime.now(UTC))
    if not already:
        sys.stdout.write(f"revoked {full_id}\n")
        return EXIT_ADMIT
    said = f" (why: {earlier!r})" if earlier else " (no reason recorded)"
    at = f" at {fmt_time(when)}" if when is not None else " at an unknown time (before the store kept it)"
    text = f"{full_id} was already revoked{at}{said}; nothing changed"
    if why != (earlier or ""):
        text += f": the reason given now ({why!r}) is not recorded"
    sys.stdout.write(text + "\n")
    return EXIT_ADMIT


def run_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.export_file import check_export_target, read_fleet_key, write_export
    from evidence_store.transfer import iter_evidence

    key = read_fleet_key(args.key)
    path = None if args.file == "-" else Path(args.file)
    if path is not None:
        check_export_target(Path(os.path.abspath(path)))  # before the store is opened
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        count = write_export(path, iter_evidence(session), key=key)
    # The count goes to stderr when the records go to stdout, so a pipe gets only the export.
    (sys.stderr if path is None else sys.stdout).write(f"exported {count} record(s) to {path or 'standard output'}\n")
    return EXIT_ADMIT


def run_import(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from canary.errors import InputError
    from canary.policy import load_policy
    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.export_file import key_id, read_export, read_fleet_key
    from evidence_store.import_check import check_record, check_repeats
    from evidence_store.transfer import import_records

    path = Path(args.file)
    policy = load_policy(args.policy)
    key = read_fleet_key(args.key)
    numbered = read_export(path, key=key)
    now = datetime.now(UTC)
    max_slowdown_pct = max(b.max_resident_slowdown_pct for b in policy.risk_budgets.values())
    for line, rec in numbered:
        check_record(rec, line=line, file=str(path), max_slowdown_pct=max_slowdown_pct,
                     min_confidence=policy.min_evidence_confidence, ttl_s=policy.evidence_ttl_s, now=now)
    check_repeats(numbered, file=str(path))
    signed = f", signed by fleet key {key_id(key)}" if key is not None else ""
    origin = f"file {path.name} imported {now.strftime('%Y-%m-%dT%H:%M:%SZ')}{signed}"
    with store(args.db) as engine, session_scope(engine) as session:
        result = import_records(session, [rec for _, rec in numbered], origin=origin)
        if result.conflicts:
            shown = result.conflicts[:5]
            lines = [
                f"line {numbered[c.index][0]}: probe id {c.probe_id!r} conflicts on field '{c.field}' "
                f"(store: {c.stored!r}, file: {c.given!r})"
                for c in shown
            ]
            more = len(result.conflicts) - len(shown)
            if more:
                lines.append(f"… and {more} more")
            raise InputError(
                f"{len(result.conflicts)} conflict(s) with the store; nothing imported:\n  "
                + "\n  ".join(lines),
                file=str(path),
            )
    sys.stdout.write(
        f"imported {result.inserted} record(s) from {path}; {result.unchanged} already present and unchanged\n"
    )
    return EXIT_ADMIT
