"""Journals: where a probe is written as running before its candidate starts.

:class:`MemoryJournal` keeps rows in a dict (tests, dry runs); it forgets everything at exit, so it
cannot help recovery after a crash. The durable one is ``evidence_store.journal.StoreJournal``
(the probe never imports the store; the admission wires it in). Journals read the wall clock (UTC)
for ``now``: leases are wall-clock deadlines that other processes compare against.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from canary.errors import ProbeError


@dataclass
class JournalRow:
    probe_id: str
    key_json: dict[str, Any]
    owner: str
    lease_s: float
    pid: int
    pgid: int
    budget_json: dict[str, Any]
    state: str
    started_at: dt.datetime
    lease_expires_at: dt.datetime
    result_json: dict[str, Any] | None = None
    heartbeats: int = 0


@dataclass
class MemoryJournal:
    """An in-memory journal. ``events`` lists ``(call, probe_id)`` in order, for tests."""

    rows: dict[str, JournalRow] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)

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
        if probe_id in self.rows:
            raise ProbeError(f"probe id {probe_id!r} is already in the journal")
        now = dt.datetime.now(dt.UTC)
        self.rows[probe_id] = JournalRow(
            probe_id,
            dict(key_json),
            owner,
            lease_s,
            pid,
            pgid,
            dict(budget_json),
            "running",
            now,
            now + dt.timedelta(seconds=lease_s),
        )
        self.events.append(("start", probe_id))

    def heartbeat(self, probe_id: str, lease_s: float) -> None:
        row = self.rows[probe_id]
        if row.state != "running":
            raise ProbeError(f"probe {probe_id} is {row.state}: its lease cannot be renewed")
        row.lease_expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lease_s)
        row.heartbeats += 1
        self.events.append(("heartbeat", probe_id))

    def finish(self, probe_id: str, state: str, result_json: dict[str, Any]) -> None:
        row = self.rows[probe_id]
        row.state = state
        row.result_json = dict(result_json)
        self.events.append(("finish", probe_id))
