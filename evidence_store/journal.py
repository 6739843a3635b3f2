"""The probe journal in the evidence store: one row per probe, written before the candidate starts,
so that ``canary recover`` can find and clean up a probe whose process died.

The functions take the caller's ``Session`` and never commit; none reads the clock. ``StoreJournal``
is the store's side of ``canary.probe.interfaces.Journal``: each of its writes is its own committed
transaction, so the row exists before the candidate starts and survives a crash of the process that
runs the probe.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from canary._model import PairKey, utcnow
from canary.errors import InputError, ProbeError
from evidence_store.database import session_scope
from evidence_store.errors import LeaseLost
from evidence_store.leases import lease_until
from evidence_store.models import ProbeJournal
from evidence_store.schemas import PROBE_STATES, ProbeRow, ProbeState, to_utc


def journal_start(
    session: Session,
    *,
    probe_id: str,
    key: PairKey,
    owner: str,
    lease_s: float,
    pid: int,
    pgid: int,
    budget_json: dict[str, Any],
    now: datetime,
) -> None:
    """Write the probe as ``running`` with its owner and lease, before the candidate starts.

    Repeating the same start is harmless; a different probe under the same id is an ``InputError``.
    """
    until = lease_until(now, lease_s)
    existing = session.get(ProbeJournal, probe_id)
    if existing is not None:
        same = (
            existing.state == "running"
            and existing.key_digest == key.digest()
            and (existing.owner, existing.pid, existing.pgid) == (owner, pid, pgid)
            and existing.budget_json == budget_json
        )
        if same:
            return
        raise InputError(
            f"probe id {probe_id!r} is already in the journal ({existing.state}, owner {existing.owner})",
            field="probe_id",
        )
    now = to_utc(now)
    session.add(
        ProbeJournal(
            probe_id=probe_id,
            key_digest=key.digest(),
            key_json=key.as_dict(),
            owner=owner,
            pid=pid,
            pgid=pgid,
            budget_json=budget_json,
            state="running",
            result_json=None,
            started_at=now,
            updated_at=now,
            lease_expires_at=until,
        )
    )
    session.flush()


def _journal_row(session: Session, probe_id: str) -> ProbeJournal:
    row = session.get(ProbeJournal, probe_id)
    if row is None:
        raise InputError(f"no probe {probe_id!r} in the journal", field="probe_id")
    return row


def journal_update(
    session: Session,
    probe_id: str,
    *,
    state: ProbeState,
    result_json: dict[str, Any] | None = None,
    now: datetime,
) -> None:
    """Move the probe to ``state``; ``result_json`` replaces the stored result when given."""
    if state not in PROBE_STATES:
        raise InputError(f"unknown probe state {state!r}; one of {', '.join(PROBE_STATES)}", field="state")
    row = _journal_row(session, probe_id)
    row.state = state
    row.updated_at = to_utc(now)
    if result_json is not None:
        row.result_json = result_json
    session.flush()


def journal_heartbeat(session: Session, probe_id: str, lease_s: float, now: datetime) -> None:
    """Renew a running probe's lease to ``now + lease_s``.

    Raises ``LeaseLost`` when the journal no longer says ``running`` (recovery took the probe over).
    """
    until = lease_until(now, lease_s)
    row = _journal_row(session, probe_id)
    if row.state != "running":
        raise LeaseLost(f"probe {probe_id} is {row.state}, not running: its lease cannot be renewed")
    row.lease_expires_at = until
    row.updated_at = to_utc(now)
    session.flush()


def expired_probes(session: Session, now: datetime) -> list[ProbeRow]:
    """Running probes whose lease ended before ``now``, oldest lease first."""
    rows = session.scalars(
        select(ProbeJournal)
        .where(ProbeJournal.state == "running", ProbeJournal.lease_expires_at < to_utc(now))
        .order_by(ProbeJournal.lease_expires_at, ProbeJournal.probe_id)
    ).all()
    return [ProbeRow.model_validate(r) for r in rows]


def journal_get(session: Session, probe_id: str) -> ProbeRow | None:
    """The journal entry, or ``None`` when there is none."""
    row = session.get(ProbeJournal, probe_id)
    return ProbeRow.model_validate(row) if row is not None else None


class StoreJournal:
    """The journal in the evidence store; ``key_json`` is the pair key (a ``PairKey``, or its six parts
    by name, ``PairKey.as_dict()``). Reads the clock (``utcnow``) for the times it records."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(
        self,
        probe_id: str,
        key_json: PairKey | dict[str, Any],
        owner: str,
        lease_s: float,
        pid: int,
        pgid: int,
        budget_json: dict[str, Any],
    ) -> None:
        key = key_json if isinstance(key_json, PairKey) else PairKey.from_dict(key_json)
        with session_scope(self.engine) as session:
            journal_start(
                session,
                probe_id=probe_id,
                key=key,
                owner=owner,
                lease_s=lease_s,
                pid=pid,
                pgid=pgid,
                budget_json=budget_json,
                now=utcnow(),
            )

    def heartbeat(self, probe_id: str, lease_s: float) -> None:
        with session_scope(self.engine) as session:
            journal_heartbeat(session, probe_id, lease_s, utcnow())

    def finish(self, probe_id: str, state: str, result_json: dict[str, Any]) -> None:
        """Close the row; a row recovery already closed (not ``running``) keeps its state."""
        with session_scope(self.engine) as session:
            row = journal_get(session, probe_id)
            if row is None:
                raise ProbeError(f"probe {probe_id} is missing from the journal")
            if row.state != "running":
                return
            if state not in PROBE_STATES:
                raise ProbeError(f"unknown journal state {state!r}")
            journal_update(
                session,
                probe_id,
                state=state,
                result_json=result_json,
                now=utcnow(),
            )
