"""kube-scheduler's extender verbs, ``POST /v1/extender/filter`` and ``POST /v1/extender/prioritize``
(``canary.serve.extender``). Their token may be waived (``extender_auth: none``): kube-scheduler
cannot send one."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Depends

from canary.admission import utcnow
from canary.serve.deps import Svc, require
from canary.serve.extender import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    NodeList,
    decide_node,
    node_names,
    wants_canary,
)

router = APIRouter(tags=["kubernetes"], dependencies=[Depends(require("fit", extender=True))])


@router.post("/v1/extender/filter", response_model=ExtenderFilterResult, response_model_exclude_none=True)
async def extender_filter(args: ExtenderArgs, svc: Svc) -> ExtenderFilterResult:
    """kube-scheduler's filter verb: nodes where the pod's profile fits now, and why the others do not."""
    names = node_names(args)
    if args.pod is None:
        return ExtenderFilterResult(nodenames=names if args.nodenames is not None else None, nodes=args.nodes,
                                    error="ExtenderArgs has no pod")
    if not wants_canary(svc, args.pod):
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


@router.post("/v1/extender/prioritize", response_model=list[HostPriority])
async def extender_prioritize(args: ExtenderArgs, svc: Svc) -> list[HostPriority]:
    """kube-scheduler's prioritize verb: 0..10 per node from memory headroom and predicted slowdown."""
    names = node_names(args)
    if args.pod is None or not wants_canary(svc, args.pod):
        return [HostPriority(host=n, score=0) for n in names]
    pod = args.pod
    now = utcnow()
    verdicts = await anyio.to_thread.run_sync(lambda: [decide_node(svc, pod, n, now) for n in names],
                                              limiter=svc.decisions)
    return [HostPriority(host=v.node, score=v.score if v.passes else 0) for v in verdicts]
