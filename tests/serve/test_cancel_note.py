"""``DELETE /v1/probes/{id}`` promises only what happens: a running probe's runner sees the cancel when it
next renews the lease, so a short probe may finish first and end ``done`` with its evidence recorded.
The answer's ``note`` says so, and the final state agrees with what the store holds."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.serve.conftest import make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def test_cancel_of_a_running_probe_says_what_it_may_not_stop(store_url: str, server_factory: Any) -> None:
    token = make_token(store_url, "admin")
    server = server_factory(store_url, "--sim-time-scale", "0.02")
    version = f"cnote-{uuid.uuid4().hex[:6]}"
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=version)}
    with server.client(token) as c:
        r = c.post("/v1/admissions", json=body)
        assert r.status_code == 202, r.text
        for _ in range(600):
            state = c.get(r.headers["location"], params={"wait": "50ms"}).json()["state"]
            if state != "queued":
                break
        cancelled = c.delete(r.headers["location"]).json()
        final = c.get(r.headers["location"], params={"wait": "60s"}).json()
        recorded = c.get("/v1/evidence", params={"pair": f"2.21.5:{version}"}).json()
        again = c.delete(r.headers["location"]).json()
    if cancelled["state"] == "running":
        assert cancelled["cancel_requested"] is True
        note = cancelled["note"]
        assert "lease" in note and "done" in note and "evidence recorded" in note, note
    assert final["state"] in ("done", "cancelled"), final
    # whichever it ended, the store agrees with the state: cancelled recorded nothing, done recorded it
    assert (final["state"] == "done") == bool(recorded), (final["state"], recorded)
    assert again["note"].startswith(f"already {final['state']}") or final["state"] == "cancelled"
