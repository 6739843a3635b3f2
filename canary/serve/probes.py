"""The probe runner of one server process: claims queued probes from the store and runs them.

Every server process runs one ``ProbeRunner``. It claims probes through ``evidence_store.probe_queue``
(so one pair is probed once and one device runs one probe, however many processes there are), runs
each through ``canary.admission.admit_async`` — the same core as ``canary admit`` — renews the probe's
lease while it runs, and stops it (rollback, nothing recorded) when a caller cancels. On start and then
periodically it aborts probes whose owner died: their pair and device become free and their waiters
see ``aborted`` with the reason, never a hang. A node agent can later run the same loop, claiming only
the probes of its own devices (``claim_next(devices=…)``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import Engine, select

from canary.serve import schemas as S
from canary.serve.config import ServeConfig
from canary.serve.metrics import Metrics
from evidence_store import probe_queue
from evidence_store.engine import session_scope
from evidence_store.errors import LeaseLost
from evidence_store.probe_queue import ProbeTicket

log = logging.getLogger("canary.serve")

HOST = socket.gethostname()


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_is_dead(owner: str) -> bool:
    """True only when the owner is a process on this host that no longer exists (else the lease decides)."""
    parts = owner.split(":")
    if len(parts) < 2 or parts[0] != HOST:
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    return pid != os.getpid() and not process_alive(pid)


class PacedMonitor:
    """A simulated monitor that holds each window for ``scale`` × its simulated length in wall time."""

    def __init__(self, inner: Any, scale: float) -> None:
        self.inner = inner
        self.scale = scale
        self.name = inner.name
        self.simulated = inner.simulated

    async def open(self) -> None:
        await self.inner.open()

    async def measure(self, duration_s: float) -> Any:
        sample = await self.inner.measure(duration_s)
        if self.simulated and self.scale > 0:
            await anyio.sleep(duration_s * self.scale)
        return sample

    async def close(self) -> None:
        await self.inner.close()


def recover_dead_journal(session: Any, now: dt.datetime, is_dead: Callable[[str], bool]) -> int:
    """Abort probe-journal rows still ``running`` whose owner process is gone (kill their canary first).
    ``canary recover`` handles expired leases; this catches a dead owner on this host at once."""
    from canary.admission.recovery import kill_orphan
    from evidence_store.journal import journal_update
    from evidence_store.models import ProbeJournal

    rows = session.scalars(select(ProbeJournal).where(ProbeJournal.state == "running")).all()
    n = 0
    for row in rows:
        if not is_dead(row.owner):
            continue
        action, detail = kill_orphan(row.probe_id, row.pgid)
        journal_update(session, row.probe_id, state="aborted", now=now, result_json={
            "outcome": "aborted", "aborted_by": "serve", "recover_action": action,
            "reason": f"owner {row.owner} is gone; {detail}", "previous_result": row.result_json})
        n += 1
    return n


class ProbeRunner:
    def __init__(self, engine: Engine, config: ServeConfig, metrics: Metrics) -> None:
        self.engine = engine
        self.config = config
        self.metrics = metrics
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.running = 0
        self._wake = anyio.Event()
        self._done: dict[str, anyio.Event] = {}
        self._last_recovery = 0.0
        self.agent_silence_s = config.agent_silence_s

    # ---------------------------------------------------------------- waiting (any process's probes)

    def wake(self) -> None:
        self._wake.set()

    def done_event(self, probe_id: str) -> anyio.Event:
        return self._done.setdefault(probe_id, anyio.Event())

    def _notify(self, probe_id: str) -> None:
        event = self._done.pop(probe_id, None)
        if event is not None:
            event.set()

    async def _db(self, operation: str, fn: Callable[[Any], Any], *, read_only: bool = False) -> Any:
        def work() -> Any:
            with self.metrics.store_op(operation), session_scope(self.engine, read_only=read_only) as session:
                return fn(session)

        return await anyio.to_thread.run_sync(work)

    async def get(self, probe_id: str) -> ProbeTicket | None:
        result: ProbeTicket | None = await self._db("probe_get", lambda s: probe_queue.get(s, probe_id),
                                                    read_only=True)
        return result

    async def wait(self, probe_id: str, wait_s: float) -> ProbeTicket | None:
        """The probe's row once it is final, or as it stands when ``wait_s`` has passed."""
        ticket = await self.get(probe_id)
        deadline = anyio.current_time() + wait_s
        poll = 0.02
        while ticket is not None and not ticket.terminal:
            left = deadline - anyio.current_time()
            if left <= 0:
                break
            event = self.done_event(probe_id)
            with anyio.move_on_after(min(poll, left)):
                await event.wait()
            poll = min(poll * 2, 0.5)  # another process may finish it: poll the store, backing off
            ticket = await self.get(probe_id)
        return ticket

    # ---------------------------------------------------------------- the loop

    async def serve(self) -> None:
        """Run until cancelled: recover, claim, run; sleep until woken or a poll interval passes."""
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    await self._tick(tg)
                except Exception as exc:  # the store may be down for a moment; keep serving, say why
                    log.warning("probe runner: %s", exc)
                with anyio.move_on_after(0.25):
                    await self._wake.wait()
                self._wake = anyio.Event()

    async def recover(self) -> list[ProbeTicket]:
        def work(session: Any) -> list[ProbeTicket]:
            now = utcnow()
            from evidence_store import fleet

            recover_dead_journal(session, now, owner_is_dead)
            aborted = probe_queue.recover_abandoned(session, now=now, owner_is_dead=owner_is_dead)
            return aborted + fleet.abort_orphaned_queued(session, now=now, max_age_s=self.agent_silence_s)

        aborted: list[ProbeTicket] = await self._db("probe_recover", work)
        for ticket in aborted:
            self.metrics.probes.labels("aborted").inc()
            self._notify(ticket.id)
        self._last_recovery = anyio.current_time()
        return aborted

    async def _tick(self, tg: Any) -> None:
        if anyio.current_time() - self._last_recovery > self.config.probe_lease_s / 3:
            await self.recover()
        if self.running >= self.config.max_concurrent_probes:
            return
        if not await self._db("probe_peek", probe_queue.any_queued, read_only=True):
            return  # an idle queue: no claim transaction (this runs four times a second)
        while self.running < self.config.max_concurrent_probes:
            ticket: ProbeTicket | None = await self._db("probe_claim", self._claim)
            if ticket is None:
                return
            self.running += 1
            tg.start_soon(self._run_one, ticket)

    def _claim(self, session: Any) -> ProbeTicket | None:
        """A server process runs probes for every device except those a node agent owns."""
        from evidence_store import fleet

        return probe_queue.claim_next(session, owner=self.owner, lease_s=self.config.probe_lease_s, now=utcnow(),
                                      clock=utcnow, exclude=fleet.agent_device_ids(session))

    async def _heartbeat(self, probe_id: str, scope: anyio.CancelScope, lost: list[str]) -> None:
        while True:
            await anyio.sleep(self.config.probe_lease_s / 3)
            try:
                cancel = await self._db("probe_heartbeat", lambda s: probe_queue.heartbeat(
                    s, probe_id, owner=self.owner, lease_s=self.config.probe_lease_s, now=utcnow()))
            except LeaseLost as exc:
                lost.append(str(exc))
                scope.cancel()
                return
            if cancel:
                scope.cancel()
                return

    async def _run_one(self, ticket: ProbeTicket) -> None:
        from canary.admission import admit_async, fresh_until_from_json
        from canary.serve.resolve import from_request_json

        state, cert_json, error = "failed", None, None
        lost: list[str] = []
        try:
            req = from_request_json(ticket.request_json)
            scale = self.config.sim_time_scale
            wrapper = (lambda m: PacedMonitor(m, scale)) if scale > 0 else None
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as hb:
                    hb.start_soon(self._heartbeat, ticket.id, scope, lost)
                    cert = await admit_async(req, engine=self.engine, probe=True,
                                             seed=int(ticket.request_json.get("seed", 0)),
                                             reserve=bool(ticket.request_json.get("reserve", True)),
                                             monitor_wrapper=wrapper,
                                             evidence_as_of=fresh_until_from_json(ticket.request_json))
                    hb.cancel_scope.cancel()
            if scope.cancelled_caught:
                state = "aborted" if lost else "cancelled"
                error = (f"lost the probe's lease: {lost[0]}" if lost else
                         "cancelled by a caller: the candidate was rolled back and no evidence was recorded")
            else:
                import json

                state, cert_json = "done", json.loads(cert.to_json())
        except anyio.get_cancelled_exc_class():
            state = "aborted"
            error = "the server stopped while the probe ran: the candidate was rolled back, nothing was recorded"
            raise
        except Exception as exc:
            state, error = "failed", f"{type(exc).__name__}: {exc}"
            log.warning("probe %s failed: %s", ticket.id, error)
        finally:
            finished = utcnow()
            with anyio.CancelScope(shield=True), contextlib.suppress(LeaseLost, Exception):
                await self._db("probe_finish", lambda s: probe_queue.finish(
                    s, ticket.id, owner=self.owner, state=state, now=finished, certificate_json=cert_json,
                    error=error))
            self.metrics.probe_finished(state, ticket.started_at, finished, cert_json)
            self.running -= 1
            self._notify(ticket.id)
            self.wake()


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
