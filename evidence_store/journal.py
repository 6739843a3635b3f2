"""The probe journal in the evidence store: the store's side of ``canary.probe.interfaces.Journal``.

Each write is its own committed transaction: the row must exist before the candidate starts and
survive a crash of the process that runs the probe (``canary recover`` reads it)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine

from canary.errors import ProbeError


class StoreJournal:
    """The journal in the evidence store; ``key_json`` must be a full pair key (``PairKey.as_dict()``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(
        self,
        probe_id: str,
        key_json: dict[str, Any],
        owner: str,
        lease_s: float,
        pid: int,
        pgid: int,
        budget_json: dict[str, Any],
    ) -> None:
        from evidence_store.engine import session_scope
        from evidence_store.keys import PairKey
        from evidence_store.repository import journal_start

        key = PairKey.from_dict(key_json)
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
                now=dt.datetime.now(dt.UTC),
            )

    def heartbeat(self, probe_id: str, lease_s: float) -> None:
        from evidence_store.engine import session_scope
        from evidence_store.repository import journal_heartbeat

        with session_scope(self.engine) as session:
            journal_heartbeat(session, probe_id, lease_s, dt.datetime.now(dt.UTC))

    def finish(self, probe_id: str, state: str, result_json: dict[str, Any]) -> None:
        """Close the row; a row recovery already closed (not ``running``) keeps its state."""
        from evidence_store.engine import session_scope
        from evidence_store.repository import journal_get, journal_update
        from evidence_store.schemas import PROBE_STATES

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
                now=dt.datetime.now(dt.UTC),
            )
