"""``canary admit``: both stages, with a live probe display; ``canary feedback``: a production SLO
violation for an admitted pair, recorded as evidence that outweighs earlier passes."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from canary.commands.fit import VERDICT_EXIT, add_fit_arguments


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("admit", help="both stages: stage 1, evidence, a bounded probe; records and reserves",
                            description="Stage 1, then the evidence cache, then — for pairs without fresh "
                            "evidence — a bounded canary probe. Evidence, reservation and certificate are "
                            "committed together. Exit 0 admit, 1 reject, 3 unknown, 2 bad input, 4 failure.")
    add_fit_arguments(parser)
    parser.add_argument("--no-probe", action="store_true", help="decide from stage 1 and evidence only")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated device (simulated devices only)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(handler=run_admit)

    fb = sub.add_parser("feedback", help="record a production SLO violation for an admitted pair")
    fb.add_argument("device", metavar="DEVICE")
    fb.add_argument("profile", metavar="PROFILE", help="the admitted (candidate) profile")
    fb.add_argument("--resident", action="append", default=[], metavar="PROFILE")
    fb.add_argument("--resident-name", required=True, help="which resident's SLO was violated")
    fb.add_argument("--regime")
    fb.add_argument("--policy")
    fb.add_argument("--slowdown-pct", type=float, help="the resident slowdown production observed, if measured")
    fb.set_defaults(handler=run_feedback)


class Progress:
    """One live line on a terminal; a line every few windows elsewhere (logs stay readable)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.last_print = 0.0
        self.last_windows = -1

    def __call__(self, p: Any) -> None:
        est = "–" if p.estimate_pct is None else f"{p.estimate_pct:+.1f}%"
        interval = ""
        if p.interval_pct is not None and all(abs(v) != float("inf") for v in p.interval_pct):
            interval = f" [{p.interval_pct[0]:+.1f}%, {p.interval_pct[1]:+.1f}%]"
        line = (f"probe {p.state.lower():<11} time {p.time_used_s:6.1f}/{p.max_probe_time_s:g}s"
                f"{' (simulated)' if p.simulated else ''}  exposure {p.exposure_used}/{p.max_requests_exposed}"
                f"  windows {p.windows}  resident slowdown {est}{interval}")
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
        elif (p.windows != self.last_windows and (p.windows % 10 == 0 or now - self.last_print > 2.0)) or p.state in (
                "DECIDED", "ABORTED", "RECORDED"):
            self.stream.write(line + "\n")
            self.last_print = now
        self.last_windows = p.windows

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _remote_progress(stream: Any) -> Any:
    seen: set[str] = set()

    def show(status: dict[str, Any]) -> None:
        if status["state"] not in seen:
            seen.add(status["state"])
            stream.write(f"canary: probe {status['id']} {status['state']} (shared by {status['waiters']} "
                         f"request(s))\n")

    return show


def run_admit(args: argparse.Namespace) -> int:
    from canary.commands.fit import server_url

    server = server_url(args)
    if server is not None:
        from canary.commands.fit import print_certificate
        from canary.serve.client import ServiceClient, request_body, token_from

        with ServiceClient(server, token_from(args)) as client:
            cert = client.decide("/v1/admissions", request_body(args, admit=True),
                                 progress=None if args.quiet else _remote_progress(sys.stderr))
        return print_certificate(cert, args)
    from canary.admission import admit, load_request
    from canary.render import certificate_text

    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident),
                       regime=args.regime, policy_ref=args.policy)
    progress = None if args.quiet else Progress(sys.stderr)
    cert = admit(req, db_url=args.db, probe=not args.no_probe, progress=progress,
                 announce=lambda m: sys.stderr.write(f"canary: {m}\n"), seed=args.seed, log_history=True)
    if progress is not None:
        progress.done()
    if args.json:
        sys.stdout.write(cert.to_json() + "\n")
    else:
        sys.stdout.write(certificate_text(cert, verbose=bool(args.verbose)) + "\n")
    return VERDICT_EXIT[cert.verdict]


def run_feedback(args: argparse.Namespace) -> int:
    import math

    from canary.admission import load_request, record_feedback, utcnow
    from canary.errors import UsageError

    if args.slowdown_pct is not None and not (math.isfinite(args.slowdown_pct) and -100 <= args.slowdown_pct <= 10000):
        raise UsageError(f"{args.slowdown_pct} is not a slowdown in percent (a finite number, -100 … 10000)",
                         field="--slowdown-pct")
    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident),
                       regime=args.regime, policy_ref=args.policy)
    evidence_id = record_feedback(req, resident_name=args.resident_name, db_url=args.db,
                                  observed_slowdown_pct=args.slowdown_pct, now=utcnow())
    sys.stdout.write(f"recorded production SLO violation as evidence {evidence_id}; it outweighs earlier passes "
                     f"for this pair until it expires\n")
    return 0
