"""``canary serve``: the admission service (HTTP /v1, scheduler extender, /metrics);
``canary tokens create|list|revoke``: its bearer tokens (stored hashed, shown once)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canary.errors import EXIT_ADMIT


def auth_summary(config: Any) -> str:
    """How callers authenticate, as the start-up line says it: the API's auth and the extender's when they
    differ (``extender_auth: none`` serves the scheduler's verbs without a token), and mTLS."""
    def said(mode: str) -> str:
        return "bearer token" if mode == "token" else "no auth"

    out = f"auth: {said(config.auth)}"
    if config.extender_auth != config.auth:
        out += f", extender verbs: {said(config.extender_auth)}"
    if config.tls_ca_certs is not None:
        out += ", client certificates required (mTLS)"
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the admission service (HTTP API, scheduler extender, metrics)",
                       description="Run the admission service. Listens on 127.0.0.1 unless told otherwise; "
                       "requires bearer tokens (canary tokens create) unless --no-auth on loopback. "
                       "See docs/serve.md.")
    p.add_argument("--config", metavar="FILE", help="serve configuration (YAML/JSON; see docs/serve.md); "
                   "the options below override it")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8765)")
    p.add_argument("--workers", type=int, help="server processes (default 1)")
    p.add_argument("--no-auth", action="store_true", help="serve without tokens (loopback addresses only)")
    p.add_argument("--tls-cert", metavar="FILE", help="TLS certificate (PEM); with --tls-key")
    p.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    p.add_argument("--tls-ca", metavar="FILE", help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--sim-time-scale", type=float, metavar="X",
                   help="wall seconds per simulated second a simulated probe holds its device (0..1)")
    p.add_argument("--node", action="append", default=[], metavar="NODE=DEVICE[,DEVICE…]",
                   help="a Kubernetes node's devices for the extender (snapshot files, name@version, catalog names)")
    p.add_argument("--openapi", action="store_true", help="print the OpenAPI document and exit (docs/openapi.json)")
    p.set_defaults(handler=run_serve)

    t = sub.add_parser("tokens", help="bearer tokens of canary serve: create, list, revoke",
                       description="Tokens are stored as scrypt hashes; a new token is printed once.")
    ts = t.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    c = ts.add_parser("create", help="create a token and print it (once)")
    c.add_argument("--name", required=True, help="who or what uses it")
    c.add_argument("--scope", action="append", required=True,
                   help="read, fit, admit, feedback or admin (repeatable; admin implies all)")
    c.add_argument("--expires-in-days", type=float, help="expiry (default: never)")
    c.set_defaults(handler=run_token_create)
    ls = ts.add_parser("list", help="tokens (ids, names, scopes; never secrets)")
    ls.set_defaults(handler=run_token_list)
    rv = ts.add_parser("revoke", help="revoke a token (it stops working within the servers' token cache time)")
    rv.add_argument("id", help="the token's id (canary tokens list)")
    rv.set_defaults(handler=run_token_revoke)


def build_config(args: argparse.Namespace) -> Any:
    from canary.errors import InputError
    from canary.serve.config import ServeConfig, load_config

    base = load_config(args.config) if args.config else ServeConfig()
    changes: dict[str, Any] = {}
    for opt, field in (("host", "host"), ("port", "port"), ("workers", "workers"), ("tls_cert", "tls_certfile"),
                       ("tls_key", "tls_keyfile"), ("tls_ca", "tls_ca_certs"), ("sim_time_scale", "sim_time_scale")):
        value = getattr(args, opt)
        if value is not None:
            changes[field] = value
    if args.no_auth:
        changes["auth"] = "none"
        changes["extender_auth"] = "none"
    if args.db:
        changes["db_url"] = args.db
    if args.node:
        nodes = dict(base.nodes)
        for spec in args.node:
            name, sep, devices = spec.partition("=")
            if not sep or not name or not devices:
                raise InputError(f"expected NODE=DEVICE[,DEVICE…], got {spec!r}", field="--node")
            nodes[name] = tuple(d for d in devices.split(",") if d)
        changes["nodes"] = nodes
    from pydantic import ValidationError

    from canary._model import validation_to_input_error

    try:
        return ServeConfig.model_validate(base.model_dump() | changes)
    except ValidationError as exc:
        raise validation_to_input_error(exc, args.config or "serve options") from None


def run_serve(args: argparse.Namespace) -> int:
    from canary.admission import open_store_for_writing
    from canary.serve.main import run

    config = build_config(args)
    if args.openapi:
        from canary.serve.app import openapi_document

        sys.stdout.write(openapi_document(config) + "\n")
        return EXIT_ADMIT
    # Fail here, with exit 4 and one line, when the store is unreachable or not migrated — not in a worker.
    open_store_for_writing(config.db_url, announce=lambda m: sys.stderr.write(f"canary: {m}\n")).dispose()
    scheme = "https" if config.tls else "http"
    address = f"{scheme}://{_host_in_url(config.host)}:{config.port}"
    check_listen(config.host, config.port, address)  # before saying "serving on"
    sys.stderr.write(f"canary: serving on {address} ({config.workers} worker(s), {auth_summary(config)})\n")
    try:
        run(config, log_level="info" if args.verbose else "warning", access_log=bool(args.verbose))
    except SystemExit as exc:  # uvicorn's start-up failure is its exit 3, which is canary's "unknown"
        if exc.code in (0, None):
            return EXIT_ADMIT
        from canary.errors import OperationalError

        raise OperationalError(f"the service on {address} stopped at start-up (server exit {exc.code}); "
                               "its reason is above") from None
    return EXIT_ADMIT


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def check_listen(host: str, port: int, address: str) -> None:
    """Bind (and release) the listen address as the server will (``SO_REUSEADDR``, IPv6 for an address
    with a colon), so a port in use or an address this machine does not have is one line and exit 4
    before the service announces itself. Another process may still take the port in between; the
    server's own failure is then exit 4 too."""
    import errno
    import socket

    from canary.errors import OperationalError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        why = {errno.EADDRINUSE: "the address is already in use (another server on this port?)",
               errno.EACCES: "permission denied (ports below 1024 need privileges)",
               errno.EADDRNOTAVAIL: "this machine has no such address"}.get(exc.errno or 0, exc.strerror or str(exc))
        raise OperationalError(f"cannot listen on {address}: {why}; choose another --port or --host") from None


def run_token_create(args: argparse.Namespace) -> int:
    import datetime as dt

    from canary.admission import open_store_for_writing
    from evidence_store.database import session_scope
    from evidence_store.service import tokens

    now = dt.datetime.now(dt.UTC)
    expires = None if args.expires_in_days is None else now + dt.timedelta(days=args.expires_in_days)
    tokens.parse_scopes(args.scope)  # validate before touching the store
    engine = open_store_for_writing(args.db)
    try:
        with session_scope(engine) as session:
            secret, info = tokens.create(session, name=args.name, scopes=args.scope, now=now, expires_at=expires)
    finally:
        engine.dispose()
    sys.stderr.write(f"canary: token {info.id} ({info.name}; scopes {', '.join(sorted(info.scopes))}) — shown once, "
                     "store it now\n")
    sys.stdout.write(secret + "\n")
    return EXIT_ADMIT


def run_token_list(args: argparse.Namespace) -> int:
    from canary._model import utcnow
    from canary.tables import table
    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.service import tokens

    now = utcnow()
    with store(args.db) as engine, session_scope(engine, read_only=True) as session:
        infos = tokens.list_tokens(session)
    rows = [[i.id, i.name, ",".join(sorted(i.scopes)), i.created_at.isoformat(timespec="seconds"),
             "revoked" if i.revoked_at else ("expired" if not i.active_at(now) else "active")] for i in infos]
    sys.stdout.write(table(["id", "name", "scopes", "created", "state"], rows) + "\n" if rows else "no tokens\n")
    return EXIT_ADMIT


def run_token_revoke(args: argparse.Namespace) -> int:
    from canary._model import utcnow
    from evidence_store.cli_support import store
    from evidence_store.database import session_scope
    from evidence_store.service import tokens

    with store(args.db) as engine, session_scope(engine) as session:
        info = tokens.revoke(session, args.id, now=utcnow())
    sys.stdout.write(f"revoked token {info.id} ({info.name})\n")
    return EXIT_ADMIT
