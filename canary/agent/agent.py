"""The node agent: heartbeat (publish snapshots, notice driver changes, recover), and a probe runner
that claims only this node's probes.

* **Heartbeat** (every ``heartbeat_s``): each local device is read (NVML/amdsmi through
  ``canary.backends``, or its snapshot file) and published with its driver version and taken-at time.
  A device whose driver version changed since its last row triggers revalidation in the same
  transaction (see ``revalidate``). Then the agent runs the fleet's recovery: running probes whose
  lease expired are aborted (any agent or server may do this; the probe is never re-run elsewhere),
  and queued probes whose agent went silent or drains are aborted with that reason.
* **Probes**: the probe runner the service runs too (``canary.fleetwork.runner.ProbeRunner``) with one
  difference — it claims only this node's devices (``claim_devices``), so a probe only ever runs on the
  node whose GPU it names. It renews the lease every third of ``lease_s``; a lease lost means the probe
  stops.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy import Engine

from canary.admission import utcnow
from canary.admission.request import QueuedDevice, QueuedRequest
from canary.agent.config import AgentConfig
from canary.errors import InputError
from canary.fleetwork.runner import ProbeRunner, RunnerSettings, claim_devices
from canary.policy import Policy, load_policy
from canary.snapshot import DeviceSnapshot
from evidence_store import admission_log, published
from evidence_store import drift as store_drift
from evidence_store.database import session_scope
from evidence_store.service import probe_queue

log = logging.getLogger("canary.agent")

_LIVE_PREFIXES = ("nvml:", "cuda:", "rocm:")
PRUNE_EVERY_S = 3600.0


def read_device(source: str, now: dt.datetime) -> DeviceSnapshot:
    """The device's snapshot now: a live backend, or a snapshot file (a simulated device, read again on
    every heartbeat so that editing it — a new driver, new residents — is seen).

    A snapshot file is read as ``canary fit`` reads a DEVICE file (``resolve_device``): checked against
    its catalog entry, resident profiles named by file read relative to it, and, for a catalogued
    device, reporting the driver ``--sim-driver`` / ``$CANARY_SIM_DRIVER`` names when one is set."""
    from canary.backends import resolve_device

    snap = resolve_device(source).snapshot
    if source.startswith(_LIVE_PREFIXES) and snap.taken_at is not None:
        return snap
    return snap.model_copy(update={"taken_at": now})


@dataclass
class DriftOutcome:
    event_id: str
    stale_marked: int
    probes: list[dict[str, Any]] = field(default_factory=list)


def revalidate(session: Any, pub: published.Published, *, old_driver: str | None, policy: Policy, now: dt.datetime,
               history_since: dt.datetime) -> DriftOutcome:
    """A device's driver changed: mark the device type's evidence under other drivers stale (the store's
    rule), queue revalidation probes on this device for the device type's most requested pairs — at most
    ``policy.revalidation_budget_pairs`` — and record the drift event."""
    from evidence_store import evidence

    new_driver = pub.driver_version
    stale = (evidence.mark_stale(session, driver_not=new_driver, device_type=pub.device_type, now=now)
             if new_driver else 0)
    budget = policy.revalidation_budget_pairs
    probes: list[dict[str, Any]] = []
    own_uuid = pub.snapshot_json.get("uuid")
    for hot in admission_log.hot_pairs(session, since=history_since, device_type=pub.device_type, limit=budget):
        try:
            logged = QueuedRequest.read(hot.request_json, what="logged")
        except InputError as exc:  # a history row this version cannot read: the others are still revalidated
            log.warning("revalidation of %s skipped: %s", hot.label, exc)
            continue
        snapshot = logged.device.snapshot.model_copy(update={
            "driver_version": new_driver, "uuid": own_uuid, "taken_at": pub.taken_at})
        queued = logged.model_copy(update={
            "device": QueuedDevice(kind="published", ref=pub.ref, snapshot=snapshot), "reserve": False})
        ticket, joined = probe_queue.submit_and_notify(session, digest=hot.pair_digest, device_id=pub.device_id,
                                                 request_json=queued.stored(), now=now)
        probes.append({"probe_id": ticket.id, "pair_digest": hot.pair_digest, "key_digests": list(hot.key_digests),
                       "label": hot.label, "requests": hot.requests, "joined": joined,
                       "device_id": ticket.device_id})
    note = None if new_driver else "the new driver version is unknown: nothing was marked stale"
    event_id = store_drift.record_drift(session, device_id=pub.device_id, node=pub.node, device_type=pub.device_type,
                                  old_driver=old_driver, new_driver=new_driver, stale_marked=stale, budget=budget,
                                  probes=probes, now=now, note=note)
    return DriftOutcome(event_id, stale, probes)


@contextlib.contextmanager
def unwrap_claimed() -> Iterator[None]:
    """A task group reports a task's ``DeviceClaimed`` inside an exception group: raise it as itself,
    so the command line shows its one clear line."""
    try:
        yield
    except BaseExceptionGroup as group:
        found: BaseException | None = group.subgroup(published.DeviceClaimed)
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        if found is None:
            raise
        raise found from None


def _wait_notify(conn: Any) -> list[str]:
    """The next notification's payload, or none within a second (so cancellation is noticed)."""
    return [n.payload for n in conn.notifies(timeout=1.0, stop_after=1)]


class Agent:
    def __init__(self, config: AgentConfig, engine: Engine, *,
                 on_drift: Callable[[DriftOutcome], object] | None = None) -> None:
        self.config = config
        self.engine = engine
        self.policy = load_policy(config.policy)
        self.owner = f"agent/{config.node}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.device_ids: set[str] = set()
        self.draining = False
        self.on_drift = on_drift
        self.last_errors: dict[str, str] = {}
        settings = RunnerSettings(lease_s=config.lease_s, max_concurrent=max(1, len(config.devices)),
                                  sim_time_scale=config.sim_time_scale,
                                  agent_silence_s=self.policy.snapshot_max_age_s)
        # this node's devices only, none while it drains; an agent publishes no metrics
        self.runner = ProbeRunner(engine, settings, owner=self.owner, claim=claim_devices(self._claimable))

    def _claimable(self) -> set[str]:
        return set() if self.draining else self.device_ids

    def claim(self) -> None:
        """Refuse to start while another live agent holds one of this node's devices (``DeviceClaimed``
        names it). The first heartbeat then takes the devices; ``publish`` checks again under the lock."""
        with session_scope(self.engine, read_only=True) as session:
            held = published.claim_conflicts(session, node=self.config.node, names=list(self.config.devices),
                                         agent=self.owner, now=utcnow())
        if held:
            raise published.DeviceClaimed(held)

    def release(self) -> None:
        """Give this agent's devices up (it is stopping): another agent may take them at once."""
        with session_scope(self.engine) as session:
            published.release_claims(session, agent=self.owner, now=utcnow())

    def heartbeat(self) -> list[DriftOutcome]:
        """Publish every device once (blocking; run in a worker thread), all in one transaction, so an
        agent that meets another's live claim publishes nothing (``DeviceClaimed``). Returns the drift
        events seen."""
        snaps: dict[str, DeviceSnapshot] = {}
        for name, source in sorted(self.config.devices.items()):
            try:
                snaps[name] = read_device(source, utcnow())
            except Exception as exc:  # the device cannot be read: stop refreshing it, so it goes stale
                self.last_errors[name] = f"{type(exc).__name__}: {exc}"
                log.warning("device %s (%s) not published: %s", name, source, exc)
                continue
            self.last_errors.pop(name, None)
        for attempt in range(2):
            try:
                with session_scope(self.engine) as session:
                    ids, draining, drifts = self._publish_all(session, snaps)
                break
            except InputError:  # another agent inserted the same device row at the same moment:
                if attempt:     # read again, now its claim is seen (DeviceClaimed)
                    raise
        self.device_ids = ids
        self.draining = draining and bool(ids)
        for drift in drifts:
            if self.on_drift is not None:
                self.on_drift(drift)
        return drifts

    def _publish_all(self, session: Any, snaps: dict[str, DeviceSnapshot]) -> tuple[set[str], bool, list[DriftOutcome]]:
        ids: set[str] = set()
        draining = True
        drifts: list[DriftOutcome] = []
        for name in sorted(set(self.config.devices) - set(snaps)):  # unreadable now: still this agent's
            published.renew_claim(session, node=self.config.node, name=name, agent=self.owner, now=utcnow(),
                              claim_s=self.config.claim_duration_s)
        for name, snap in snaps.items():
            now = utcnow()
            result = published.publish(
                session, node=self.config.node, name=name, agent=self.owner,
                snapshot_json=snap.model_dump(mode="json"), device_type=snap.device_type,
                driver_version=snap.driver_version, device_uuid=snap.uuid,
                taken_at=snap.taken_at or now, now=now, claim_s=self.config.claim_duration_s)
            ids.add(result.published.device_id)
            draining = draining and result.published.draining
            if result.driver_changed:
                history = now - dt.timedelta(days=self.config.history_days)
                drift = revalidate(session, result.published, old_driver=result.previous_driver,
                                   policy=self.policy, now=now, history_since=history)
                drifts.append(drift)
                log.warning("driver of %s changed %s → %s: %d record(s) marked stale, %d revalidation probe(s)",
                            result.published.ref, result.previous_driver, result.published.driver_version,
                            drift.stale_marked, len(drift.probes))
        return ids, draining, drifts

    def prune_history(self) -> int:
        """Delete admission history older than the configured retention (blocking)."""
        from canary.jobs.history import prune_admission_log

        retention_s = self.config.admission_log_retention_days * 86400
        return prune_admission_log(self.engine, before=utcnow() - dt.timedelta(seconds=retention_s)).deleted

    async def run(self, *, stop: anyio.Event | None = None) -> None:
        """Heartbeat and run probes until cancelled (or ``stop`` is set). Raises ``DeviceClaimed``
        before anything is published when another live agent holds one of the devices, and later when
        another agent took a device over (this one had stopped renewing its claim, e.g. suspended);
        the claims are released when it stops."""
        await anyio.to_thread.run_sync(self.claim)
        try:
            with unwrap_claimed():
                async with anyio.create_task_group() as tg:
                    await anyio.to_thread.run_sync(self.heartbeat)
                    tg.start_soon(self.runner.serve)
                    tg.start_soon(self._beat)
                    tg.start_soon(self._prune)
                    if self.engine.dialect.name == "postgresql":
                        tg.start_soon(self._listen)
                    if stop is not None:
                        await stop.wait()
                        tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await anyio.to_thread.run_sync(self.release)

    async def _beat(self) -> None:
        while True:
            await anyio.sleep(self.config.heartbeat_s)
            try:
                drifts = await anyio.to_thread.run_sync(self.heartbeat)
            except published.DeviceClaimed:
                raise  # another agent holds a device now: this one must stop running its probes
            except Exception as exc:  # the store may be away for a while: keep trying, say why
                log.warning("heartbeat failed: %s", exc)
                continue
            if drifts:
                self.runner.wake()

    async def _prune(self) -> None:
        """Keep the admission history within its retention: at start, then every ``PRUNE_EVERY_S``. Every
        agent does it (deleting what another agent already deleted is a no-op)."""
        while True:
            try:
                deleted = await anyio.to_thread.run_sync(self.prune_history)
                if deleted:
                    log.info("admission history: %d row(s) older than %g days deleted", deleted,
                             self.config.admission_log_retention_days)
            except Exception as exc:
                log.warning("admission history not pruned: %s", exc)
            await anyio.sleep(PRUNE_EVERY_S)

    async def _listen(self) -> None:
        """PostgreSQL: wake the probe runner as soon as a probe is queued for one of this node's devices
        (``LISTEN``; the service and revalidation ``NOTIFY`` when they queue one). Polling stays the
        fallback: a lost connection only delays claims to the runner's next poll."""
        import psycopg

        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            conn: Any = None
            try:
                conn = await anyio.to_thread.run_sync(
                    lambda: psycopg.connect(conninfo, autocommit=True, connect_timeout=5))
                conn.execute(f"LISTEN {probe_queue.NOTIFY_CHANNEL}")
                while True:
                    payloads = await anyio.to_thread.run_sync(_wait_notify, conn, abandon_on_cancel=True)
                    if any(p in self.device_ids for p in payloads):
                        self.runner.wake()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.warning("probe notifications unavailable (polling meanwhile): %s", exc)
                await anyio.sleep(self.config.heartbeat_s)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
