"""``GET /v1/probes/{id}`` (long-poll with ``?wait=``) and ``DELETE /v1/probes/{id}`` (cancel)."""

from __future__ import annotations

import re
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Query

from canary.admission import utcnow
from canary.errors import InputError
from canary.fleetwork.runner import CANCEL_POLL_S
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require
from canary.serve.probes import probe_status
from canary.serve.service import Service
from evidence_store.service import probe_queue
from evidence_store.service.probe_queue import ProbeTicket

router = APIRouter(tags=["decisions"])

_WAIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_WAIT_UNIT_S = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0}


def parse_wait(text: str | None, max_s: float) -> float:
    """A long-poll's duration in seconds (``2m``, ``30s``, ``500ms``, ``30``), at most ``max_s``."""
    if text is None or text == "":
        return 0.0
    m = _WAIT.match(text)
    if m is None:
        raise InputError(f"not a duration {text!r}: use e.g. 2m, 30s, 500ms or 30 (seconds)", field="wait")
    value = float(m.group(1)) * _WAIT_UNIT_S[m.group(2)]
    return min(value, max_s)


#: Retry-After (seconds) of the 503 a long-poll gets when the server stops under it.
STOPPING_RETRY_AFTER_S = 5


async def _wait_unless_stopping(svc: Service, probe_id: str, wait_s: float) -> ProbeTicket | None:
    """``runner.wait``, cut short when the server is asked to stop (``Service.stopping``): then the
    probe's row as it stands, and ``HttpProblem`` 503 with Retry-After if it is not final yet (the probe
    is aborted and rolled back by this server's shutdown, or left to the next server's recovery)."""
    result: list[ProbeTicket | None] = []
    async with anyio.create_task_group() as tg:
        async def waiter() -> None:
            result.append(await svc.runner.wait(probe_id, 0.0 if svc.stopping.is_set() else wait_s))
            tg.cancel_scope.cancel()

        async def stopper() -> None:
            await svc.stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(waiter)
        tg.start_soon(stopper)
    if result:
        return result[0]
    ticket = await svc.runner.get(probe_id)
    if ticket is not None and not ticket.terminal:
        raise HttpProblem(503, f"the server is shutting down: probe {probe_id!r} is {ticket.state}; ask again "
                          f"(GET /v1/probes/{probe_id}) in {STOPPING_RETRY_AFTER_S}s, of this server once "
                          "restarted or of another one: a probe the shutdown stops ends 'aborted', with no "
                          "evidence recorded", {"Retry-After": str(STOPPING_RETRY_AFTER_S)})
    return ticket


@router.get("/v1/probes/{probe_id}", response_model=S.ProbeStatus, dependencies=[Depends(require("read"))],
            responses={404: PROBLEM, **ERRORS})
async def get_probe(probe_id: str, svc: Svc,
                    wait: Annotated[str | None, Query(max_length=16, description="long-poll up to this long "
                                                      "for a final state: 2m, 30s, 500ms, 30 (seconds)")] = None
                    ) -> S.ProbeStatus:
    """The probe's state and transition times; its certificate once ``done``. A long-poll the server's
    shutdown (SIGTERM) interrupts is answered at once: the probe if final, else 503 with Retry-After."""
    wait_s = parse_wait(wait, svc.config.max_wait_s)
    ticket = await _wait_unless_stopping(svc, probe_id, wait_s)
    if ticket is None:
        raise HttpProblem(404, f"no probe {probe_id!r}")
    return probe_status(ticket)


@router.delete("/v1/probes/{probe_id}", response_model=S.ProbeStatus, dependencies=[Depends(require("admit"))],
               responses={404: PROBLEM, **ERRORS})
async def cancel_probe(probe_id: str, svc: Svc) -> S.ProbeStatus:
    """Cancel: a queued probe ends at once (``cancelled``). A running one is flagged and stopped: this
    server stops it at once if it runs it, and any runner sees the flag within a quarter second; the
    candidate is rolled back and nothing is recorded (``cancelled``). Only a probe whose result was
    already recorded before the cancel ends ``done`` — and then the answer says ``already done``: the
    transaction that records a probe's evidence re-reads the flag and closes the probe in one step. GET
    the probe for its final state."""
    ticket = await anyio.to_thread.run_sync(
        lambda: svc.db("probe_cancel", lambda s: probe_queue.cancel(s, probe_id, now=utcnow())))
    if ticket is None:
        raise HttpProblem(404, f"no probe {probe_id!r}")
    if ticket.state == "running":
        svc.runner.cancel_local(probe_id)  # a probe this process runs stops now; another's within CANCEL_POLL_S
    return probe_status(ticket).model_copy(update={"note": cancel_note(ticket)})


def cancel_note(ticket: ProbeTicket) -> str:
    """What a cancel does to a probe in ``ticket``'s state, said plainly (``DELETE``'s ``note``)."""
    if ticket.state == "cancelled":
        return "cancelled: nothing was recorded"
    if ticket.state == "running":
        return (f"cancel requested: the probe is stopped (its runner sees the request within {CANCEL_POLL_S:g} s), "
                "the candidate is rolled back and nothing is recorded: it ends 'cancelled' (or 'aborted' or 'failed' "
                "if it stopped for another reason first), never 'done'. GET this probe for its final state")
    return f"already {ticket.state}: a cancel changes nothing"
