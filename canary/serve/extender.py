"""Kubernetes scheduler extender verbs: ``filter`` and ``prioritize``, in kube-scheduler's extender v1
JSON (``k8s.io/kube-scheduler/extender/v1``): ``ExtenderArgs`` → ``ExtenderFilterResult`` and
``ExtenderArgs`` → ``HostPriorityList``.

A pod names its profile by annotation (``canary.dev/profile: name@version``, from the registry);
optionally its regime (``canary.dev/regime``) and policy (``canary.dev/policy``). A node's devices come
from the operator's configuration (``nodes:`` — snapshot files, snapshot registry references, catalog
names) until node agents publish snapshots. Each device is decided like ``canary fit`` (stage 1 and
evidence, never a probe in the scheduler's path): a node passes when one of its devices admits. A node
whose answer is unknown is filtered with a reason that says unknown (unless the operator configures
``extender_unknown: admit``), and a probe is queued for its pair (one per pair) so that a later
scheduling attempt is decided from evidence. A pod without the annotation is not canary's to decide:
every node passes.

Scores are 0..10 (``MaxExtenderPriority``): half from memory headroom left after the candidate, half
from the predicted resident slowdown against the policy's bound (unknown slowdown scores 0).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from canary.admission import EvidenceAccess
from canary.admission.request import QueuedRequest
from canary.certificate import Certificate
from canary.errors import CanaryError, InputError
from canary.policy import Policy
from canary.regime import parse_regime
from canary.serve.service import Service

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from canary._model import PairKey
    from canary.admission.flow import Stage1
    from canary.admission.request import Request as Question
    from canary.backends import ResolvedDevice
    from evidence_store.service.probe_queue import ProbeTicket

MAX_EXTENDER_PRIORITY = 10


class _K8s(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ObjectMeta(_K8s):
    name: str | None = Field(default=None, max_length=253)
    namespace: str | None = Field(default=None, max_length=253)
    annotations: dict[str, str] | None = None


class Pod(_K8s):
    """``core/v1`` Pod (only ``metadata`` is read; every other field is kept as sent)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class Node(_K8s):
    """``core/v1`` Node (only ``metadata.name`` is read)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class NodeList(_K8s):
    items: list[Node] = Field(default_factory=list, max_length=20000)


class ExtenderArgs(_K8s):
    pod: Pod | None = Field(default=None, validation_alias=AliasChoices("pod", "Pod"))
    nodes: NodeList | None = Field(default=None, validation_alias=AliasChoices("nodes", "Nodes"))
    nodenames: list[Annotated[str, Field(max_length=253)]] | None = Field(
        default=None, max_length=20000, validation_alias=AliasChoices("nodenames", "NodeNames"))


class ExtenderFilterResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: NodeList | None = None
    nodenames: list[str] | None = None
    failedNodes: dict[str, str] = Field(default_factory=dict)
    failedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    error: str = ""


class HostPriority(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    score: int = Field(ge=0, le=MAX_EXTENDER_PRIORITY)


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    passes: bool
    reason: str
    score: int


@lru_cache(maxsize=1024)
def _snapshot_file(path: str, mtime_ns: int) -> ResolvedDevice:
    from canary.backends import resolve_device

    return resolve_device(path)


@dataclass(frozen=True)
class NodeDevice:
    """One of a node's devices as the extender names it: ``label`` is ``NODE/NAME`` (the name its node
    agent publishes, or ``gpuN`` for a configured device: the snapshot's index, else its place in the
    node's list) — never the snapshot file or registry entry it was read from, which are the server's
    business and would otherwise reach the scheduler's events. ``error`` when it could not be read."""

    label: str
    device: ResolvedDevice | None = None
    error: CanaryError | None = None


def published_node_devices(svc: Service, node: str, policy: Policy) -> list[ResolvedDevice]:
    """The devices node ``node``'s agent publishes but those it drains (stale ones read as unknown)."""
    from canary.fleetwork.published import published_device
    from evidence_store.published import list_published

    rows = svc.db("published_list", lambda s: list_published(s, node=node), read_only=True)
    by_ref = {r.ref: r for r in rows}
    return [published_device(r.ref, by_ref.get, policy) for r in rows if not r.draining]


def node_devices(svc: Service, node: str, policy: Policy) -> list[NodeDevice]:
    """The node's devices from operator configuration, else those its node agent publishes (stale ones
    read as unknown under ``policy``); ``[]`` when neither knows the node."""
    from canary.serve.config import node_ref_kind
    from canary.serve.resolve import _device

    if node not in svc.config.nodes:
        return [NodeDevice(d.ref.removeprefix("agent:"), d) for d in published_node_devices(svc, node, policy)]
    out = []
    for position, ref in enumerate(svc.config.nodes.get(node, ())):
        kind = node_ref_kind(ref)
        try:
            if kind == "file":
                device = _snapshot_file(ref, os.stat(ref).st_mtime_ns)
            elif kind == "missing file":
                raise InputError("the snapshot file the serve configuration names for this device is missing "
                                 "or unreadable on the server (`nodes:` / --node)")
            else:
                device = _device(ref, svc.registry_get)
        except CanaryError as exc:
            out.append(NodeDevice(f"{node}/gpu{position}", error=exc))
            continue
        index = device.snapshot.index
        out.append(NodeDevice(f"{node}/gpu{position if index is None else index}", device))
    return out


def _problem(exc: CanaryError, fields: dict[str, str] | None = None) -> str:
    """An error's problem without the server file it came from (``InputError.file``), its field named
    as the pod names it (``fields``: the core's CLI names → ``annotation canary.dev/regime`` …): these
    reasons reach ``kubectl describe pod``, where a CLI option means nothing."""
    if isinstance(exc, InputError) and (exc.file is not None or (fields and exc.field in fields)):
        field = (fields or {}).get(exc.field or "", exc.field)
        return f"field '{field}': {exc.problem}" if field else exc.problem
    return str(exc)


def _score(cert: Certificate, spec_memory_bytes: int, bound_pct: float) -> int:
    hbm = next((f for f in cert.findings if f.resource == "hbm"), None)
    headroom = 0.0
    if hbm is not None and isinstance(hbm.available, int) and isinstance(hbm.demand, int) and spec_memory_bytes > 0:
        headroom = max(0.0, min(1.0, (hbm.available - hbm.demand) / spec_memory_bytes))
    if not cert.residents or parse_regime(cert.regime, field="certificate regime").kind == "mig":
        slowdown_part = 1.0
    elif cert.predicted_slowdown_range is not None and bound_pct > 0:
        slowdown_part = max(0.0, 1.0 - max(0.0, cert.predicted_slowdown_range[1]) / bound_pct)
    else:
        slowdown_part = 0.0
    return round(MAX_EXTENDER_PRIORITY * (0.5 * headroom + 0.5 * slowdown_part))


def decide_device(req: Question, access: EvidenceAccess, now: dt.datetime, *,
                  stage1: Stage1) -> tuple[Certificate, tuple[PairKey, ...]]:
    """``canary fit`` of one device and the pair keys a probe would settle, from one read of the store
    (``EvidenceAccess.read_and_settle``, where ``canary.admission.fit`` and ``pairs_to_probe`` start
    too), without reading and running stage 1 twice."""
    from canary.admission.decisions import make_certificate

    s = access.read_and_settle(req, now, stage1=stage1)
    return make_certificate(s.req, s.hard, s.settled.decision, now), s.settled.probe_keys


def _queue_probe(svc: Service, device_id: str, keys: tuple[PairKey, ...], queued: QueuedRequest,
                 now: dt.datetime) -> ProbeTicket:
    """Queue the probe of ``keys`` on the device, or join the one queued or running for them."""
    from evidence_store.service import probe_queue

    def submit(session: Session) -> ProbeTicket:
        ticket, _ = probe_queue.submit(session, digest=probe_queue.pair_digest(list(keys)), device_id=device_id,
                                       request_json=queued.stored(), now=now, since=now)
        return ticket

    ticket: ProbeTicket = svc.db("probe_submit", submit)
    return ticket


def decide_node(svc: Service, pod: Pod, node: str, now: dt.datetime) -> NodeVerdict:
    from canary.admission import build_request
    from canary.policy import load_policy
    from canary.serve.resolve import _profile

    cfg = svc.config
    notes = pod.metadata.annotations or {}
    ref = notes[cfg.extender_profile_annotation]
    regime = notes.get(cfg.extender_regime_annotation)
    policy_name = notes.get(cfg.extender_policy_annotation)
    regime_field = f"annotation {cfg.extender_regime_annotation}"
    # the core names these inputs as the CLI does; here they come from the pod's annotations
    fields = {"--regime": regime_field, "regime": regime_field,
              "--policy": f"annotation {cfg.extender_policy_annotation}" if policy_name else "default_policy"}
    try:
        candidate = _profile(ref, f"annotation {cfg.extender_profile_annotation}", svc.registry_get)
        parsed = None if regime is None else parse_regime(regime, field=regime_field)
        policy = load_policy(policy_name or cfg.default_policy)
        devices = node_devices(svc, node, policy)
    except CanaryError as exc:
        return NodeVerdict(node, False, cap_reason(f"unknown: {_problem(exc, fields)}", ref), 0)
    if not devices:
        allow = cfg.extender_unknown == "admit"
        return NodeVerdict(node, allow, f"unknown: canary has no snapshot of node {node}'s devices "
                           "(run `canary agent` there, or configure nodes: in the serve configuration)", 0)
    reasons: list[str] = []
    best = -1
    any_unknown = any_reject = False
    access = svc.access()
    for named in devices:
        try:
            if named.error is not None:
                raise named.error
            device = named.device
            assert device is not None  # a NodeDevice holds a device or an error
            req = build_request(device, candidate, policy, regime=parsed, regime_field=regime_field)
            cert, keys = decide_device(req, access, now, stage1=svc.stage1)
        except CanaryError as exc:
            any_unknown = True
            reasons.append(f"{named.label}: unknown: {_problem(exc, fields)}")
            continue
        if cert.verdict == "admit":
            bound = policy.budget_for(candidate.workload_class).max_resident_slowdown_pct
            best = max(best, _score(cert, device.spec.memory_bytes, bound))
            continue
        any_reject = any_reject or cert.verdict == "reject"
        limiting = cert.limiting_resource or ("interference" if cert.hard_fit == "yes" else "unknown")
        note = ""
        if cert.verdict == "unknown":
            any_unknown = True
            if cfg.extender_probe_unknown and cert.hard_fit == "yes" and keys:
                queued = QueuedRequest.of(device, candidate, policy, regime=regime, reserve=False)
                ticket = _queue_probe(svc, req.device_id, keys, queued, now)
                note = f"; probe {ticket.id} is {ticket.state} for this pair, retry later"
                svc.runner_wake()
        reasons.append(f"{named.label}: {cert.verdict} (limiting resource: {limiting}): {cert.reason}{note}")
    if best >= 0:
        return NodeVerdict(node, True, "admit", best)
    if any_unknown and cfg.extender_unknown == "admit" and not any_reject:
        return NodeVerdict(node, True, "unknown, admitted by configuration", 0)
    return NodeVerdict(node, False, cap_reason("; ".join(reasons), ref), 0)


#: Most UTF-8 bytes of a filtered node's reason: kube-scheduler puts it in the pod's event, whose message
#: Kubernetes keeps to 1 KiB (longer ones are cut where the reader cannot see what was lost).
EXTENDER_REASON_BYTES = 1000


def cap_reason(reason: str, profile_ref: str, limit_bytes: int = EXTENDER_REASON_BYTES) -> str:
    """``reason`` within ``limit_bytes`` of UTF-8; one that is longer is cut where it says so and how to
    see each device's whole certificate."""
    raw = reason.encode()
    if len(raw) <= limit_bytes:
        return reason
    tail = (f" … [cut at {limit_bytes} bytes; each device's full certificate: canary fit --server URL "
            f"DEVICE {profile_ref}]")
    keep = raw[:max(0, limit_bytes - len(tail.encode()))].decode(errors="ignore")
    return keep + tail


def node_names(args: ExtenderArgs) -> list[str]:
    if args.nodenames is not None:
        return list(args.nodenames)
    if args.nodes is not None:
        return [n.metadata.name or "" for n in args.nodes.items]
    return []


def wants_canary(svc: Service, pod: Pod | None) -> bool:
    return pod is not None and svc.config.extender_profile_annotation in (pod.metadata.annotations or {})
