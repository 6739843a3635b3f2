"""The CLI's side of the service: ``canary fit/admit --server URL`` (or ``$CANARY_SERVER``).

Files named on the command line are read here, on the caller's machine, and sent by value (a snapshot
file with its residents' profiles, a live device read locally); a ``name@version`` that is not a file
is sent as a registry reference, and an ``agent:NODE/NAME`` device as the name of what that node's
agent publishes to the service's store (only the server can read it). A 202 is followed by long-polling ``/v1/probes/{id}`` until the probe
is final. HTTP errors become the CLI's exit codes: 422 → 2 (bad input), 401/403 → 2 (the token),
anything else or no answer → 4.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from canary.certificate import Certificate
from canary.errors import InputError, OperationalError

POLL_WAIT = "30s"
AGENT_PREFIX = "agent:"


def _profile_arg(ref: str) -> Any:
    from canary.profile import load_profile

    if "@" in ref and not Path(ref).exists():
        return ref
    return load_profile(ref).model_dump(mode="json")


def _device_arg(ref: str) -> Any:
    from canary.backends import resolve_device

    if ("@" in ref or ref.startswith(AGENT_PREFIX)) and not Path(ref).exists():
        return ref
    device = resolve_device(ref)
    if device.kind == "catalog":
        return ref
    return device.snapshot.model_dump(mode="json")


def request_body(args: Any, *, admit: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "device": _device_arg(args.device),
        "candidate": _profile_arg(args.profile),
        "residents": [_profile_arg(r) for r in args.resident],
    }
    if args.regime:
        body["regime"] = args.regime
    if args.policy:
        if Path(args.policy).suffix:
            raise InputError("with --server, --policy names a policy of the server (a name, not a file)",
                             field="--policy")
        body["policy"] = args.policy
    if admit:
        body["probe"] = not args.no_probe
        body["seed"] = args.seed
    return body


SERVER_ENV = "CANARY_SERVER"


def check_server_url(url: str, *, field: str | None = None) -> str:
    """``url`` if it is ``http(s)://host[:port][/path]``, else ``InputError`` naming ``field`` (by default
    ``--server``, or ``$CANARY_SERVER`` when that is where the URL came from). A URL that cannot be a
    service's address is bad input (exit 2), not a service that did not answer (exit 4)."""
    from urllib.parse import urlsplit

    if field is None:
        field = f"${SERVER_ENV}" if os.environ.get(SERVER_ENV) == url else "--server"
    want = "expected http://HOST[:PORT] or https://HOST[:PORT]"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{url!r} is not a URL ({exc}); {want}", field=field) from None
    if parts.scheme not in ("http", "https"):
        why = "has no scheme" if not parts.scheme or not parts.netloc else f"has scheme {parts.scheme!r}"
        raise InputError(f"{url!r} {why}; {want}", field=field)
    if not parts.hostname:
        raise InputError(f"{url!r} names no host; {want}", field=field)
    if port == 0:
        raise InputError(f"{url!r} names port 0; {want}", field=field)
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InputError(f"{url!r} has a query, fragment or credentials (send the token with --token or "
                         f"$CANARY_TOKEN); {want}", field=field)
    return url


#: The request's body fields as this command line names them (``canary.serve.problems`` maps the other way).
_BODY_FIELD = re.compile(r"'body\.(regime|policy|candidate|device|seed|probe|residents\[(\d+)\])((?:\.[^']*)?)'")


def cli_fields(detail: str) -> str:
    """A 422's detail with the body's fields named as the command line gave them: ``'body.regime'`` is
    ``'--regime'``, ``'body.candidate.memory'`` is ``'memory' of PROFILE``, ``body.residents[1]`` the
    second ``--resident``."""

    def name(m: re.Match[str]) -> str:
        field, index, rest = m.group(1), m.group(2), m.group(3).lstrip(".")
        option = {"regime": "--regime", "policy": "--policy", "candidate": "PROFILE", "device": "DEVICE",
                  "seed": "--seed", "probe": "--no-probe"}.get(field)
        if option is None:
            option = f"--resident #{int(index) + 1}"
        return f"'{rest}' of {option}" if rest else f"'{option}'"

    return _BODY_FIELD.sub(name, detail)


#: The client's TLS options and the variables that stand in for them.
TLS_OPTIONS = {"ca": ("--tls-ca", "CANARY_TLS_CA"), "cert": ("--tls-cert", "CANARY_TLS_CERT"),
               "key": ("--tls-key", "CANARY_TLS_KEY")}


@dataclass(frozen=True)
class ClientTls:
    """How the CLI reaches an https service: the CA bundle that signed its certificate (``None``: the
    system's), and the client certificate and key that a server with ``--tls-ca`` (mTLS) requires.
    ``fields`` names where each file came from (an option or a variable), for error messages."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    fields: tuple[tuple[str, str], ...] = ()

    def field(self, which: str) -> str:
        return dict(self.fields).get(which, TLS_OPTIONS[which][0])

    def context(self) -> ssl.SSLContext:
        """The verifying SSL context; a file that is missing, unreadable or not PEM of the right kind is
        ``InputError`` naming the option (or variable) and the file."""
        if self.key is not None and self.cert is None:
            raise InputError(f"a client key ({self.key}) without a client certificate: give "
                             f"{TLS_OPTIONS['cert'][0]} too", field=self.field("key"))
        try:
            ctx = ssl.create_default_context(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"cannot load the CA bundle {self.ca}: {exc}", field=self.field("ca")) from None
        if self.cert is not None:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                files = self.cert if self.key is None else f"{self.cert} with key {self.key}"
                raise InputError(f"cannot load the client certificate {files}: {exc}",
                                 field=self.field("cert")) from None
        return ctx


def tls_from(args: Any) -> ClientTls:
    """``--tls-ca/--tls-cert/--tls-key``, each defaulting to its variable (``$CANARY_TLS_CA`` …)."""
    values: dict[str, str | None] = {}
    fields: list[tuple[str, str]] = []
    for which, (option, env) in TLS_OPTIONS.items():
        given = getattr(args, option.lstrip("-").replace("-", "_"), None)
        value = given or os.environ.get(env) or None
        values[which] = value
        if value is not None:
            fields.append((which, option if given else f"${env}"))
    return ClientTls(ca=values["ca"], cert=values["cert"], key=values["key"], fields=tuple(fields))


class ServiceClient:
    def __init__(self, base_url: str, token: str | None, *, timeout_s: float = 60.0,
                 field: str | None = None, tls: ClientTls | None = None) -> None:
        check_server_url(base_url, field=field)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        verify: ssl.SSLContext | bool = True
        if tls is not None and (tls.ca or tls.cert or tls.key):
            verify = tls.context()
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s),
                                 verify=verify)

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            hint = ""
            # under TLS 1.3 a server that wants a client certificate and gets none just hangs up
            if self.base_url.startswith("https:") and (
                    "SSL" in str(exc).upper() or isinstance(exc, httpx.ConnectError | httpx.RemoteProtocolError)):
                hint = (" (TLS: --tls-ca or $CANARY_TLS_CA names the CA that signed the server's certificate; a "
                        "server that requires client certificates needs --tls-cert and --tls-key)")
            raise OperationalError(f"canary service {self.base_url} did not answer: {exc}{hint}") from None
        if response.status_code in (200, 202):
            return response
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text[:500]
        where = f"canary service {self.base_url}{path}"
        if response.status_code == 422 and isinstance(detail, str):
            detail = cli_fields(detail)
        if response.status_code in (401, 403, 404, 409, 413, 422):
            raise InputError(f"{where} answered {response.status_code}: {detail}")
        raise OperationalError(f"{where} answered {response.status_code}: {detail}")

    def decide(self, path: str, body: dict[str, Any], progress: Any = None) -> Certificate:
        response = self._call("POST", path, json=body)
        if response.status_code == 200:
            return Certificate.model_validate_json(response.text)
        location = response.headers.get("location") or f"/v1/probes/{response.json()['id']}"
        while True:
            status = response.json()
            if progress is not None:
                progress(status)
            state = status["state"]
            if state == "done" and status.get("certificate") is not None:
                return Certificate.model_validate_json(json.dumps(status["certificate"]))
            if state in ("failed", "cancelled", "aborted"):
                raise OperationalError(f"probe {status['id']} {state}: {status.get('error') or 'no reason given'}")
            response = self._call("GET", location, params={"wait": POLL_WAIT})


def token_from(args: Any) -> str | None:
    token: str | None = getattr(args, "token", None) or os.environ.get("CANARY_TOKEN") or None
    return token
