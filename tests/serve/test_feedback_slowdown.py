"""``POST /v1/feedback`` refuses what ``canary feedback --slowdown-pct`` refuses: a production SLO
violation the pair caused is a slowdown, so the resident ran slower beside the candidate than alone —
more than 0 % above its latency alone; more than 10000 % (a hundred and one times as slow) is a unit
mistake, not a measurement. A refusal is a 422 naming ``body.slowdown_pct``, and nothing is recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.serve.conftest import Api, profile_doc, snapshot_doc

CANDIDATE = profile_doc(version="feedback-limits-1")
DEVICE = snapshot_doc()  # g-nccl-mps-room: a profiled resident named 'comms'


def _body(slowdown: Any) -> str:
    return json.dumps({"device": DEVICE, "candidate": CANDIDATE, "resident_name": "comms", "slowdown_pct": slowdown},
                      allow_nan=True)


def _evidence(api: Api) -> list[str]:
    with api.client("read") as c:
        rows = c.get("/v1/evidence", params={"limit": 1000}).json()
    return sorted(r["id"] for r in rows)


@pytest.mark.parametrize("slowdown", [
    pytest.param(-5, id="negative"),
    pytest.param(0, id="zero"),
    pytest.param(10000.5, id="over-10000"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="infinite"),
    pytest.param("40%", id="text"),
])
def test_a_slowdown_that_is_not_one_is_refused_and_nothing_recorded(api: Api, slowdown: Any) -> None:
    before = _evidence(api)
    with api.client("feedback") as c:
        r = c.post("/v1/feedback", content=_body(slowdown), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("field 'body.slowdown_pct': "), r.text
    assert _evidence(api) == before


@pytest.mark.parametrize("slowdown", [pytest.param(0.5, id="small"), pytest.param(10000, id="at-the-limit"),
                                      pytest.param(None, id="not-measured")])
def test_a_slowdown_within_the_limits_is_recorded(api: Api, slowdown: float | None) -> None:
    before = _evidence(api)
    with api.client("feedback") as c:
        r = c.post("/v1/feedback", content=_body(slowdown), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    recorded = r.json()["evidence_id"]
    assert _evidence(api) == sorted([*before, recorded])
    with api.client("read") as c:
        shown = c.get(f"/v1/evidence/{recorded}").json()["evidence"]
    assert (shown["source"], shown["outcome"], shown["resident_slowdown_pct"]) == ("production", "unsafe", slowdown)
