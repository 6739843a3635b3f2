"""``canary admit``: both stages, with a live probe display; ``canary feedback``: a production SLO
violation for an admitted pair, recorded as evidence that outweighs earlier passes."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from canary.commands.fit import VERDICT_EXIT, add_fit_arguments
from canary.errors import say

if TYPE_CHECKING:
    import datetime as dt

    from sqlalchemy import Engine

    from canary.admission.request import Request


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("admit", help="both stages: stage 1, evidence, a bounded probe; records and reserves",
                            description="Stage 1, then the evidence cache, then — for pairs without fresh "
                            "evidence — a bounded canary probe. Evidence, reservation and certificate are "
                            "committed together. Exit 0 admit, 1 reject, 3 unknown, 2 bad input, 4 failure.")
    add_fit_arguments(parser)
    parser.add_argument("--no-probe", action="store_true", help="decide from stage 1 and evidence only")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the simulated device (simulated devices only; default: %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(handler=run_admit)

    fb = sub.add_parser("feedback", help="record a production SLO violation for an admitted pair")
    fb.add_argument("device", metavar="DEVICE", help="the device the pair shares, as for canary admit")
    fb.add_argument("profile", metavar="PROFILE", help="the admitted (candidate) profile")
    fb.add_argument("--resident", action="append", default=[], metavar="PROFILE",
                    help="a resident's profile, added to the device's residents (repeatable)")
    fb.add_argument("--resident-name", required=True, help="which resident's SLO was violated")
    fb.add_argument("--regime", help="the regime the pair was admitted under (default: the regime of the pair's "
                    "stored admission on this device; with none stored, the regime canary chooses)")
    fb.add_argument("--policy", help="policy name from policies/ or a file (default: default)")
    fb.add_argument("--slowdown-pct", type=float, help="the resident slowdown production observed, in percent "
                    "above its latency alone (> 0), if measured (default: not measured)")
    fb.set_defaults(handler=run_feedback)


class Progress:
    """One live line on a terminal; a line every few windows elsewhere (logs stay readable).

    A display never decides a probe: when its stream is gone — the reader of a pipe left
    (``| head``), stderr was closed (``2>&-``, where Python's ``sys.stderr`` is ``None``) — it stops
    displaying and the probe goes on."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        try:
            self.tty = stream is not None and bool(stream.isatty())
        except (OSError, ValueError, AttributeError):  # a closed or odd stream: not a terminal
            self.tty = False
        self.last_print = 0.0
        self.last_windows = -1

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # EPIPE, EBADF, a closed file: nobody is watching any more
            self.stream = None

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
            self._write("\r\x1b[2K" + line)
        elif (p.windows != self.last_windows and (p.windows % 10 == 0 or now - self.last_print > 2.0)) or p.state in (
                "DECIDED", "ABORTED", "RECORDED"):
            self._write(line + "\n")
            self.last_print = now
        self.last_windows = p.windows

    def done(self) -> None:
        if self.tty:
            self._write("\n")


def _remote_progress(stream: Any) -> Any:
    seen: set[str] = set()

    def show(status: dict[str, Any]) -> None:
        if status["state"] not in seen:
            seen.add(status["state"])
            say(stream, f"canary: probe {status['id']} {status['state']} (shared by {status['waiters']} "
                        f"request(s))\n")

    return show


def run_admit(args: argparse.Namespace) -> int:
    from canary.commands.fit import server_url

    if args.no_store:
        from canary.errors import UsageError

        raise UsageError("canary admit records evidence and books memory in the evidence store, so it cannot "
                         "run without one; canary fit --no-store decides stage 1 without the store", field="--no-store")
    server = server_url(args)
    if server is not None:
        from canary.commands.fit import print_certificate
        from canary.serve.client import ServiceClient, request_body, tls_from, token_from

        with ServiceClient(server, token_from(args), tls=tls_from(args)) as client:
            cert = client.decide("/v1/admissions", request_body(args, admit=True),
                                 progress=None if args.quiet else _remote_progress(sys.stderr))
        return print_certificate(cert, args)
    from canary.admission import admit, load_request
    from canary.commands.fit import check_local_references
    from canary.render import certificate_text

    check_local_references(args)
    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident),
                       regime=args.regime, policy_ref=args.policy)
    progress = None if args.quiet else Progress(sys.stderr)
    cert = admit(req, db_url=args.db, probe=not args.no_probe, progress=progress,
                 announce=lambda m: say(sys.stderr, f"canary: {m}\n"), seed=args.seed, log_history=True)
    if progress is not None:
        progress.done()
    text = cert.to_json() if args.json else certificate_text(cert, verbose=bool(args.verbose))
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the decision stands and is recorded; its exit code still says which
        _drop_stdout()
    return VERDICT_EXIT[cert.verdict]


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush does not fail (and exit 120) again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def run_feedback(args: argparse.Namespace) -> int:
    import math

    from canary.admission import load_request, record_feedback, utcnow
    from canary.errors import UsageError

    if args.slowdown_pct is not None and not (math.isfinite(args.slowdown_pct) and 0 < args.slowdown_pct <= 10000):
        # a production SLO violation the pair caused is a slowdown: the resident ran slower beside the
        # candidate than alone (> 0 %); 0 or a speed-up contradicts the report
        raise UsageError(f"{args.slowdown_pct} is not the slowdown of an SLO violation: give the resident's slowdown "
                         "in percent above its latency alone (0 < value <= 10000), or leave --slowdown-pct out if "
                         "production did not measure it", field="--slowdown-pct")
    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident),
                       regime=args.regime, policy_ref=args.policy)
    from canary.admission.store import open_store_for_writing

    engine = open_store_for_writing(args.db)
    now = utcnow()
    regime_from = "given with --regime"
    if args.regime is None:
        req, regime_from = _admitted_regime(args, req, engine, now)
    evidence_id = record_feedback(req, resident_name=args.resident_name, db_url=args.db, engine=engine,
                                  observed_slowdown_pct=args.slowdown_pct, now=now)
    sys.stdout.write(f"recorded production SLO violation as evidence {evidence_id} under regime {req.regime} "
                     f"({regime_from}); it outweighs earlier passes for this pair until it expires\n")
    return 0


def _admitted_regime(args: argparse.Namespace, req: Request, engine: Engine, now: dt.datetime
                     ) -> tuple[Request, str]:
    """The request under the regime the pair's stored admission on this device was decided under — as
    ``POST /v1/feedback`` resolves it (``canary.serve.feedback.admitted_regimes``: one whose booking is
    still held first) — and where that regime came from. Several: ``UsageError`` naming ``--regime``.
    None stored: the regime canary chooses now, and the answer says so."""
    from canary.admission import load_request
    from canary.errors import UsageError
    from canary.serve.feedback import admitted_regimes, several_regimes
    from evidence_store.database import session_scope

    resident = next((r for r in req.snapshot.residents if r.name == args.resident_name), None)
    if resident is None:  # record_feedback names the residents there are
        return req, f"canary chose it: {req.regime_chosen_by}"
    with session_scope(engine, read_only=True) as session:
        admitted = admitted_regimes(session, req, resident, now)
    if len(admitted) > 1:
        raise UsageError(several_regimes(args.resident_name, req, admitted) + " with --regime", field="--regime")
    if not admitted:
        return req, f"no admission of this pair on this device is stored, so canary chose it: {req.regime_chosen_by}"
    one = admitted[0]
    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident), regime=one.regime,
                       policy_ref=args.policy)
    return req, (f"the regime of the stored admission of this pair, certificate {one.certificate_id}, booking "
                 f"{'held' if one.held else 'released or expired'}")
