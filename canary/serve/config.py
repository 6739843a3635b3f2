"""Operator configuration of ``canary serve``: only the operator decides where the service listens,
which store it uses, how simulated probes are paced, and which snapshots describe which Kubernetes
node. Nothing here can come from a request."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from canary._model import load_document
from canary.errors import InputError

SNAPSHOT_SUFFIXES = (".yaml", ".yml", ".json")

NodeRefKind = Literal["file", "missing file", "registry", "catalog"]


def node_ref_kind(ref: str) -> NodeRefKind:
    """What one of a node's device entries names: a snapshot file (present, or missing: read at request
    time, so a missing one answers *unknown* then), a registry reference ``name@version``, or a catalog
    device (anything else)."""
    if "@" in ref:
        return "registry"
    if os.path.isfile(ref):
        return "file"
    if "/" in ref or os.sep in ref or ref.endswith(SNAPSHOT_SUFFIXES):
        return "missing file"
    return "catalog"


def _node_device(ref: str) -> str:
    """A node's device entry that names a catalog device must name one the catalog has (with its closest
    names when it does not): checked at start-up, not at the first scheduling request."""
    if node_ref_kind(ref) != "catalog":
        return ref
    from canary.catalog import lookup

    if ":" in ref:
        raise ValueError(f"{ref!r} is neither a snapshot file, a snapshot name@version nor a catalog device name")
    try:
        lookup(ref)
    except InputError as exc:
        raise ValueError(exc.problem) from None
    return ref


NodeDeviceRef = Annotated[str, AfterValidator(_node_device)]


def _policy_name(name: str) -> str:
    """The server's default policy must load (checked at start-up: a wrong name failed every request)."""
    from canary.policy import load_policy

    try:
        load_policy(name)
    except InputError as exc:
        raise ValueError(exc.problem) from None
    return name


class ServeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="listen address; loopback unless the operator says otherwise")
    port: int = Field(default=8765, ge=0, le=65535)
    db_url: str | None = Field(default=None, description="evidence store URL (default: $CANARY_DB_URL, else the "
                               "SQLite file in the user data directory)")
    auth: Literal["token", "none"] = Field(
        default="token", description="'none' is allowed only on a loopback address (local development, demos)")
    extender_auth: Literal["token", "none"] = Field(
        default="token", description="kube-scheduler cannot send bearer tokens: 'none' serves the extender verbs "
        "without one (put mTLS in front, or run the service beside the scheduler on loopback)")
    tls_certfile: str | None = None
    tls_keyfile: str | None = None
    tls_ca_certs: str | None = Field(default=None, description="CA bundle: when set, clients must present a "
                                     "certificate signed by it (mTLS)")
    workers: int = Field(default=1, ge=1, le=64)
    worker_healthcheck_s: int = Field(
        default=30, ge=1, le=600, description="with workers > 1: seconds a worker may take to answer the "
        "supervisor's liveness ping before it is killed and replaced. A worker starved of CPU on a busy node "
        "is slow, not hung; killing it drops every request and probe it holds (uvicorn's default is 5 s)")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    extender_max_body_bytes: int = Field(default=32 << 20, ge=1024, le=256 << 20)
    max_wait_s: float = Field(default=60.0, gt=0, le=600)
    probe_lease_s: float = Field(default=15.0, ge=1.0, le=3600)
    decision_threads: int = Field(
        default=4, ge=1, le=64, description="the blocking parts of decisions one worker process runs at once, each "
        "in a thread: preparing a request body seen for the first time, booking memory, queueing a probe, reading "
        "a SQLite store, the extender verbs (a cached decision on PostgreSQL runs on the event loop and needs "
        "none); more wait their turn in arrival order instead of sharing the interpreter lock and the store's "
        "connection pool all at once (which lengthens every one of them, the last most)")
    read_connections: int = Field(
        default=8, ge=1, le=256, description="PostgreSQL connections per worker process for decisions' reads (an "
        "asynchronous pool on the event loop); a read that finds them all busy waits for one")
    reads_in_flight: int = Field(
        default=4, ge=1, le=256, description="decision reads one worker process runs at once; decisions that "
        "arrive while all are in flight share the next read (one statement for all of them, begun after each "
        "arrived). Fewer: less store and CPU work per decision under load; more: less waiting")
    max_concurrent_probes: int = Field(default=8, ge=1, le=256, description="probes one server process runs at once")
    sim_time_scale: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="wall seconds a simulated probe holds its device per simulated second (0: as fast as the "
        "simulator runs; 1: real time). Lets a simulated fleet behave like a real one in time.")
    token_cache_s: float = Field(default=30.0, ge=0.0, le=3600,
                                 description="how long a verified token is trusted before the store is asked again")
    extender_profile_annotation: str = "canary.dev/profile"
    extender_regime_annotation: str = "canary.dev/regime"
    extender_policy_annotation: str = "canary.dev/policy"
    extender_unknown: Literal["filter", "admit"] = Field(
        default="filter", description="what the filter verb does with a node whose answer is unknown")
    extender_probe_unknown: bool = Field(
        default=True, description="queue a probe (one per pair) for pairs the filter found without evidence, so a "
        "later scheduling attempt is decided from evidence")
    nodes: dict[str, tuple[NodeDeviceRef, ...]] = Field(
        default_factory=dict, description="Kubernetes node name → its devices: snapshot files, registry references "
        "(snapshot name@version) or catalog names")
    default_policy: Annotated[str, AfterValidator(_policy_name)] = Field(
        default="default", description="the policy of a decision body that names none (a shipped policy name)")
    agent_silence_s: float = Field(
        default=60.0, gt=0, le=86400, description="a queued probe for a node agent's device whose agent has not "
        "published for this long is aborted (nobody else may run it): its waiters get that answer, not a hang")
    log_admissions: bool = Field(default=True, description="record each admission (pair and documents) as history "
                                 "for driver-change revalidation and `canary warm --from-history`")
    history_window_s: float = Field(
        default=0.05, ge=0.0, le=5.0, description="the history writer waits this long after a row arrives, so "
        "the rows of the admissions answered meanwhile share its INSERT and commit (the history is written "
        "after the answers either way; at shutdown every waiting row is written)")

    @model_validator(mode="after")
    def _safe(self) -> ServeConfig:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        if self.auth == "none" and not _is_loopback(self.host):
            raise ValueError(f"auth 'none' is refused on {self.host}: only a loopback address may serve without "
                             "tokens")
        return self

    @field_validator("tls_certfile")
    @classmethod
    def _certificate_file(cls, path: str | None) -> str | None:
        return None if path is None else _pem_file(path, "--tls-cert", "CERTIFICATE", "a certificate")

    @field_validator("tls_keyfile")
    @classmethod
    def _key_file(cls, path: str | None) -> str | None:
        return None if path is None else _pem_file(path, "--tls-key", "PRIVATE KEY", "a private key")

    @field_validator("tls_ca_certs")
    @classmethod
    def _ca_file(cls, path: str | None) -> str | None:
        return None if path is None else _pem_file(path, "--tls-ca", "CERTIFICATE", "CA certificates")

    @model_validator(mode="after")
    def _tls_files_load(self) -> ServeConfig:
        """Load the certificate, its key and the CA bundle as the server will, so a missing, unreadable or
        swapped file is bad input naming its field and file before the service announces itself."""
        if self.tls_certfile is not None and self.tls_keyfile is not None:
            check_tls_files(self.tls_certfile, self.tls_keyfile, self.tls_ca_certs)
        elif self.tls_ca_certs is not None:
            raise ValueError("tls_ca_certs (--tls-ca) needs tls_certfile and tls_keyfile (--tls-cert, --tls-key)")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_certfile is not None


def _pem_file(path: str, option: str, marker: str, what: str) -> str:
    """``path`` if it exists, is readable and holds a PEM block whose label contains ``marker``."""
    where = f"{path!r} ({option})"
    try:
        text = Path(path).read_bytes()[: 1 << 20].decode("ascii", errors="replace")
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{where}: is a directory, not a PEM file") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if not any(marker in line for line in text.splitlines() if line.startswith("-----BEGIN ")):
        labels = sorted({line.strip("-").removeprefix("BEGIN ") for line in text.splitlines()
                         if line.startswith("-----BEGIN ")})
        found = f"it holds {', '.join(labels)}" if labels else "it holds no PEM block"
        raise ValueError(f"{where}: expected {what} (PEM), but {found}")
    return path


def check_tls_files(certfile: str, keyfile: str, ca_certs: str | None) -> None:
    """Raise ``ValueError`` naming the field, option and file when the server's certificate, its key or
    the client CA bundle would not load (``ssl.SSLContext.load_cert_chain`` / ``load_verify_locations``)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"tls_certfile (--tls-cert) {certfile!r} and tls_keyfile (--tls-key) {keyfile!r} do not "
                         f"load as a certificate and its private key ({exc.strerror or exc}): is the key this "
                         "certificate's, and not encrypted?") from None
    if ca_certs is not None:
        try:
            context.load_verify_locations(cafile=ca_certs)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"tls_ca_certs (--tls-ca) {ca_certs!r}: does not load as CA certificates "
                             f"({exc.strerror or exc})") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config(path: str | Path) -> ServeConfig:
    """Load a serve configuration file (YAML or JSON); ``InputError`` names the file and field."""
    return load_document(ServeConfig, path)
