"""Recovery of crashed probes: find running journal rows whose lease expired, kill their canaries,
mark them ``aborted``.

A probe's prober renews its lease while it runs; a lease that expired means the prober died (or
hung) and its canary may still be running, sharing the GPU with a resident nobody watches. For each
such row, :func:`recover`:

1. kills the canary's process group (SIGTERM, then SIGKILL after ``term_grace_s``) — but only when a
   live member of the group carries the probe's ``CANARY_PROBE_ID``; a group that is already gone is
   fine and reported; a group id now used by unrelated processes is left alone and reported;
2. marks the row ``aborted`` with the reason in ``result_json``.

It never records evidence: an aborted probe observed nothing trustworthy. It takes the caller's
session and never commits; the caller commits once (``canary recover`` and every probe start).
"""

from __future__ import annotations

import datetime as dt
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from canary.probe.procs import carries_probe_id, group_members, signal_group

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

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


def _wait_gone(pgid: int, probe_id: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if not [m for m in group_members(pgid) if carries_probe_id(m.pid, probe_id)]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def kill_orphan(
    probe_id: str, pgid: int, *, kill: bool = True, term_grace_s: float = 1.0, kill_wait_s: float = 1.0
) -> tuple[RecoverAction, str]:
    """Kill the orphaned canary of ``probe_id`` in group ``pgid``; returns the action and a detail."""
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
    signal_group(pgid, signal.SIGTERM)
    if _wait_gone(pgid, probe_id, term_grace_s):
        return "killed", f"process group {pgid} ({len(ours)} process(es)) ended on SIGTERM"
    signal_group(pgid, signal.SIGKILL)
    if _wait_gone(pgid, probe_id, kill_wait_s):
        return "killed", f"process group {pgid} ({len(ours)} process(es)) killed with SIGKILL after SIGTERM"
    return "kill-failed", f"process group {pgid} survived SIGKILL"


def recover(
    session: Session, *, now: dt.datetime, kill: bool = True, term_grace_s: float = 1.0
) -> RecoverReport:
    """Abort every running probe whose lease expired before ``now``; see the module docstring."""
    from evidence_store.repository import expired_probes, journal_update

    done: list[RecoveredProbe] = []
    for row in expired_probes(session, now):
        action, detail = kill_orphan(row.probe_id, row.pgid, kill=kill, term_grace_s=term_grace_s)
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
                "previous_result": row.result_json,
            },
            now=now,
        )
        done.append(
            RecoveredProbe(row.probe_id, row.owner, row.pid, row.pgid, row.lease_expires_at, action, detail)
        )
    return RecoverReport(now, tuple(done))
