"""Edges of the HTTP surface a newcomer meets first: a body sent as a form (``curl -d``) is 415 saying
JSON is needed; ``?wait=`` takes minutes; the extender without a pod passes no node; reasons fit a
Kubernetes event; a 413 counts under its route; the document declares the auth answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary.serve.extender import EXTENDER_REASON_BYTES, cap_reason
from tests.serve.conftest import Api

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["/v1/fit", "/v1/admissions", "/v1/feedback", "/v1/extender/filter"])
def test_a_form_body_is_415_saying_json(api: Api, path: str) -> None:
    body = json.dumps({"device": "h100-sxm", "candidate": "embedding-service@1.8.0"})
    with api.client("admin") as c:  # what `curl -d '{…}'` sends
        r = c.post(path, content=body, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415, r.text
    assert "application/json" in r.json()["detail"] and "application/x-www-form-urlencoded" in r.json()["detail"]


def test_wait_takes_minutes(api: Api) -> None:
    with api.client("read") as c:
        r = c.get("/v1/probes/no-such-probe", params={"wait": "2m"})
        assert r.status_code == 404, r.text  # the duration was understood; the probe does not exist
        bad = c.get("/v1/probes/no-such-probe", params={"wait": "2h"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("field 'query.wait': ")
    assert "2m" in bad.json()["detail"]


def test_extender_without_a_pod_passes_no_node(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json={"Pod": None, "Nodes": None, "NodeNames": ["gpu-node-a", "gpu-node-b"]})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["nodenames"] == []
        assert sorted(answer["failedNodes"]) == ["gpu-node-a", "gpu-node-b"]
        assert "no Pod" in answer["error"]
        scores = c.post("/v1/extender/prioritize", json={"Pod": None, "Nodes": None, "NodeNames": ["gpu-node-a"]})
    assert scores.json() == [{"host": "gpu-node-a", "score": 0}]


def test_a_413_counts_under_its_route(api: Api) -> None:
    with api.client("admin") as c:
        big = b"{" + b" " * (1024 * 1024 + 10) + b"}"
        r = c.post("/v1/fit", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        metrics = c.get("/metrics").text
    assert 'canary_http_responses_total{route="/v1/fit",status="413"}' in metrics


@pytest.mark.parametrize("reason", ["gpu0: reject — " + "x" * 1400, "gpu0: reject ≤ " + "é" * 900, "short"])
def test_an_extender_reason_fits_a_kubernetes_event(reason: str) -> None:
    capped = cap_reason(reason, "embedding-service@1.8.0")
    assert len(capped.encode()) <= EXTENDER_REASON_BYTES <= 1024
    if len(reason.encode()) <= EXTENDER_REASON_BYTES:
        assert capped == reason
    else:
        assert capped.startswith(reason[:100]) and "canary fit --server" in capped and "embedding-service@1.8.0" in capped


def test_the_document_declares_the_auth_answers() -> None:
    paths = json.loads((ROOT / "docs" / "openapi.json").read_text())["paths"]
    for path in ("/v1/extender/filter", "/v1/extender/prioritize"):
        assert {"401", "403", "413", "415", "422"} <= set(paths[path]["post"]["responses"]), path
    assert {"401", "403"} <= set(paths["/metrics"]["get"]["responses"])
    assert "415" in paths["/v1/fit"]["post"]["responses"]
