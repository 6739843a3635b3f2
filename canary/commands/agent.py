"""``canary agent`` (one per node) and ``canary drift`` (driver-change reports)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from canary.errors import InputError


def add_parser(sub: Any) -> None:
    ag = sub.add_parser("agent", help="node agent: publish this node's device snapshots, run its probes",
                        description="One per node. Publishes each local device's snapshot (driver version, "
                        "taken-at time) into the shared store on a heartbeat, runs the probes queued for its "
                        "devices, and revalidates the hottest pairs when a device's driver changes.")
    acts = ag.add_subparsers(dest="action", metavar="ACTION")
    run = acts.add_parser("run", help="run the agent (until stopped)")
    run.add_argument("--config", help="agent configuration (YAML), see docs/operations.md")
    run.add_argument("--node", help="this node's name (default: the configuration's, else the host name)")
    run.add_argument("--device", dest="device_specs", action="append", default=[], metavar="NAME=SOURCE",
                     help="a local device: nvml:N, rocm:N, cuda:N or a snapshot file (repeatable)")
    run.add_argument("--heartbeat-s", type=float, help="how often snapshots are published, in seconds (default: "
                     "the configuration's, else 5)")
    run.add_argument("--lease-s", type=float, help="a running probe's lease in seconds, renewed every third (default: "
                     "the configuration's, else 15)")
    run.add_argument("--claim-s", type=float,
                     help="how long a heartbeat holds the devices against a second agent (default: 3 heartbeats, "
                     "at least 15 s)")
    run.add_argument("--policy", help="policy name from policies/: staleness limit and revalidation budget "
                     "(default: the configuration's, else default)")
    run.add_argument("--sim-time-scale", type=float, help="wall seconds a simulated probe holds its device per "
                     "simulated second, 0..1 (default: the configuration's, else 0)")
    run.add_argument("--once", action="store_true", help="publish once, print what was published, and exit")
    run.set_defaults(handler=run_agent)

    ls = acts.add_parser("list", help="devices the node agents publish, with each snapshot's age")
    ls.add_argument("--node", help="only this node's devices (default: every node)")
    ls.add_argument("--json", action="store_true", help="print the devices as JSON on stdout")
    ls.set_defaults(handler=run_list)

    dr = acts.add_parser("drain", help="stop a node taking new probes and workloads (--undo to resume)")
    dr.add_argument("drain_node", metavar="NODE",  # own dest: `--node` lists elsewhere share the namespace
                    help="the node's name, as its agent publishes it")
    dr.add_argument("--undo", action="store_true", help="take probes and workloads again")
    dr.set_defaults(handler=run_drain)
    ag.set_defaults(handler=lambda a: _usage(ag))

    drift = sub.add_parser("drift", help="driver changes the agents saw; with ID, old vs new per pair",
                           description="Without ID: driver-change events, newest first. With ID: for each "
                           "revalidated pair, the outcome and resident slowdown under the old and the new driver.")
    drift.add_argument("id", nargs="?", help="one drift event's id (default: list the events)")
    drift.add_argument("--json", action="store_true", help="print the events (or the report) as JSON on stdout")
    drift.set_defaults(handler=run_drift)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _parse_device(text: str) -> tuple[str, str]:
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise InputError(f"{text!r}: use NAME=SOURCE (gpu0=nvml:0, gpu1=snapshots/b.yaml)", field="--device")
    return name, source


def build_config(args: argparse.Namespace) -> Any:
    import socket
    from pathlib import Path

    from canary._model import validate_document
    from canary.agent.config import AgentConfig, load_agent_config, resolve_sources

    data: dict[str, Any] = {}
    base = Path.cwd()
    if args.config:
        data = load_agent_config(args.config).model_dump()
        base = Path(args.config).resolve().parent
    devices = dict(data.get("devices") or {})
    devices.update(dict(_parse_device(d) for d in args.device_specs))
    overrides = {"node": args.node, "heartbeat_s": args.heartbeat_s, "lease_s": args.lease_s,
                 "claim_s": args.claim_s,
                 "policy": args.policy, "sim_time_scale": args.sim_time_scale, "db_url": args.db}
    data.update({k: v for k, v in overrides.items() if v is not None})
    data["devices"] = devices
    data.setdefault("node", socket.gethostname())
    if not devices:
        raise InputError("no devices: give --device NAME=SOURCE or a --config with devices:", field="devices")
    config = validate_document(AgentConfig, data, file=args.config or "command line")
    return resolve_sources(config, base)


def run_agent(args: argparse.Namespace) -> int:
    import logging
    import signal

    import anyio

    from canary.admission import open_store_for_writing
    from canary.agent.agent import Agent

    config = build_config(args)
    for source in config.devices.values():  # a bad snapshot file is bad input, before anything is written
        if not source.startswith(("nvml:", "cuda:", "rocm:")):
            from canary.backends import resolve_device

            resolve_device(source)  # as every heartbeat reads it (canary.agent.agent.read_device)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    engine = open_store_for_writing(config.db_url, announce=lambda m: sys.stderr.write(f"canary: {m}\n"))
    agent = Agent(config, engine, on_drift=lambda d: sys.stderr.write(
        f"canary agent: driver change: event {d.event_id}, {d.stale_marked} record(s) marked stale, "
        f"{len(d.probes)} revalidation probe(s) queued\n"))
    if args.once:
        agent.claim()
        try:
            agent.heartbeat()
        finally:
            agent.release()
        sys.stdout.write(json.dumps({"owner": agent.owner, "devices": sorted(agent.device_ids),
                                     "errors": agent.last_errors}, indent=2) + "\n")
        return 4 if agent.last_errors else 0

    agent.claim()  # another live agent holds a device: one line naming it, before anything is said or done

    async def main() -> None:
        stop = anyio.Event()
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    async for _ in signals:
                        stop.set()
                        return

                tg.start_soon(watch)
                sys.stderr.write(f"canary agent {agent.owner}: {len(config.devices)} device(s), heartbeat "
                                 f"{config.heartbeat_s:g} s, lease {config.lease_s:g} s\n")
                sys.stderr.flush()
                await agent.run(stop=stop)
                tg.cancel_scope.cancel()

    from canary.agent.agent import unwrap_claimed

    with unwrap_claimed():
        anyio.run(main)
    return 0


@contextmanager
def _existing_store(args: argparse.Namespace) -> Iterator[Any]:
    """The store the agents publish into, which must exist: ``list``, ``drift`` and ``drain`` read or
    change what agents wrote there, so a SQLite path with no file is exit 4 ``no store at PATH`` and
    nothing is created (a mistyped path must not become a new, empty store). Only ``agent run``
    creates a store (``open_store_for_writing``)."""
    from evidence_store.cli_support import store

    with store(args.db) as engine:
        yield engine


def run_list(args: argparse.Namespace) -> int:
    from canary.admission import utcnow
    from canary.tables import table
    from evidence_store import published
    from evidence_store.database import session_scope

    now = utcnow()
    with _existing_store(args) as engine, session_scope(engine, read_only=True) as session:
        rows = published.list_published(session, node=args.node)
    if args.json:
        sys.stdout.write(json.dumps([{"ref": r.ref, "device_id": r.device_id, "node": r.node, "agent": r.agent,
                                      "device_type": r.device_type, "driver_version": r.driver_version,
                                      "taken_at": r.taken_at.isoformat(), "age_s": round(r.age_s(now), 3),
                                      "draining": r.draining, "claim_expires_at": r.claim_expires_at.isoformat(),
                                      "claimed": r.claim_expires_at > now} for r in rows], indent=2) + "\n")
        return 0
    sys.stdout.write(table(["device", "type", "driver", "age", "state", "agent", "claim"], [
        [r.ref, r.device_type, r.driver_version or "–", f"{r.age_s(now):.0f} s",
         "draining" if r.draining else "active", r.agent,
         f"{(r.claim_expires_at - now).total_seconds():.0f} s left" if r.claim_expires_at > now else "free"]
        for r in rows]) + "\n")
    return 0


def run_drain(args: argparse.Namespace) -> int:
    from evidence_store import published
    from evidence_store.database import session_scope

    with _existing_store(args) as engine, session_scope(engine) as session:
        n = published.set_draining(session, node=args.drain_node, draining=not args.undo)
    if n == 0:
        raise InputError(f"no agent publishes devices of node {args.drain_node!r}", field="NODE")
    sys.stdout.write(f"node {args.drain_node}: {n} device(s) {'active again' if args.undo else 'draining'}\n")
    return 0


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}%"


def run_drift(args: argparse.Namespace) -> int:
    from canary.tables import table
    from evidence_store import drift as store_drift
    from evidence_store.database import session_scope

    with _existing_store(args) as engine, session_scope(engine, read_only=True) as session:
        if args.id is None:
            # probes: the pairs the event listed for re-probing; probed: how many of them were probed
            # (a pair that did not fit or was fresh was not)
            events = [{"id": e.id, "node": e.node, "device_id": e.device_id, "device_type": e.device_type,
                       "old_driver": e.old_driver, "new_driver": e.new_driver,
                       "detected_at": e.detected_at.isoformat(), "stale_marked": e.stale_marked,
                       "probes": len(e.probes_json), "probed": store_drift.probed_count(session, e),
                       "budget": e.budget} for e in store_drift.list_drift(session)]
            report: Any = events
        else:
            # a unique prefix names an event, as evidence and reservation ids do (exit 2 when ambiguous)
            report = store_drift.drift_report(session, store_drift.resolve_drift(session, args.id).id)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 0
    if args.id is None:
        sys.stdout.write(table(["id", "node", "type", "old driver", "new driver", "detected", "stale",
                                "probed/pairs"], [
            [e["id"], e["node"], e["device_type"], e["old_driver"] or "–", e["new_driver"] or "–", e["detected_at"],
             str(e["stale_marked"]), f"{e['probed']}/{e['probes']}"] for e in report]) + "\n")
        return 0
    sys.stdout.write(f"{report['node']} {report['device_type']}: driver {report['old_driver']} → "
                     f"{report['new_driver']}; {report['stale_marked']} record(s) marked stale\n")
    sys.stdout.write(table(["pair", "probe", "old outcome", "old slowdown", "new outcome", "new slowdown", "change"], [
        [p["label"], p["probe_state"] or "–", p["old_outcome"] or "–", _pct(p["old_slowdown_pct"]),
         p["new_outcome"] or "–", _pct(p["new_slowdown_pct"]), _pct(p["change_pct"])] for p in report["pairs"]]) + "\n")
    return 0
