"""kube-scheduler's extender verbs, ``POST /v1/extender/filter`` and ``POST /v1/extender/prioritize``
(``canary.serve.extender``). Their token may be waived (``extender_auth: none``): kube-scheduler
cannot send one."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends

from canary.admission import utcnow
from canary.serve.deps import PROBLEM, Svc, require
from canary.serve.extender import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    NodeList,
    decide_node,
    node_names,
    wants_canary,
)

#: With ``extender_auth: token`` (the default) a call without a token granting ``fit`` is 401 or 403; a
#: body over ``extender_max_body_bytes`` is 413; a body that is not ``ExtenderArgs`` is 422.
EXTENDER_ERRORS: dict[int | str, dict[str, Any]] = {401: PROBLEM, 403: PROBLEM, 413: PROBLEM, 415: PROBLEM,
                                                       422: PROBLEM, 503: PROBLEM}
NO_POD = "ExtenderArgs has no Pod: nothing to decide, so no node passes"

router = APIRouter(tags=["kubernetes"], dependencies=[Depends(require("fit", extender=True))])


@router.post("/v1/extender/filter", response_model=ExtenderFilterResult, response_model_exclude_none=True,
             responses=EXTENDER_ERRORS)
async def extender_filter(args: ExtenderArgs, svc: Svc) -> ExtenderFilterResult:
    """kube-scheduler's filter verb: nodes where the pod's profile fits now, and why the others do not."""
    names = node_names(args)
    if args.pod is None:  # kube-scheduler always sends one: a hand-written call; unknown is filtered
        return ExtenderFilterResult(nodenames=[] if args.nodenames is not None else None,
                                    nodes=NodeList(items=[]) if args.nodes is not None else None,
                                    failedNodes=dict.fromkeys(names, NO_POD), error=NO_POD)
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


@router.post("/v1/extender/prioritize", response_model=list[HostPriority], responses=EXTENDER_ERRORS)
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
