"""``canary fit`` / ``gpu-fit``: stage 1 plus an evidence lookup. Never probes.

Kept light: it imports SQLAlchemy only when a pair fits and an evidence store exists."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canary.errors import EXIT_ADMIT, EXIT_REJECT, EXIT_UNKNOWN

VERDICT_EXIT = {"admit": EXIT_ADMIT, "reject": EXIT_REJECT, "unknown": EXIT_UNKNOWN}


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("device", metavar="DEVICE",
                        help="catalog name (idle simulated device), snapshot file, or nvml:N / cuda:N / rocm:N")
    parser.add_argument("profile", metavar="PROFILE", help="the candidate's workload profile (YAML or JSON)")
    parser.add_argument("--resident", action="append", default=[], metavar="PROFILE",
                        help="a resident's profile, added to the device's residents (repeatable)")
    parser.add_argument("--regime", help="timeslice, streams, mps:PCT, mig:PROFILE or green:SMS "
                        "(default: follows the device's sharing state)")
    parser.add_argument("--policy", help="policy name from policies/ or a file (default: default)")
    parser.add_argument("--json", action="store_true", help="print the certificate as JSON")
    parser.add_argument("--no-store", action="store_true", help="do not consult the evidence store")
    add_server_arguments(parser)
    parser.set_defaults(handler=run)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", metavar="URL",
                        help="ask this canary service instead of deciding locally (default: $CANARY_SERVER)")
    parser.add_argument("--token", help="bearer token for --server (default: $CANARY_TOKEN)")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="CA bundle (PEM) that signed an https --server's certificate (default: $CANARY_TLS_CA, "
                        "else the system's)")
    parser.add_argument("--tls-cert", metavar="FILE",
                        help="client certificate (PEM) for a server that requires one (mTLS; default: $CANARY_TLS_CERT)")
    parser.add_argument("--tls-key", metavar="FILE",
                        help="the client certificate's private key (PEM), unless the certificate file holds it "
                        "(default: $CANARY_TLS_KEY)")


def print_certificate(cert: Any, args: argparse.Namespace) -> int:
    from canary.render import certificate_text

    if args.json:
        sys.stdout.write(cert.to_json() + "\n")
    else:
        sys.stdout.write(certificate_text(cert, verbose=bool(args.verbose)) + "\n")
    return VERDICT_EXIT[cert.verdict]


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("fit", help="stage-1 fit and evidence lookup; never probes",
                            description="Stage-1 fit and evidence lookup; never probes. Exit 0 admit, "
                            "1 reject, 3 unknown, 2 bad input, 4 operational failure.")
    add_fit_arguments(parser)


def server_url(args: argparse.Namespace) -> str | None:
    """``--server`` or ``$CANARY_SERVER``; read here so a local ``gpu-fit`` imports nothing of the service."""
    import os

    server: str | None = getattr(args, "server", None) or os.environ.get("CANARY_SERVER") or None
    return server


def check_local_references(args: argparse.Namespace) -> None:
    """Without ``--server``: an ``agent:NODE/NAME`` device or a ``name@version`` registry reference is
    something only the canary service reads, so say that (exit 2) before any file is looked for. The
    device is checked first: its message is the documented one."""
    from pathlib import Path

    from canary.errors import UsageError

    if args.device.startswith("agent:") and not Path(args.device).exists():
        from canary.backends import resolve_device

        resolve_device(args.device)  # raises the documented "agent: … --server" input error
    for ref, field in ((args.profile, "PROFILE"), *((r, "--resident") for r in args.resident)):
        if "@" in ref and not Path(ref).exists():
            raise UsageError(
                f"{ref!r} is not a file; a NAME@VERSION registry reference is read by the canary service: add "
                f"--server URL (or set $CANARY_SERVER), or give the profile's file (`canary profiles show {ref}` "
                "prints a stored one)", field=field)


def run(args: argparse.Namespace) -> int:
    server = server_url(args)
    if server is not None:
        from canary.serve.client import ServiceClient, request_body, tls_from, token_from

        with ServiceClient(server, token_from(args), tls=tls_from(args)) as client:
            return print_certificate(client.decide("/v1/fit", request_body(args, admit=False)), args)
    from canary.admission import EvidenceAccess, fit, load_request, utcnow
    from canary.render import certificate_text

    check_local_references(args)
    req = load_request(args.device, args.profile, resident_paths=tuple(args.resident),
                       regime=args.regime, policy_ref=args.policy)
    access = None if args.no_store else EvidenceAccess(args.db)
    cert = fit(req, access, utcnow())
    if args.json:
        sys.stdout.write(cert.to_json() + "\n")
    else:
        sys.stdout.write(certificate_text(cert, verbose=bool(args.verbose)) + "\n")
    return VERDICT_EXIT[cert.verdict]
