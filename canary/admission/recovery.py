"""Recovery of crashed probes: find running journal rows whose lease expired, kill their canaries,
mark them ``aborted``.

A probe's prober renews its lease while it runs; a lease that expired means the prober died (or
hung) and its canary may still be running, sharing the GPU with a resident nobody watches. For each
such row, :func:`recover`:

1. kills the canary's process group (SIGTERM, then SIGKILL after ``term_grace_s``; the same path as
   the process executor's rollback, :func:`canary.probe.procs.terminate_group`) — but only when a
   live member of the group carries the probe's ``CANARY_PROBE_ID``; a group that is already gone is
   fine and reported; a group id now used by unrelated processes is left alone and reported;
2. marks the row ``aborted`` with the reason in ``result_json`` (unless, meanwhile, another
   recoverer closed it or its owner renewed the lease).

It never records evidence: an aborted probe observed nothing trustworthy. :func:`recover_store`
(``canary recover``, and every probe start through :func:`recover_store_async`) kills with no store
transaction open and then writes once; :func:`recover` does the same inside the caller's session.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from canary.probe.procs import carries_probe_id, group_members, terminate_group_blocking

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

    from evidence_store.schemas import ProbeRow

RecoverAction = Literal["killed", "already-gone", "not-ours", "no-process", "left-running", "kill-failed"]


@dataclass(frozen=True)
class RecoveredProbe:
    probe_id: str
    owner: str
    pid: int
    pgid: int
    lease_expired_at: dt.datetime
    action: RecoverAction
    detail: str


@dataclass(frozen=True, slots=True)
class RecoverReport:
    """What recovery did, one entry per expired probe (empty when nothing had expired)."""

    checked_at: dt.datetime
    probes: tuple[RecoveredProbe, ...] = field(default_factory=tuple)

    @property
    def aborted(self) -> int:
        return len(self.probes)

    @property
    def failed(self) -> tuple[RecoveredProbe, ...]:
        """Probes whose canary may still run (kill failed or not attempted)."""
        return tuple(p for p in self.probes if p.action in ("kill-failed", "left-running"))


KILL_WAIT_S = 5.0
"""How long a process group may take to disappear after SIGKILL before recovery reports ``kill-failed``."""


def kill_orphan(
    probe_id: str, pgid: int, *, kill: bool = True, term_grace_s: float = 1.0,
    kill_wait_s: float = KILL_WAIT_S
) -> tuple[RecoverAction, str]:
    """Kill the orphaned canary of ``probe_id`` in group ``pgid``; returns the action and a detail.

    ``kill_wait_s`` after SIGKILL before the group counts as having survived it: a process in the GPU
    driver (uninterruptible sleep) or on a loaded machine can take seconds to be reaped, and a false
    ``kill-failed`` sends an SRE after a process that is already gone.
    It blocks for up to ``term_grace_s + kill_wait_s``: call it outside any store transaction and,
    from async code, in a worker thread (as :func:`recover_store_async` does)."""
    if pgid <= 0:
        return "no-process", "the candidate had no process of its own (simulated or in-process)"
    members = group_members(pgid)
    ours = [m for m in members if carries_probe_id(m.pid, probe_id)]
    if not members:
        return "already-gone", f"process group {pgid} is already gone"
    if not ours:
        pids = ", ".join(str(m.pid) for m in members[:5])
        return "not-ours", f"process group {pgid} now holds unrelated processes ({pids}); not killed"
    if not kill:
        return (
            "left-running",
            f"process group {pgid} still runs {len(ours)} canary process(es); kill not requested",
        )

    def alive() -> bool:
        return any(carries_probe_id(m.pid, probe_id) for m in group_members(pgid))

    ended = terminate_group_blocking(pgid, alive=alive, term_grace_s=term_grace_s, kill_wait_s=kill_wait_s)
    if not ended.gone:
        return "kill-failed", f"process group {pgid} survived SIGKILL"
    if ended.killed:
        return "killed", f"process group {pgid} ({len(ours)} process(es)) killed with SIGKILL after SIGTERM"
    return "killed", f"process group {pgid} ({len(ours)} process(es)) ended on SIGTERM"


def _mark_aborted(
    session: Session, row: ProbeRow, action: RecoverAction, detail: str, now: dt.datetime
) -> RecoveredProbe | None:
    """Close ``row`` as aborted, unless it is no longer an expired running probe (another recoverer
    closed it, or its owner renewed the lease, since it was read)."""
    from evidence_store.journal import journal_get, journal_update

    current = journal_get(session, row.probe_id)
    if current is None or current.state != "running" or not current.lease_expires_at < now:
        return None
    reason = f"lease expired at {row.lease_expires_at.isoformat()} (owner {row.owner} gone); {detail}"
    journal_update(
        session,
        row.probe_id,
        state="aborted",
        result_json={
            "outcome": "aborted",
            "aborted_by": "recover",
            "reason": reason,
            "recover_action": action,
            "previous_result": current.result_json,
        },
        now=now,
    )
    return RecoveredProbe(row.probe_id, row.owner, row.pid, row.pgid, row.lease_expires_at, action, detail)


def recover_store(
    engine: Engine, *, now: dt.datetime, kill: bool = True, term_grace_s: float = 1.0
) -> RecoverReport:
    """Abort every running probe whose lease expired before ``now``, in three steps: read the expired
    rows (read-only), kill their canaries with no transaction open, then close the rows in one short
    write transaction. Killing takes up to ``term_grace_s + KILL_WAIT_S`` per orphan; holding the store's write
    lock that long would stall every other prober's heartbeat."""
    from evidence_store.database import session_scope
    from evidence_store.journal import expired_probes

    with session_scope(engine, read_only=True) as session:
        rows = expired_probes(session, now)
    if not rows:
        return RecoverReport(now)
    killed = [(row, *kill_orphan(row.probe_id, row.pgid, kill=kill, term_grace_s=term_grace_s)) for row in rows]
    with session_scope(engine) as session:
        done = [_mark_aborted(session, row, action, detail, now) for row, action, detail in killed]
    return RecoverReport(now, tuple(p for p in done if p is not None))


async def recover_store_async(
    engine: Engine, *, now: dt.datetime, kill: bool = True, term_grace_s: float = 1.0
) -> RecoverReport:
    """:func:`recover_store` from async code: the blocking waits run in a worker thread."""
    import functools

    import anyio

    return await anyio.to_thread.run_sync(
        functools.partial(recover_store, engine, now=now, kill=kill, term_grace_s=term_grace_s)
    )


def recover(
    session: Session, *, now: dt.datetime, kill: bool = True, term_grace_s: float = 1.0
) -> RecoverReport:
    """The same as :func:`recover_store`, inside the caller's transaction (which it never commits).

    The caller's transaction stays open while canaries are killed; prefer :func:`recover_store`
    unless the recovery must commit together with the caller's other writes."""
    from evidence_store.journal import expired_probes

    done = []
    for row in expired_probes(session, now):
        action, detail = kill_orphan(row.probe_id, row.pgid, kill=kill, term_grace_s=term_grace_s)
        recovered = _mark_aborted(session, row, action, detail, now)
        if recovered is not None:
            done.append(recovered)
    return RecoverReport(now, tuple(done))
