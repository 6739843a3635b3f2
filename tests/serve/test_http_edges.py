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


def test_a_bad_resident_is_named_by_its_place_not_a_type(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/fit", json={"device": "h100-sxm", "candidate": "embedding-service@1.8.0",
                                    "residents": ["llm-prefill", 5]})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("field 'body.residents[1]': ") and ".str" not in detail, detail
    assert "5 (a number)" in detail


def test_the_cli_names_its_own_options_through_the_server(api: Api, tmp_path: Path) -> None:
    import subprocess

    from tests.conftest import canary_cmd, cli_env

    env = cli_env(tmp_path) | {"CANARY_SERVER": api.server.base, "CANARY_TOKEN": api.tokens["fit"]}
    done = subprocess.run([*canary_cmd(), "fit", "h100-sxm", str(ROOT / "examples" / "profiles" / "embedding-service.yaml"),
                           "--regime", "mps:300"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "'--regime'" in done.stderr and "body.regime" not in done.stderr, done.stderr


@pytest.mark.parametrize(("detail", "want"), [
    ("field 'body.regime': bad", "field '--regime': bad"),
    ("field 'body.candidate.memory.reserved_bytes': bad", "field 'memory.reserved_bytes' of PROFILE: bad"),
    ("field 'body.residents[0]': bad", "field '--resident #1': bad"),
    ("registry profile x@1: field 'memory': bad", "registry profile x@1: field 'memory': bad"),
])
def test_cli_fields(detail: str, want: str) -> None:
    from canary.serve.client import cli_fields

    assert cli_fields(detail) == want


@pytest.mark.slow
def test_the_start_up_line_says_the_extenders_auth(store_url: str, tmp_path: Path) -> None:
    from tests.serve.conftest import Server

    config = tmp_path / "serve.yaml"
    config.write_text("extender_auth: none\n")
    server = Server(store_url, tmp_path, "--config", str(config)).start()
    server.stop()
    line = next(x for x in server.log.read_text().splitlines() if "serving on" in x)
    assert "auth: bearer token" in line and "extender verbs: no auth" in line, line
