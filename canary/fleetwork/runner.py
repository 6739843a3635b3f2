"""The probe runner: claims queued probes from the store and runs them, in a server process or a node
agent.

It claims probes through ``evidence_store.service.probe_queue`` (so one pair is probed once and one device runs
one probe, however many processes there are), runs each through ``canary.admission.admit_async`` — the
same core as ``canary admit`` — renews the probe's lease while it runs, and stops it (rollback, nothing
recorded) when a caller cancels: it polls the probe's cancel flag every ``CANCEL_POLL_S`` (and a cancel
through this process's ``cancel_local`` stops it at once), and the transaction that would record the
probe's evidence re-reads the flag under the row's lock and closes the row ``done`` itself
(``probe_queue.may_record``), so a cancel either comes first and nothing is recorded, or finds the probe
``done``. On start and then periodically it aborts probes whose owner died:
their pair and device become free and their waiters see ``aborted`` with the reason, never a hang.

Who runs which probes is the ``claim`` the runner is built with: a server process claims every device
but those a node agent owns (``claim_unowned``); a node agent claims only its own devices
(``claim_devices``), so a probe only ever runs on the node whose GPU it names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import uuid
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from canary._model import utcnow
from canary.policy import Policy
from evidence_store.database import session_scope
from evidence_store.errors import LeaseLost
from evidence_store.service import probe_queue
from evidence_store.service.probe_queue import ProbeTicket

log = logging.getLogger("canary.fleetwork")

#: How often a running probe's runner reads its cancel flag (one column by primary key), in seconds. The
#: lease is renewed far less often (every third of ``lease_s``); a cancel is seen within this.
CANCEL_POLL_S = 0.25

HOST = socket.gethostname()


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


def recover_dead_journal(session: Session, now: dt.datetime, is_dead: Callable[[str], bool]) -> int:
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


class RunnerMetrics(Protocol):
    """What the runner reports (the service's Prometheus metrics; a node agent publishes none)."""

    def store_op(self, operation: str) -> AbstractContextManager[None]: ...

    def probe_finished(self, state: str, started: dt.datetime | None, finished: dt.datetime,
                       cert: dict[str, Any] | None) -> None: ...


@dataclass(frozen=True)
class RunnerSettings:
    """How a runner runs probes: from the operator's ``canary serve`` or ``canary agent`` configuration."""

    lease_s: float  # a running probe's lease, renewed every third
    max_concurrent: int  # probes this process runs at once
    sim_time_scale: float = 0.0  # wall seconds a simulated probe holds its device per simulated second
    agent_silence_s: float = 60.0  # a queued probe for a silent agent's device is aborted after this


#: Claims the next probe this runner may run: (session, owner, lease_s, now) → the ticket, or ``None``.
Claim = Callable[[Session, str, float, dt.datetime], "ProbeTicket | None"]


def claim_unowned(session: Session, owner: str, lease_s: float, now: dt.datetime) -> ProbeTicket | None:
    """A server process runs probes for every device except those a node agent owns."""
    from evidence_store.published import agent_device_ids

    return probe_queue.claim_next(session, owner=owner, lease_s=lease_s, now=now, clock=utcnow,
                                  exclude=agent_device_ids(session))


def claim_devices(devices: Callable[[], Collection[str]]) -> Claim:
    """A node agent runs only the probes of its own devices (``devices()``: their ids now; none while it
    has none, or drains)."""

    def claim(session: Session, owner: str, lease_s: float, now: dt.datetime) -> ProbeTicket | None:
        ids = devices()
        if not ids:
            return None
        return probe_queue.claim_next(session, owner=owner, lease_s=lease_s, now=now, clock=utcnow,
                                      devices=sorted(ids))

    return claim


class ProbeRunner:
    def __init__(self, engine: Engine, settings: RunnerSettings, *, metrics: RunnerMetrics | None = None,
                 claim: Claim = claim_unowned, owner: str | None = None,
                 load_policy: Callable[[str], Policy] | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.claim = claim
        self.owner = owner or f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.load_policy = load_policy  # how a queued request's policy is read (default: load_policy)
        self.running = 0
        self._wake = anyio.Event()
        self._done: dict[str, anyio.Event] = {}
        self._last_recovery = 0.0
        # probes running in this process: their cancel scopes, until their result is recorded
        self._cancellable: dict[str, anyio.CancelScope] = {}

    # ---------------------------------------------------------------- waiting (any process's probes)

    def wake(self) -> None:
        self._wake.set()

    def cancel_local(self, probe_id: str) -> bool:
        """Stop a probe this process runs, now (its cancel flag is already set in the store: the caller
        ran ``probe_queue.cancel``). Whether it runs here and had not recorded its result yet; otherwise
        its runner — here or in another process — sees the flag within ``CANCEL_POLL_S``."""
        scope = self._cancellable.get(probe_id)
        if scope is None:
            return False
        scope.cancel()
        return True

    def done_event(self, probe_id: str) -> anyio.Event:
        return self._done.setdefault(probe_id, anyio.Event())

    def _notify(self, probe_id: str) -> None:
        event = self._done.pop(probe_id, None)
        if event is not None:
            event.set()

    def _store_op(self, operation: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext() if self.metrics is None else self.metrics.store_op(operation)

    async def _db(self, operation: str, fn: Callable[[Session], Any], *, read_only: bool = False) -> Any:
        def work() -> Any:
            with self._store_op(operation), session_scope(self.engine, read_only=read_only) as session:
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
        def work(session: Session) -> list[ProbeTicket]:
            now = utcnow()
            recover_dead_journal(session, now, owner_is_dead)
            aborted = probe_queue.recover_abandoned(session, now=now, owner_is_dead=owner_is_dead)
            return aborted + probe_queue.abort_orphaned_queued(session, now=now,
                                                               max_age_s=self.settings.agent_silence_s)

        aborted: list[ProbeTicket] = await self._db("probe_recover", work)
        for ticket in aborted:
            if self.metrics is not None:
                self.metrics.probe_finished("aborted", None, utcnow(), None)
            self._notify(ticket.id)
        self._last_recovery = anyio.current_time()
        return aborted

    async def _tick(self, tg: Any) -> None:
        if anyio.current_time() - self._last_recovery > self.settings.lease_s / 3:
            await self.recover()
        if self.running >= self.settings.max_concurrent:
            return
        if not await self._db("probe_peek", probe_queue.any_queued, read_only=True):
            return  # an idle queue: no claim transaction (this runs four times a second)
        while self.running < self.settings.max_concurrent:
            ticket: ProbeTicket | None = await self._db(
                "probe_claim", lambda s: self.claim(s, self.owner, self.settings.lease_s, utcnow()))
            if ticket is None:
                return
            self.running += 1
            tg.start_soon(self._run_one, ticket)

    async def _heartbeat(self, probe_id: str, scope: anyio.CancelScope, lost: list[str]) -> None:
        """Read the probe's cancel flag every ``CANCEL_POLL_S`` and renew its lease every third of
        ``lease_s``; cancel ``scope`` when a caller cancelled the probe or the lease was lost."""
        lease_s = self.settings.lease_s
        renew_s = lease_s / 3
        poll_s = min(CANCEL_POLL_S, renew_s)
        renewed = anyio.current_time()
        while True:
            await anyio.sleep(poll_s)
            try:
                if anyio.current_time() - renewed >= renew_s:
                    cancel = await self._db("probe_heartbeat", lambda s: probe_queue.heartbeat(
                        s, probe_id, owner=self.owner, lease_s=lease_s, now=utcnow()))
                    renewed = anyio.current_time()
                else:
                    cancel = await self._db("probe_cancel_poll",
                                            lambda s: probe_queue.cancel_requested(s, probe_id), read_only=True)
            except LeaseLost as exc:
                lost.append(str(exc))
                scope.cancel()
                return
            if cancel:
                scope.cancel()
                return

    async def _run_one(self, ticket: ProbeTicket) -> None:
        from canary.admission import admit_async
        from canary.admission.flow import RecordingCancelled
        from canary.admission.request import QueuedRequest
        from canary.certificate import Certificate

        state, cert_json, error = "failed", None, None
        lost: list[str] = []
        closed: list[dict[str, Any]] = []  # the certificate, once the recording transaction closed the row

        def before_record(session: Session) -> bool:
            return probe_queue.may_record(session, ticket.id, owner=self.owner)

        def after_record(session: Session, cert: Certificate) -> None:
            document = json.loads(cert.to_json())
            probe_queue.finish(session, ticket.id, owner=self.owner, state="done", now=utcnow(),
                               certificate_json=document)
            closed.append(document)
            self._cancellable.pop(ticket.id, None)  # recorded: a cancel from now on changes nothing

        try:
            queued = QueuedRequest.read(ticket.request_json)
            req = queued.request(load_policy_fn=self.load_policy)
            scale = self.settings.sim_time_scale
            wrapper = (lambda m: PacedMonitor(m, scale)) if scale > 0 else None
            cert: Certificate | None = None
            failure: Exception | None = None
            with anyio.CancelScope() as scope:
                self._cancellable[ticket.id] = scope
                async with anyio.create_task_group() as hb:
                    hb.start_soon(self._heartbeat, ticket.id, scope, lost)
                    try:
                        cert = await admit_async(req, engine=self.engine, probe=True, seed=queued.seed,
                                                 reserve=queued.reserve, monitor_wrapper=wrapper,
                                                 evidence_as_of=queued.evidence_fresh_until,
                                                 before_record=before_record, after_record=after_record)
                    except Exception as exc:  # raised below as itself, not inside the task group's ExceptionGroup
                        failure = exc
                    hb.cancel_scope.cancel()
            if failure is not None:
                raise failure
            if closed:  # recorded, and the row closed 'done' in the same transaction
                state, cert_json = "done", closed[0]
            elif scope.cancelled_caught:
                state = "aborted" if lost else "cancelled"
                error = (f"lost the probe's lease: {lost[0]}" if lost else
                         "cancelled by a caller: the candidate was rolled back and no evidence was recorded")
            elif cert is not None:  # nothing to write (no transaction): finish refuses 'done' if a cancel came
                state, cert_json = "done", json.loads(cert.to_json())
        except RecordingCancelled:
            state, error = "cancelled", probe_queue.CANCELLED_BEFORE_RECORDING
        except anyio.get_cancelled_exc_class():
            state = "aborted"
            error = "the server stopped while the probe ran: the candidate was rolled back, nothing was recorded"
            raise
        except LeaseLost as exc:  # recovery aborted the probe before it recorded: nothing was recorded
            state, error = "aborted", f"lost the probe's lease: {exc}"
        except Exception as exc:
            state, error = "failed", f"{type(exc).__name__}: {exc}"
            log.warning("probe %s failed: %s", ticket.id, error)
        finally:
            self._cancellable.pop(ticket.id, None)
            finished = utcnow()
            if not closed:
                with anyio.CancelScope(shield=True), contextlib.suppress(LeaseLost, Exception):
                    final: ProbeTicket = await self._db("probe_finish", lambda s: probe_queue.finish(
                        s, ticket.id, owner=self.owner, state=state, now=finished, certificate_json=cert_json,
                        error=error))
                    state, cert_json = final.state, final.certificate_json
            if self.metrics is not None:
                self.metrics.probe_finished(state, ticket.started_at, finished, cert_json)
            self.running -= 1
            self._notify(ticket.id)
            self.wake()
