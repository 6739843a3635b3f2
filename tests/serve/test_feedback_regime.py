"""``POST /v1/feedback`` reports a violation for an *admitted* pair: without ``regime`` it is recorded
under the regime the pair's stored admission was decided under (not the regime canary would choose
now), refused with a 422 naming ``body.regime`` when the pair was admitted under several, and the answer
names the pair key it was recorded under."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Api, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def _admit(c: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post("/v1/admissions", json=body)
    if r.status_code == 200:
        return dict(r.json())
    assert r.status_code == 202, r.text
    for _ in range(20):
        status = c.get(r.headers["location"], params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            assert status["state"] == "done", status
            return dict(status["certificate"])
    raise AssertionError("the probe never finished")


def test_feedback_takes_the_regime_of_the_admission(api: Api) -> None:
    candidate = profile_doc(version=f"1.8.0-fb-{uuid.uuid4().hex[:8]}")
    device = snapshot_doc()  # g-nccl-mps-room: MPS, one profiled resident 'comms'
    feedback = {"device": device, "candidate": candidate, "resident_name": "comms"}
    with api.client("admin") as c:
        cert = _admit(c, {"device": device, "candidate": candidate, "regime": "mps:30"})
        assert (cert["verdict"], cert["regime"]) == ("admit", "mps:30"), cert["reason"]
        r = c.post("/v1/feedback", json=feedback)
        assert r.status_code == 200, r.text
        assert r.json()["key"]["regime"] == "mps:30"
        assert r.json()["key"]["candidate_version"] == candidate["version"]
        assert "admission" in r.json()["regime_from"]
        shown = c.get(f"/v1/evidence/{r.json()['evidence_id']}").json()["evidence"]
        assert shown["key"]["regime"] == "mps:30"

        # Given, the body's regime is used as it is.
        given = c.post("/v1/feedback", json=feedback | {"regime": "mps:30"})
        assert given.status_code == 200 and given.json()["key"]["regime"] == "mps:30"

        # Admitted under a second regime too: which one production saw is not ours to guess.
        second = _admit(c, {"device": device, "candidate": candidate, "regime": "mps:50"})
        assert (second["verdict"], second["regime"]) == ("admit", "mps:50"), second["reason"]
        before = c.get("/v1/evidence", params={"limit": 1000}).json()
        ambiguous = c.post("/v1/feedback", json=feedback)
        assert ambiguous.status_code == 422, ambiguous.text
        detail = ambiguous.json()["detail"]
        assert detail.startswith("field 'body.regime': ") and "mps:30" in detail and "mps:50" in detail
        assert c.get("/v1/evidence", params={"limit": 1000}).json() == before
