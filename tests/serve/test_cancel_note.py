"""``DELETE /v1/probes/{id}`` on a running probe keeps docs/serve.md's promise: the candidate is rolled
back and nothing is recorded — the probe ends ``cancelled``, never ``done``, even when it would have
finished well within the lease renewal (5 s by default). Each probe here takes about a second of wall
time (``--sim-time-scale 0.004``), so a cancel seen only at the next renewal would let it end ``done``
with its evidence recorded. A cancel that comes after the result was recorded answers ``already done``,
and then the evidence is there."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.serve.conftest import make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def _cancel_while_running(c: Any) -> tuple[dict[str, Any], dict[str, Any], list[Any], float, dict[str, Any]]:
    version = f"cnote-{uuid.uuid4().hex[:6]}"
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=version)}
    r = c.post("/v1/admissions", json=body)
    assert r.status_code == 202, r.text
    for _ in range(600):
        state = c.get(r.headers["location"], params={"wait": "20ms"}).json()["state"]
        if state != "queued":
            break
    asked = time.monotonic()
    cancelled = c.delete(r.headers["location"]).json()
    final = c.get(r.headers["location"], params={"wait": "60s"}).json()
    took_s = time.monotonic() - asked
    recorded = c.get("/v1/evidence", params={"pair": f"2.21.5:{version}"}).json()
    again = c.delete(r.headers["location"]).json()
    return cancelled, final, recorded, took_s, again


def test_cancel_of_a_running_probe_records_nothing(store_url: str, server_factory: Any) -> None:
    token = make_token(store_url, "admin")
    server = server_factory(store_url, "--sim-time-scale", "0.004")
    hit_running = 0
    with server.client(token) as c:
        for _ in range(3):
            cancelled, final, recorded, took_s, again = _cancel_while_running(c)
            assert again["note"].startswith(f"already {final['state']}") or final["state"] == "cancelled", again
            if cancelled["state"] != "running":  # it ended before the cancel: the answer says so
                assert cancelled["note"] == f"already {cancelled['state']}: a cancel changes nothing"
                assert (final["state"] == "done") == bool(recorded), (final, recorded)
                continue
            hit_running += 1
            assert final["state"] == "cancelled", final
            assert final.get("certificate") is None, final
            assert recorded == [], recorded  # no evidence of the cancelled probe's pair
            assert cancelled["cancel_requested"] is True
            note = cancelled["note"]
            assert "nothing is recorded" in note and "never 'done'" in note, note
            assert took_s < 5.0, took_s  # seen before the first lease renewal (lease 15 s / 3)
    assert hit_running, "no cancel reached a running probe: the test proved nothing"
