"""A cancel sent to one server stops a probe another server runs (docs/serve.md ``DELETE
/v1/probes/{id}``): the runner reads the probe's cancel flag every quarter second, not only when it
renews the lease (every third of ``probe_lease_s``, 5 s by default), so the probe — about 4.5 s of
wall time at ``--sim-time-scale 0.02`` — ends ``cancelled`` with nothing recorded, well before it would
have finished."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from evidence_store.database import make_engine, session_scope
from evidence_store.service import probe_queue
from tests.serve.conftest import make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def test_a_cancel_through_another_server_is_seen_within_a_poll(store_url: str, server_factory: Any) -> None:
    token = make_token(store_url, "admin")
    servers = [server_factory(store_url, "--sim-time-scale", "0.02", name=f"server-{i}") for i in (1, 2)]
    version = f"cross-{uuid.uuid4().hex[:6]}"
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=version)}
    with servers[0].client(token) as c:
        r = c.post("/v1/admissions", json=body)
        assert r.status_code == 202, r.text
        probe_id = r.json()["id"]
        for _ in range(600):
            if c.get(r.headers["location"], params={"wait": "20ms"}).json()["state"] != "queued":
                break
    engine = make_engine(store_url)
    try:
        with session_scope(engine, read_only=True) as s:
            ticket = probe_queue.get(s, probe_id)
    finally:
        engine.dispose()
    assert ticket is not None and ticket.state == "running" and ticket.owner is not None, ticket
    runner_pid = int(ticket.owner.split(":")[1])
    pids = [server.proc.pid for server in servers if server.proc is not None]
    assert runner_pid in pids, (ticket.owner, pids)
    other = servers[1 - pids.index(runner_pid)]  # the server that does not run the probe takes the cancel
    with other.client(token) as c:
        asked = time.monotonic()
        cancelled = c.delete(f"/v1/probes/{probe_id}").json()
        final = c.get(f"/v1/probes/{probe_id}", params={"wait": "60s"}).json()
        took_s = time.monotonic() - asked
        recorded = c.get("/v1/evidence", params={"pair": f"2.21.5:{version}"}).json()
    assert cancelled["state"] == "running" and cancelled["cancel_requested"] is True, cancelled
    assert final["state"] == "cancelled" and final["certificate"] is None, final
    assert recorded == [], recorded
    assert took_s < 3.0, took_s  # a poll is 0.25 s; the lease renewal would have been up to 5 s away
