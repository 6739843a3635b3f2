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
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from canary.certificate import Certificate
from canary.errors import CanaryError, InputError
from canary.regime import parse_regime

MAX_EXTENDER_PRIORITY = 10


async def _service(request: Request) -> Any:
    """The app's ``Service`` (typed loosely here: importing ``canary.serve.app`` would close a cycle)."""
    return request.app.state.service


Svc = Annotated[Any, Depends(_service)]


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
def _snapshot_file(path: str, mtime_ns: int) -> Any:
    from canary.backends import resolve_device

    return resolve_device(path)


@dataclass(frozen=True)
class NodeDevice:
    """One of a node's devices as the extender names it: ``label`` is ``NODE/NAME`` (the name its node
    agent publishes, or ``gpuN`` for a configured device: the snapshot's index, else its place in the
    node's list) — never the snapshot file or registry entry it was read from, which are the server's
    business and would otherwise reach the scheduler's events. ``error`` when it could not be read."""

    label: str
    device: Any = None
    error: CanaryError | None = None


def node_devices(svc: Any, node: str, policy: Any = None) -> list[NodeDevice]:
    """The node's devices from operator configuration, else those its node agent publishes (stale ones
    read as unknown under ``policy``); ``[]`` when neither knows the node."""
    from canary.serve.resolve import _device

    if node not in svc.config.nodes:
        from canary.serve.fleet import published_node_devices

        return [NodeDevice(d.ref.removeprefix("agent:"), d) for d in published_node_devices(svc, node, policy)]
    out = []
    for position, ref in enumerate(svc.config.nodes.get(node, ())):
        try:
            if "@" not in ref and os.path.isfile(ref):
                device = _snapshot_file(ref, os.stat(ref).st_mtime_ns)
            elif "@" not in ref and ("/" in ref or os.sep in ref or ref.endswith((".yaml", ".yml", ".json"))):
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


def _problem(exc: CanaryError) -> str:
    """An error's problem without the server file it came from (``InputError.file``)."""
    if isinstance(exc, InputError) and exc.file is not None:
        return f"field '{exc.field}': {exc.problem}" if exc.field else exc.problem
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


def decide_node(svc: Any, pod: Pod, node: str, now: dt.datetime) -> NodeVerdict:
    from canary.admission import build_request, fit, pairs_to_probe
    from canary.policy import load_policy
    from canary.serve.resolve import _profile
    from evidence_store import probe_queue

    cfg = svc.config
    notes = pod.metadata.annotations or {}
    ref = notes[cfg.extender_profile_annotation]
    try:
        candidate = _profile(ref, f"annotation {cfg.extender_profile_annotation}", svc.registry_get)
        policy = load_policy(notes.get(cfg.extender_policy_annotation) or cfg.default_policy)
        devices = node_devices(svc, node, policy)
    except CanaryError as exc:
        return NodeVerdict(node, False, f"unknown: {_problem(exc)}", 0)
    if not devices:
        allow = cfg.extender_unknown == "admit"
        return NodeVerdict(node, allow, f"unknown: canary has no snapshot of node {node}'s devices "
                           "(run `canary agent` there, or configure nodes: in the serve configuration)", 0)
    reasons: list[str] = []
    best = -1
    any_unknown = any_reject = False
    access = svc.access()
    for named in devices:
        device = named.device
        try:
            if named.error is not None:
                raise named.error
            req = build_request(device, candidate, policy, regime=notes.get(cfg.extender_regime_annotation))
            cert = fit(req, access, now, stage1=svc.stage1)
        except CanaryError as exc:
            any_unknown = True
            reasons.append(f"{named.label}: unknown: {_problem(exc)}")
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
            if cfg.extender_probe_unknown and cert.hard_fit == "yes":
                keys = pairs_to_probe(req, access, now)
                if keys:
                    request_json: dict[str, Any] = {
                        "device": {"kind": device.kind, "ref": device.ref,
                                   "snapshot": device.snapshot.model_dump(mode="json")},
                        "candidate": candidate.model_dump(mode="json"), "residents": [],
                        "regime": notes.get(cfg.extender_regime_annotation), "policy": policy.name,
                        "reserve": False, "seed": 0}
                    ticket, _ = svc.db("probe_submit", lambda s, k=keys, r=req, j=request_json: probe_queue.submit(
                        s, digest=probe_queue.pair_digest(k), device_id=r.device_id, request_json=j, now=now,
                        since=now))
                    note = f"; probe {ticket.id} is {ticket.state} for this pair, retry later"
                    svc.runner_wake()
        reasons.append(f"{named.label}: {cert.verdict} (limiting resource: {limiting}): {cert.reason}{note}")
    if best >= 0:
        return NodeVerdict(node, True, "admit", best)
    if any_unknown and cfg.extender_unknown == "admit" and not any_reject:
        return NodeVerdict(node, True, "unknown, admitted by configuration", 0)
    return NodeVerdict(node, False, "; ".join(reasons)[:2000], 0)


def _node_names(args: ExtenderArgs) -> list[str]:
    if args.nodenames is not None:
        return list(args.nodenames)
    if args.nodes is not None:
        return [n.metadata.name or "" for n in args.nodes.items]
    return []


def _wants_canary(svc: Any, pod: Pod | None) -> bool:
    return pod is not None and svc.config.extender_profile_annotation in (pod.metadata.annotations or {})


def add_extender_routes(app: FastAPI, require: Callable[..., Any]) -> None:
    from canary.serve.probes import utcnow

    deps = [Depends(require("fit", extender=True))]

    @app.post("/v1/extender/filter", tags=["kubernetes"], dependencies=deps, response_model=ExtenderFilterResult,
              response_model_exclude_none=True)
    async def extender_filter(args: ExtenderArgs, svc: Svc) -> ExtenderFilterResult:
        """kube-scheduler's filter verb: nodes where the pod's profile fits now, and why the others do not."""
        names = _node_names(args)
        if args.pod is None:
            return ExtenderFilterResult(nodenames=names if args.nodenames is not None else None, nodes=args.nodes,
                                        error="ExtenderArgs has no pod")
        if not _wants_canary(svc, args.pod):
            return ExtenderFilterResult(nodes=args.nodes, nodenames=names if args.nodenames is not None else None)
        pod = args.pod
        now = utcnow()
        verdicts = await anyio.to_thread.run_sync(lambda: [decide_node(svc, pod, n, now) for n in names],
                                                  limiter=svc.decisions)
        passing = {v.node for v in verdicts if v.passes}
        failed = {v.node: v.reason for v in verdicts if not v.passes}
        result = ExtenderFilterResult(failedNodes=failed)
        if args.nodenames is not None:
            result.nodenames = [n for n in names if n in passing]
        else:
            items = args.nodes.items if args.nodes is not None else []
            result.nodes = NodeList(items=[n for n in items if (n.metadata.name or "") in passing])
        return result

    @app.post("/v1/extender/prioritize", tags=["kubernetes"], dependencies=deps, response_model=list[HostPriority])
    async def extender_prioritize(args: ExtenderArgs, svc: Svc) -> list[HostPriority]:
        """kube-scheduler's prioritize verb: 0..10 per node from memory headroom and predicted slowdown."""
        names = _node_names(args)
        if args.pod is None or not _wants_canary(svc, args.pod):
            return [HostPriority(host=n, score=0) for n in names]
        pod = args.pod
        now = utcnow()
        verdicts = await anyio.to_thread.run_sync(lambda: [decide_node(svc, pod, n, now) for n in names],
                                                  limiter=svc.decisions)
        return [HostPriority(host=v.node, score=v.score if v.passes else 0) for v in verdicts]

