"""Operator configuration of ``canary serve``: only the operator decides where the service listens,
which store it uses, how simulated probes are paced, and which snapshots describe which Kubernetes
node. Nothing here can come from a request."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from canary._model import load_document


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
    nodes: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Kubernetes node name → its devices: snapshot files, registry references "
        "(snapshot name@version) or catalog names")
    default_policy: str = "default"
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

    @property
    def tls(self) -> bool:
        return self.tls_certfile is not None


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
