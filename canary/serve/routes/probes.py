"""``GET /v1/probes/{id}`` (long-poll with ``?wait=``) and ``DELETE /v1/probes/{id}`` (cancel)."""

from __future__ import annotations

import re
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Query

from canary.admission import utcnow
from canary.errors import InputError
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require
from canary.serve.probes import probe_status
from evidence_store.service import probe_queue

router = APIRouter(tags=["decisions"])

_WAIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$")


def parse_wait(text: str | None, max_s: float) -> float:
    if text is None or text == "":
        return 0.0
    m = _WAIT.match(text)
    if m is None:
        raise InputError(f"not a duration {text!r}: use e.g. 30s, 500ms or 30", field="wait")
    value = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    return min(value, max_s)


@router.get("/v1/probes/{probe_id}", response_model=S.ProbeStatus, dependencies=[Depends(require("read"))],
            responses={404: PROBLEM, **ERRORS})
async def get_probe(probe_id: str, svc: Svc,
                    wait: Annotated[str | None, Query(max_length=16, description="long-poll up to this long "
                                                      "for a final state: 30s, 500ms, 30")] = None) -> S.ProbeStatus:
    """The probe's state and transition times; its certificate once ``done``."""
    wait_s = parse_wait(wait, svc.config.max_wait_s)
    ticket = await svc.runner.wait(probe_id, wait_s)
    if ticket is None:
        raise HttpProblem(404, f"no probe {probe_id!r}")
    return probe_status(ticket)


@router.delete("/v1/probes/{probe_id}", response_model=S.ProbeStatus, dependencies=[Depends(require("admit"))],
               responses={404: PROBLEM, **ERRORS})
async def cancel_probe(probe_id: str, svc: Svc) -> S.ProbeStatus:
    """Cancel: a queued probe ends at once; a running one is rolled back by its owner within a third
    of its lease, and no evidence is recorded. Every request sharing it sees ``cancelled``."""
    ticket = await anyio.to_thread.run_sync(
        lambda: svc.db("probe_cancel", lambda s: probe_queue.cancel(s, probe_id, now=utcnow())))
    if ticket is None:
        raise HttpProblem(404, f"no probe {probe_id!r}")
    return probe_status(ticket)
