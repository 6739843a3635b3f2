"""``canary warm PLAN``, ``canary revalidate --driver V``, ``canary recover``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    warm = sub.add_parser("warm", help="probe the plan's pairs that lack fresh evidence (nightly job)",
                          description="Probe every planned pair that fits and lacks fresh evidence, inside the "
                          "plan's global time budget; resumable (fresh pairs are skipped). Records evidence only.")
    warm.add_argument("plan", metavar="PLAN", nargs="?", help="warm plan (YAML), see docs/jobs.md")
    warm.add_argument("--from-history", action="store_true", help="build the plan from the admissions actually "
                      "requested (and evidence about to expire) instead of a file; see docs/operations.md")
    warm.add_argument("--since", help=f"--from-history only: admission history window (default {SINCE_DEFAULT})")
    warm.add_argument("--expiring-within", help="evidence that expires within this duration (e.g. 24h) is not "
                      "fresh: its pairs are probed again (a plan's pair whose freshest evidence expires then is due; "
                      "with --from-history, such pairs join the plan); default: none")
    warm.add_argument("--top", type=int, help="--from-history only: at most N requested (and N expiring) pairs "
                      f"(default {TOP_DEFAULT})")
    warm.add_argument("--budget-s", type=float, help="override the plan's global time budget in seconds (default: "
                      "the plan's budget_s; 3600 with --from-history)")
    warm.add_argument("--concurrency", type=int, help="override the plan's probes-at-once (default: the plan's "
                      "concurrency); not with --from-history")
    warm.add_argument("--seed", type=int, default=0, help="seed of simulated devices (default: %(default)s)")
    warm.add_argument("--fleet", action="store_true",
                      help="share the run with other nodes through the store (SELECT … FOR UPDATE SKIP LOCKED): "
                      "each pair is probed once per run; not with --from-history")
    warm.add_argument("--run-id", help="with --fleet: the run id, the same on every node (default: plan name, UTC "
                      "date and the plan file's digest); with --from-history: the stored plan's id (default: "
                      "history@TIME#RANDOM)")
    warm.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    warm.set_defaults(handler=run_warm)

    rv = sub.add_parser("revalidate", help="after a driver upgrade: mark old evidence stale, re-probe, report drift",
                        description="Evidence recorded under another driver becomes stale (never deleted); with "
                        "--plan, the plan's pairs are probed again and a drift report compares old and new.")
    rv.add_argument("--driver", required=True, help="the driver version now installed")
    rv.add_argument("--device-type", help="only this device type (catalog name); without it (or --yes) "
                    "revalidate only previews what it would mark stale")
    rv.add_argument("--yes", action="store_true", help="revalidate every device type (without --device-type)")
    rv.add_argument("--plan", help="pairs to re-probe now (the hot pairs), a warm plan file (default: none)")
    rv.add_argument("--seed", type=int, default=0, help="seed of simulated devices (default: %(default)s)")
    rv.add_argument("--json", action="store_true", help="print the report (or the preview) as JSON on stdout")
    rv.set_defaults(handler=run_revalidate)

    rc = sub.add_parser("recover", help="abort probes whose owner died and kill their orphaned canaries")
    rc.add_argument("--no-kill", action="store_true", help="only mark them aborted")
    rc.add_argument("--json", action="store_true", help="print the aborted probes as JSON on stdout")
    rc.set_defaults(handler=run_recover)


SINCE_DEFAULT = "7d"
TOP_DEFAULT = 50


def _progress(outcome: Any, total: int) -> None:
    """One line per finished pair on stderr. A display never decides a pair: with stderr closed
    (``2>&-``) or its reader gone (``2>&1 | head``) the line is dropped and the job goes on (as
    ``canary admit``'s progress does)."""
    from canary.errors import say

    extra = ""
    if outcome.slowdown_pct is not None:
        extra = f" ({outcome.outcome}, resident slowdown {outcome.slowdown_pct:+.1f}%)"
    elif outcome.status == "error":
        extra = f": {outcome.detail}"
    say(sys.stderr, f"[{outcome.index + 1}/{total}] {outcome.status:<15} {outcome.label}{extra}\n")


def _probe_started(total: int) -> Any:
    """One line on stderr as a pair's probe starts (a probe on hardware runs for minutes): the pair,
    its device and the risk budget the probe runs under (the largest over the pair's residents)."""
    from canary.errors import say

    def started(index: int, label: str, req: Any) -> None:
        budgets = [req.policy.budget_for(r.profile.workload_class) for r in req.snapshot.residents
                   if r.profile is not None]
        budget = (f"budget up to {max(b.max_probe_time_s for b in budgets):g} s and "
                  f"{max(b.max_requests_exposed for b in budgets)} request(s) exposed" if budgets
                  else "no profiled resident")
        device = "" if req.device.kind == "catalog" else f" (device {req.device.ref})"  # the label names its type
        say(sys.stderr, f"[{index + 1}/{total}] {'probing':<15} {label}{device}: {budget} "
                        f"(policy {req.policy.name})\n")

    return started


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


#: What a probe (and the evidence it records) concludes; anything else in a report's outcome is the
#: verdict an admission would give (admit, reject, unknown) from evidence, stage 1 or a prediction.
PROBE_OUTCOMES = ("safe", "unsafe", "inconclusive", "aborted")


def _outcome(value: str | None) -> str:
    """The table's outcome cell says which vocabulary it is in: ``probe safe`` or ``verdict admit``."""
    if value is None:
        return "–"
    return f"probe {value}" if value in PROBE_OUTCOMES else f"verdict {value}"


def _print_report(report: Any, *, drift: bool) -> None:
    from canary.tables import table

    rows = []
    for p in report.pairs:
        row = [str(p.index + 1), p.status, p.label, _outcome(p.outcome), _pct(p.slowdown_pct)]
        if drift:
            row[3:3] = [p.old_driver or "–", _outcome(p.old_outcome), _pct(p.old_slowdown_pct)]
        else:
            row.append(_expiry(p.expires_at))
        rows.append(row)
    headers = ["#", "status", "pair", "outcome", "slowdown", "evidence expires"]
    if drift:
        headers = ["#", "status", "pair", "old driver", "old outcome", "old slowdown", "new outcome", "new slowdown"]
    sys.stdout.write(table(headers, rows) + "\n")
    for p in report.pairs:  # why a pair failed, or what an earlier node of the run recorded
        if p.status in ("error", "done-in-run", "failed-in-run", "leased", "out-of-scope", "duplicate") or _aborted(p):
            sys.stdout.write(f"{p.index + 1}: {p.status}"
                             + (f" ({p.outcome})" if _aborted(p) else "") + f": {p.detail}\n")
    counts = ", ".join(f"{s} {report.count(s)}" for s in ("probed", "predicted", "queued", "fresh", "no-probe-needed",
                                                           "does-not-fit", "unknown-fit",
                                                           "done-in-run", "failed-in-run", "leased", "out-of-scope", "duplicate",
                                                           "skipped-budget",
                                                           "error")
                       if report.count(s)) or "no pairs"
    sys.stdout.write(f"{report.plan}: {counts}; {report.wall_s:.1f} s of {report.budget_s:g} s budget"
                     + (f"; {report.stale_marked} record(s) marked stale" if drift else "") + "\n")


def _expiry(value: str | None) -> str:
    """A fresh row's soonest evidence expiry, to the minute, UTC."""
    import datetime as dt

    return "–" if value is None else f"{dt.datetime.fromisoformat(value):%Y-%m-%d %H:%M}Z"


def _aborted(p: Any) -> bool:
    """A pair whose probe ran now and was aborted: nothing was learnt, so its evidence is still missing."""
    return bool(p.status == "probed" and p.outcome == "aborted")


def _exit_code(report: Any) -> int:
    """4 when a pair failed operationally (the others still ran), here or (fleet) on another node of the
    run (``failed-in-run``); 3 when the budget ran out before some
    pairs, or (fleet) another process still holds some pairs' leases (their evidence is still missing:
    the job did not do what it was asked, yet nothing failed — run it again to resume); else 0. The
    skipped pairs are named on stderr."""
    from canary.errors import say

    failed_elsewhere = report.count("failed-in-run")
    if failed_elsewhere:
        say(sys.stderr, f"canary: {failed_elsewhere} pair(s) of the fleet run failed on another node (listed below "
                        "the table, with that node's reason); a run tries a pair once: start a new run "
                        "(--run-id) to try them again\n")
    if report.count("error") or failed_elsewhere:
        return 4
    leased = report.count("leased")
    if leased:
        say(sys.stderr, f"canary: {leased} of {len(report.pairs)} pair(s) of the fleet run are leased by another "
                        "process and not answered yet (listed below the table); run the job again when it "
                        "finishes or its lease expires\n")
    aborted = sum(1 for p in report.pairs if _aborted(p))
    if aborted:
        say(sys.stderr, f"canary: {aborted} probe(s) were aborted (the reason is below the table): nothing was learnt "
                        "about those pairs, so their evidence is still missing; run the job again when the cause "
                        "is gone\n")
    skipped = report.count("skipped-budget")
    if skipped:
        total = len(report.pairs)
        reached = sum(report.count(s) for s in ("probed", "predicted", "queued", "done-in-run", "failed-in-run"))
        what = (f"was too small to probe any of the {skipped} pair(s) that need a probe" if not reached
                else f"ran out before {skipped} of {total} pair(s)")
        say(sys.stderr, f"canary: the time budget of {report.budget_s:g} s {what}: their evidence is still "
                        "missing; run the job again to resume, or give a larger --budget-s\n")
    return 3 if skipped or leased or aborted else 0


def _check_warm_options(args: argparse.Namespace) -> None:
    """Refuse options that contradict each other or mean nothing in this form of ``canary warm``."""
    from canary.errors import UsageError

    if args.from_history:
        if args.plan:
            raise UsageError(f"a plan file ({args.plan}) and --from-history are two different plans: give one",
                             field="--from-history")
        for given, option in ((args.fleet, "--fleet"), (args.concurrency is not None, "--concurrency")):
            if given:
                raise UsageError("is not used with --from-history (its pairs run one at a time here, or on "
                                 "their device's agent)", field=option)
        return
    for value, option in ((args.since, "--since"), (args.top, "--top")):
        if value is not None:
            raise UsageError("only means something with --from-history (a plan file lists its pairs itself)",
                             field=option)
    if args.run_id is not None and not args.fleet:
        raise UsageError("names a fleet run: give it with --fleet (or --from-history)", field="--run-id")


def _as_json(report: Any) -> str:
    return json.dumps({"plan": report.plan, "budget_s": report.budget_s, "wall_s": report.wall_s,
                       "stale_marked": report.stale_marked, "queue": report.queue,
                       "pairs": [p.__dict__ for p in report.pairs]}, indent=2)


def run_warm(args: argparse.Namespace) -> int:
    import anyio

    from canary.jobs.plan import load_plan
    from canary.jobs.warm import warm_async

    _check_warm_options(args)
    if args.from_history:
        return run_warm_history(args)
    if not args.plan:
        from canary.errors import InputError

        raise InputError("give a plan file, or --from-history", field="PLAN")
    plan = load_plan(args.plan)
    updates = {k: v for k, v in (("budget_s", args.budget_s), ("concurrency", args.concurrency)) if v is not None}
    if updates:
        from canary._model import validate_document
        from canary.errors import InputError, UsageError

        # the plan itself is valid: an override it refuses is the option's fault, and named as such
        for key, option in (("budget_s", "--budget-s"), ("concurrency", "--concurrency")):
            if key in updates:
                try:
                    validate_document(type(plan), {**plan.model_dump(mode="json"), key: updates[key]}, file=args.plan)
                except InputError as exc:
                    raise UsageError(f"overrides the plan's {key}: {exc.problem}", field=option) from None
        plan = validate_document(type(plan), {**plan.model_dump(mode="json"), **updates}, file=args.plan)
    if args.run_id is not None and not args.run_id.strip():
        from canary.errors import UsageError

        raise UsageError("must not be empty", field="--run-id")
    check_plan(plan, args.plan)  # every pair's files load before the store is touched
    fresh_until = None
    if args.expiring_within is not None:
        import datetime as dt

        from canary.admission import utcnow
        from canary.jobs.history import parse_duration

        # evidence that expires inside the window is not fresh for this run: its pairs are probed again
        fresh_until = utcnow() + dt.timedelta(seconds=parse_duration(args.expiring_within, "--expiring-within"))
    started = _probe_started(len(plan.pairs))

    async def go() -> Any:
        if args.fleet:
            from canary.jobs.warm import warm_fleet_async

            return await warm_fleet_async(plan, run_id=args.run_id or _default_run_id(args.plan, plan.name),
                                          db_url=args.db, seed=args.seed, fresh_until=fresh_until,
                                          progress=_progress, on_start=started)
        return await warm_async(plan, db_url=args.db, seed=args.seed, fresh_until=fresh_until, progress=_progress,
                                on_start=started)

    report = anyio.run(go)
    sys.stdout.write(_as_json(report) + "\n") if args.json else _print_report(report, drift=False)
    if report.queue is not None and not args.json:
        sys.stdout.write("fleet run: " + ", ".join(f"{k} {v}" for k, v in sorted(report.queue.items())) + "\n")
    return _exit_code(report)


#: The command-line names ``load_request`` gives a bad value, and the plan field that holds it in a plan.
PLAN_FIELDS = {"--policy": "policy", "--regime": "regime", "--resident": "residents", "DEVICE": "device"}


def check_plan(plan: Any, plan_file: str) -> None:
    """Load every pair of the plan (device, profiles, policy) so a bad file is exit 2 before anything is
    written; the message names the pair. A device that cannot be reached now (``nvml:0`` on a node
    without its GPU) is not bad input: that pair is reported as ``error`` with the reason when the job
    reaches it, and the job goes on with the others (exit 4 at the end)."""
    from canary.errors import InputError, OperationalError
    from canary.jobs.warm import load_pair

    for index, pair in enumerate(plan.pairs):
        try:
            load_pair(pair, check_probe=True)
        except InputError as exc:  # named as the plan's own field errors name it (pairs[0] is the first)
            own = PLAN_FIELDS.get(exc.field or "")
            if own is not None and exc.file is None:  # a value written in the plan itself: its own field
                raise InputError(f"pair {index + 1} of the plan: {exc.problem}", file=plan_file,
                                 field=f"pairs[{index}].{own}") from None
            raise InputError(f"pair {index + 1} of the plan: {exc}", file=plan_file, field=f"pairs[{index}]") from None
        except OperationalError:
            continue


def _default_run_id(plan_path: str, name: str) -> str:
    """Nodes that run the same plan file on the same UTC day share one run."""
    import datetime as dt
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()[:12]
    return f"{name}@{dt.datetime.now(dt.UTC):%Y-%m-%d}#{digest}"


def run_revalidate(args: argparse.Namespace) -> int:
    import anyio

    from canary.admission import utcnow
    from canary.backends import check_sim_driver
    from canary.errors import InputError, UsageError
    from canary.jobs.plan import load_plan
    from canary.jobs.warm import (
        WarmReport,
        attach_old_evidence,
        mark_stale_and_record_drift,
        record_reprobes,
        stale_preview,
        warm_async,
    )

    # Everything that can be bad input is checked before a single record is marked stale.
    device_type = None
    if args.device_type is not None:
        from canary.catalog import lookup

        try:
            device_type = lookup(args.device_type).name
        except InputError as exc:
            raise UsageError(exc.problem, field="--device-type") from None
    # the version the new evidence is keyed to: trimmed and checked as --sim-driver is (a stray space
    # made the new driver's own evidence stale)
    args.driver = check_sim_driver(args.driver, field="--driver")
    plan = load_plan(args.plan) if args.plan else None
    if plan is not None:
        check_plan(plan, args.plan)
    if device_type is None and not args.yes:
        return _revalidate_preview(args, stale_preview(args.db, driver=args.driver, device_type=None))
    note = f"canary revalidate --driver {args.driver}" + (f" --device-type {device_type}" if device_type else "") + (
        f" --plan {args.plan}" if args.plan else " (no pairs re-probed)")
    stale, events = mark_stale_and_record_drift(args.db, driver=args.driver, device_type=device_type, now=utcnow(),
                                                plan=plan, note=note)
    if plan is None:
        if args.json:
            sys.stdout.write(json.dumps({"driver": args.driver, "device_type": device_type, "stale_marked": stale,
                                         "drift_events": events, "pairs": []}, indent=2) + "\n")
        else:
            sys.stdout.write(f"{stale} evidence record(s) recorded under another driver are now stale"
                             + (f" ({len(events)} drift event(s): canary drift)" if events else "")
                             + f"; to re-probe the hot pairs under {args.driver}, run `canary revalidate --driver "
                             f"{shlex.quote(args.driver)} "
                             + (f"--device-type {device_type}" if device_type else "--yes") + " --plan PLAN`\n")
        return 0

    async def go() -> WarmReport:
        return await warm_async(plan, db_url=args.db, seed=args.seed, driver=args.driver, device_type=device_type,
                                progress=_progress, on_start=_probe_started(len(plan.pairs)))

    report = anyio.run(go)
    report.stale_marked = stale
    record_reprobes(args.db, events, report)
    attach_old_evidence(report, plan, args.db, args.driver)
    if args.json:
        doc = json.loads(_as_json(report))
        sys.stdout.write(json.dumps({**doc, "driver": args.driver, "device_type": device_type,
                                     "drift_events": events}, indent=2) + "\n")
    else:
        _print_report(report, drift=True)
        if events:
            sys.stdout.write(f"drift event(s) recorded: {', '.join(events)} (canary drift ID)\n")
        if report.count("probed"):  # said only of probes that ran
            sys.stdout.write(f"simulated devices reported driver {args.driver} for these probes; to decide with the "
                             f"new evidence on the simulator, run with --sim-driver {args.driver} (or "
                             f"CANARY_SIM_DRIVER={args.driver}); a live device must run {args.driver} itself. "
                             "The simulator models no driver: on a simulated device old and new differ only by "
                             "simulated run-to-run noise (a re-probe simulates another run than the old one), "
                             "never by the driver\n")
    return _exit_code(report)


def _revalidate_preview(args: argparse.Namespace, groups: list[Any]) -> int:
    """Without --device-type or --yes: what would be marked stale, and how to do it. Not an error."""
    total = sum(g.records for g in groups)
    how = (f"canary revalidate --driver {args.driver} --device-type TYPE"
           + (f" --plan {args.plan}" if args.plan else "") + " (one device type), or add --yes (every device type)")
    if args.json:
        sys.stdout.write(json.dumps({"preview": True, "driver": args.driver, "would_mark_stale": total,
                                     "groups": [g.__dict__ for g in groups], "to_apply": how}, indent=2) + "\n")
        return 0
    from canary.tables import table

    sys.stdout.write(f"preview: nothing changed. Revalidating for driver {args.driver} would mark {total} current "
                     f"evidence record(s) recorded under other drivers stale, on every device type:\n")
    if groups:
        sys.stdout.write(table(["device type", "recorded under driver", "records"],
                               [[g.device_type, g.old_driver or "(unknown)", str(g.records)] for g in groups]) + "\n")
    sys.stdout.write(f"to apply: {how}\n")
    return 0


def run_recover(args: argparse.Namespace) -> int:
    import socket

    from canary.admission import open_store_for_writing, utcnow
    from canary.admission.recovery import recover_store
    from canary.fleetwork.runner import process_alive
    from evidence_store import warm_queue
    from evidence_store.database import session_scope

    engine = open_store_for_writing(args.db)
    report = recover_store(engine, now=utcnow(), kill=not args.no_kill)
    # A fleet warm node killed on this host (SIGKILL) leaves its pair leased until the lease expires:
    # released now, so a rerun of the run claims it at once. Holders on other hosts keep their leases.
    with session_scope(engine) as session:
        released = warm_queue.release_dead_local(session, host=socket.gethostname(), pid_alive=process_alive,
                                                 now=utcnow())
    if args.json:
        sys.stdout.write(json.dumps([{**p.__dict__, "lease_expired_at": p.lease_expired_at.isoformat()}
                                     for p in report.probes], indent=2) + "\n")
    else:
        for p in report.probes:
            sys.stdout.write(f"probe {p.probe_id} (owner {p.owner}, pgid {p.pgid}): aborted; canary {p.action}: "
                             f"{p.detail}\n")
        for item_id, owner in released:
            sys.stdout.write(f"fleet warm pair {item_id}: lease of {owner} released (that process is gone from "
                             "this host); queued again\n")
        sys.stdout.write(f"{report.aborted} orphaned probe(s) aborted"
                         + (f"; {len(report.failed)} canary process group(s) may still run" if report.failed else "")
                         + (f"; {len(released)} fleet warm lease(s) of dead local processes released"
                            if released else "") + "\n")
    return 4 if report.failed else 0


def run_warm_history(args: argparse.Namespace) -> int:
    """``canary warm --from-history``: print the plan, store it with the run, run it (docs/operations.md)."""
    import datetime as dt

    import anyio

    from canary.admission import open_store_for_writing, utcnow
    from canary.errors import InputError
    from canary.jobs.history import build_plan, default_run_id, parse_duration, warm_from_history
    from canary.jobs.warm import WarmReport
    from canary.tables import table
    from evidence_store.database import session_scope

    since = args.since if args.since is not None else SINCE_DEFAULT
    top = args.top if args.top is not None else TOP_DEFAULT
    since_s = parse_duration(since, "--since")
    within_s = None if args.expiring_within is None else parse_duration(args.expiring_within, "--expiring-within")
    budget_s = args.budget_s if args.budget_s is not None else 3600.0
    if not budget_s > 0:
        raise InputError(f"must be positive, got {budget_s}", field="--budget-s")
    engine = open_store_for_writing(args.db)
    now = utcnow()
    with session_scope(engine, read_only=True) as session:
        plan = build_plan(session, now=now, since_s=since_s, expiring_within_s=within_s, top=top)
    run_id = args.run_id or default_run_id(now)
    params = {"since": since, "since_s": since_s, "expiring_within": args.expiring_within, "top": top,
              "budget_s": budget_s, "built_at": now.isoformat()}
    if not args.json:
        sys.stdout.write(f"plan {run_id} (from history since {since}"
                         + (f", evidence expiring within {args.expiring_within}" if args.expiring_within else "")
                         + f", top {top}): {len(plan)} pair(s)\n")
        sys.stdout.write(table(["#", "reason", "requests", "last requested", "pair"], [
            [str(i + 1), e.reason, str(e.requests), f"{e.last_requested_at:%Y-%m-%d %H:%M}", e.label]
            for i, e in enumerate(plan)]) + "\n")
    if not plan:
        if args.json:
            sys.stdout.write(json.dumps({"run_id": run_id, "plan": [], "pairs": []}) + "\n")
        else:
            sys.stdout.write(f"no admissions recorded since {since} (canary admit and canary serve record them)"
                             + (" and no evidence expiring within " + args.expiring_within
                                if args.expiring_within else "") + ": nothing to warm\n")
        return 0

    # evidence that expires inside the window is not fresh for this run: its pairs are probed again
    fresh_until = None if within_s is None else now + dt.timedelta(seconds=within_s)

    async def go() -> WarmReport:
        return await warm_from_history(plan, engine=engine, run_id=run_id, params=params, budget_s=budget_s,
                                       fresh_until=fresh_until, seed=args.seed, progress=_progress)

    report = anyio.run(go)
    if args.json:
        doc = json.loads(_as_json(report))
        sys.stdout.write(json.dumps({**doc, "run_id": run_id, "plan": [e.summary() for e in plan]}, indent=2) + "\n")
    else:
        _print_report(report, drift=False)
    return _exit_code(report)
