"""A probe's row as the service answers it (``ProbeStatus``: its state, transitions and certificate).
The runner that runs queued probes is ``canary.fleetwork.runner``, shared with the node agent."""

from __future__ import annotations

from canary.serve import schemas as S
from evidence_store.service.probe_queue import ProbeTicket


def _transitions(t: ProbeTicket) -> list[S.Transition]:
    out = [S.Transition(state="queued", at=t.created_at)]
    if t.started_at is not None:
        out.append(S.Transition(state="running", at=t.started_at))
    if t.finished_at is not None:
        out.append(S.Transition(state=t.state, at=t.finished_at))
    return out


def probe_status(t: ProbeTicket) -> S.ProbeStatus:
    return S.ProbeStatus(
        id=t.id, state=t.state, device_id=t.device_id, pair_digest=t.pair_digest,
        waiters=t.waiters, cancel_requested=t.cancel_requested, created_at=t.created_at, started_at=t.started_at,
        finished_at=t.finished_at, updated_at=t.updated_at, transitions=_transitions(t), error=t.error,
        certificate=t.certificate_json)
