"""The HTTP API over real HTTP on loopback: a ``canary serve`` subprocess, real SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import canary_cmd
from tests.serve.conftest import EX, Api, profile_doc, snapshot_doc


def _unique_candidate(**changes: Any) -> dict[str, Any]:
    """The embedding service under a version never seen before: an unseen pair."""
    return profile_doc(version=f"1.8.0-{uuid.uuid4().hex[:8]}", **changes)


def _probe_to_end(c: httpx.Client, location: str) -> dict[str, Any]:
    for _ in range(20):
        status: dict[str, Any] = c.get(location, params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            return status
    raise AssertionError(f"probe {location} still not final: {status}")


def test_health_and_readiness(api: Api) -> None:
    with api.client(None) as c:
        assert c.get("/healthz").json()["status"] == "ok"
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"


@pytest.mark.parametrize(("scope", "method", "path", "want"), [
    pytest.param(None, "GET", "/v1/evidence", 401, id="no-token"),
    pytest.param("bogus", "GET", "/v1/evidence", 401, id="bad-token"),
    pytest.param("read", "POST", "/v1/fit", 403, id="read-cannot-fit"),
    pytest.param("feedback", "POST", "/v1/admissions", 403, id="feedback-cannot-admit"),
    pytest.param("fit", "POST", "/v1/admissions", 403, id="fit-cannot-admit"),
    pytest.param("fit", "POST", "/v1/fit", 200, id="fit-fits"),
    pytest.param("admit", "GET", "/v1/evidence", 200, id="admit-reads"),
    pytest.param("admit", "POST", "/v1/profiles", 403, id="admit-is-not-admin"),
    pytest.param(None, "GET", "/metrics", 401, id="metrics-need-a-token"),
])
def test_scopes(api: Api, scope: str | None, method: str, path: str, want: int) -> None:
    body = {"device": "h100-sxm", "candidate": profile_doc()} if method == "POST" else None
    if path == "/v1/profiles":
        body = {"document": profile_doc()}
    headers = {}
    if scope == "bogus":
        headers["Authorization"] = "Bearer cnr_0000000000000000_not-a-secret"
    elif scope is not None:
        headers["Authorization"] = f"Bearer {api.tokens[scope]}"
    with httpx.Client(base_url=api.server.base, timeout=30.0) as c:
        r = c.request(method, path, json=body, headers=headers)
    assert r.status_code == want, r.text
    if want == 401:
        assert r.headers.get("www-authenticate") == "Bearer"


def test_fit_answers_what_the_cli_answers(api: Api, tmp_path: Any) -> None:
    """Counterexample (a): the persistent megakernel leaves no registers for llm-decode (the example says so)."""
    snap, prof = EX / "snapshots" / "a-persistent-35pct.yaml", EX / "profiles" / "llm-decode.yaml"
    with api.client("fit") as c:
        r = c.post("/v1/fit", json={"device": snapshot_doc("a-persistent-35pct.yaml"),
                                    "candidate": profile_doc("llm-decode.yaml")})
    assert r.status_code == 200, r.text
    remote = r.json()
    local = subprocess.run([*canary_cmd(), "--db", api.db_url, "fit", str(snap), str(prof), "--json"],
                           capture_output=True, text=True, timeout=120)
    assert local.returncode == 1, local.stderr
    mine = json.loads(local.stdout)
    assert remote["verdict"] == mine["verdict"] == "reject"
    assert remote["limiting_resource"] == mine["limiting_resource"] == "registers"
    assert [f["resource"] for f in remote["findings"]] == [f["resource"] for f in mine["findings"]]


def test_unseen_pair_probes_once_then_answers_from_evidence(api: Api) -> None:
    body = {"device": snapshot_doc(), "candidate": _unique_candidate()}
    with api.client("admit") as c:
        first = c.post("/v1/admissions", json=body)
        assert first.status_code == 202, first.text
        location = first.headers["location"]
        assert location == f"/v1/probes/{first.json()['id']}"
        status = _probe_to_end(c, location)
        assert status["state"] == "done", status
        states = [t["state"] for t in status["transitions"]]
        assert states == ["queued", "running", "done"]
        stamps = [datetime.fromisoformat(t["at"]) for t in status["transitions"]]
        assert stamps == sorted(stamps)
        cert = status["certificate"]
        assert cert["verdict"] == "admit" and cert["decided_by"] == "canary"
        probe_evidence = set(cert["evidence"]["ids"])
        again = c.post("/v1/admissions", json=body)
        assert again.status_code == 200, again.text
        cached = again.json()
        assert cached["decided_by"] == "cache" and cached["verdict"] == "admit"
        assert probe_evidence <= set(cached["evidence"]["ids"])


def test_no_probe_admission_says_unknown_without_queueing(api: Api) -> None:
    with api.client("admit") as c:
        r = c.post("/v1/admissions", json={"device": snapshot_doc(), "candidate": _unique_candidate(),
                                           "probe": False, "reserve": False})
    assert r.status_code == 200, r.text
    assert r.json()["verdict"] == "unknown"


def test_evidence_revoke_and_feedback(api: Api) -> None:
    body = {"device": snapshot_doc(), "candidate": _unique_candidate(), "reserve": False}
    with api.client("admin") as c:
        status = _probe_to_end(c, c.post("/v1/admissions", json=body).headers["location"])
        evidence_id = status["certificate"]["evidence"]["ids"][0]
        shown = c.get(f"/v1/evidence/{evidence_id}").json()
        assert shown["evidence"]["id"] == evidence_id and shown["evidence"]["outcome"] == "safe"
        pair = f"{shown['evidence']['key']['resident_version']}:{body['candidate']['version']}"
        listed = c.get("/v1/evidence", params={"pair": pair}).json()
        assert [e["id"] for e in listed] == [evidence_id]
        with api.client("read") as reader:
            assert reader.post(f"/v1/evidence/{evidence_id}/revoke", json={"reason": "x"}).status_code == 403
        revoked = c.post(f"/v1/evidence/{evidence_id}/revoke", json={"reason": "bad sensor"}).json()
        assert revoked["status"] == "revoked"
        # Without current evidence the pair is unseen again: a new probe, not a cached answer.
        assert c.post("/v1/admissions", json=body).status_code == 202
        assert c.get("/v1/evidence/not-an-id").status_code == 404


def test_evidence_pair_and_id_as_the_cli_takes_them(api: Api, tmp_path: Any) -> None:
    """``?pair=`` takes what ``canary evidence list --pair`` takes (names, name@version, versions) and
    finds the same records; a malformed one is a 422 naming ``query.pair``; an id prefix (the tables
    print 8 characters) names its record for show and revoke."""
    from tests.conftest import cli_env

    candidate = _unique_candidate()
    body = {"device": snapshot_doc(), "candidate": candidate, "reserve": False}
    with api.client("admin") as c:
        status = _probe_to_end(c, c.post("/v1/admissions", json=body).headers["location"])
        evidence_id = status["certificate"]["evidence"]["ids"][0]
        resident = status["certificate"]["residents"][0]
        for pair in (f"{resident['name']}:{candidate['name']}@{candidate['version']}",
                     f"{resident['workload_version']}:{candidate['version']}"):
            listed = c.get("/v1/evidence", params={"pair": pair})
            assert listed.status_code == 200, listed.text
            assert [e["id"] for e in listed.json()] == [evidence_id], pair
            cli = subprocess.run([*canary_cmd(), "--db", api.db_url, "evidence", "list", "--pair", pair, "--json"],
                                 capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
            assert cli.returncode == 0, cli.stderr
            assert [e["id"] for e in json.loads(cli.stdout)] == [evidence_id], pair
        for bad in (resident["name"], f":{candidate['name']}", f"{resident['name']}:"):
            refused = c.get("/v1/evidence", params={"pair": bad})
            assert refused.status_code == 422, (bad, refused.text)
            assert refused.json()["detail"].startswith("field 'query.pair': "), refused.text
        shown = c.get(f"/v1/evidence/{evidence_id[:8]}")
        assert shown.status_code == 200, shown.text
        assert shown.json()["evidence"]["id"] == evidence_id
        assert c.get("/v1/evidence/zzzzzzzz").status_code == 404
        revoked = c.post(f"/v1/evidence/{evidence_id[:8]}/revoke", json={"reason": "bad sensor"})
        assert revoked.status_code == 200 and revoked.json()["id"] == evidence_id


def test_production_feedback_outweighs_a_pass(api: Api) -> None:
    body = {"device": snapshot_doc(), "candidate": _unique_candidate(), "reserve": False}
    with api.client("admin") as c:
        assert _probe_to_end(c, c.post("/v1/admissions", json=body).headers["location"])["state"] == "done"
        assert c.post("/v1/admissions", json=body).json()["verdict"] == "admit"
        with api.client("feedback") as fb:
            r = fb.post("/v1/feedback", json={"device": body["device"], "candidate": body["candidate"],
                                               "resident_name": "comms", "slowdown_pct": 40})
        assert r.status_code == 200, r.text
        after = c.post("/v1/admissions", json=body).json()
    assert after["verdict"] == "reject" and after["decided_by"] == "cache"
    assert r.json()["evidence_id"] in after["evidence"]["ids"]


def test_reservations_list_and_release(api: Api) -> None:
    from canary.backends import idle_snapshot
    from canary.catalog import lookup

    device = idle_snapshot(lookup("h100-sxm")).model_dump(mode="json") | {"uuid": f"GPU-{uuid.uuid4()}"}
    with api.client("admit") as c:
        cert = c.post("/v1/admissions", json={"device": device, "candidate": profile_doc()}).json()
        assert cert["verdict"] == "admit", cert
        booking = cert["resource_reservations"][0]
        rows = c.get("/v1/reservations", params={"device": device["uuid"]}).json()
        assert [r["id"] for r in rows] == [booking["id"]] and rows[0]["memory_bytes"] == booking["memory_bytes"]
        assert c.delete(f"/v1/reservations/{booking['id']}").status_code == 200
        assert c.get("/v1/reservations", params={"device": device["uuid"]}).json() == []
        assert c.delete("/v1/reservations/no-such-id").status_code == 404


def test_reservations_by_the_device_name_decisions_take(api: Api) -> None:
    """``?device=`` takes a DEVICE as decisions do (``h100`` books under ``sim:h100-sxm``) or a stored
    device id; a name that is neither is a 422 naming ``query.device``, never an empty list."""
    with api.client("admit") as c:
        cert = c.post("/v1/admissions", json={"device": "h100", "candidate": _unique_candidate()}).json()
        assert cert["verdict"] == "admit", cert
        booking = cert["resource_reservations"][0]["id"]
        listed = {}
        for device in ("h100", "h100-sxm", "sim:h100-sxm"):
            r = c.get("/v1/reservations", params={"device": device})
            assert r.status_code == 200, r.text
            listed[device] = [row["id"] for row in r.json()]
            assert booking in listed[device] and {row["device_id"] for row in r.json()} == {"sim:h100-sxm"}
        assert listed["h100"] == listed["h100-sxm"] == listed["sim:h100-sxm"]
        for unknown, want in (("h100x", "unknown device 'h100x'; closest: h100-sxm"),
                              ("agent:gpu-node-z/gpu0", "no node agent publishes")):
            refused = c.get("/v1/reservations", params={"device": unknown})
            assert refused.status_code == 422, refused.text
            detail = refused.json()["detail"]
            assert detail.startswith("field 'query.device': ") and want in detail, detail
        assert c.get("/v1/reservations", params={"device": f"GPU-{uuid.uuid4()}"}).json() == []
        assert c.delete(f"/v1/reservations/{booking}").status_code == 200


def test_registry_by_reference(api: Api) -> None:
    doc = _unique_candidate()
    ref = f"{doc['name']}@{doc['version']}"
    with api.client("admin") as c:
        put = c.post("/v1/profiles", json={"document": doc})
        assert put.status_code == 200 and put.json()["created"] is True
        assert c.post("/v1/profiles", json={"document": doc}).json()["created"] is False
        clash = c.post("/v1/profiles", json={"document": doc | {"duty_cycle": 0.5}})
        assert clash.status_code == 409 and "different content" in clash.json()["detail"]
        snap = c.post("/v1/snapshots", json={"document": snapshot_doc(), "name": "node-a-gpu0", "version": doc["version"]})
        assert snap.status_code == 200, snap.text
        by_ref = c.post("/v1/fit", json={"device": f"node-a-gpu0@{doc['version']}", "candidate": ref})
        by_value = c.post("/v1/fit", json={"device": snapshot_doc(), "candidate": doc})
        assert by_ref.status_code == 200, by_ref.text
        assert by_ref.json()["findings"] == by_value.json()["findings"]
        missing = c.post("/v1/fit", json={"device": "h100-sxm", "candidate": "nobody@0"})
        assert missing.status_code == 422 and "nobody@0" in missing.json()["detail"]


@pytest.mark.parametrize(("body", "field"), [
    pytest.param({"device": "h100-sxm", "candidate": profile_doc(canary={
        "executor": "process", "command": ["/bin/sh", "-c", "echo owned"], "monitor": "sim"})},
        "candidate.canary", id="command-in-profile"),
    pytest.param({"device": "h100-sxm", "candidate": profile_doc(canary={
        "executor": "sim", "monitor": "http", "endpoint": "http://169.254.169.254/"})},
        "candidate.canary", id="url-in-profile"),
    pytest.param({"device": "/etc/passwd", "candidate": profile_doc()}, "device", id="file-as-device"),
    pytest.param({"device": "nvml:0", "candidate": profile_doc()}, "device", id="live-device"),
    pytest.param({"device": "h100-sxm", "candidate": profile_doc(), "policy": "../../etc/x"}, "policy",
                 id="policy-path"),
    pytest.param({"device": "h100-sxm", "candidate": profile_doc(), "regime": "warp:9"}, "regime", id="bad-regime"),
    pytest.param({"device": "h100-sxm", "candidate": profile_doc(memory={"reserved_bytes": -1})}, "memory",
                 id="bad-profile-field"),
])
def test_untrusted_requests_are_refused_with_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    with api.client("admit") as c:
        r = c.post("/v1/admissions", json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"]


def test_body_over_the_limit_is_refused(api: Api) -> None:
    with api.client("admit") as c:
        r = c.post("/v1/fit", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_metrics_name_what_happened(api: Api) -> None:
    with api.client("admit") as c:
        c.post("/v1/fit", json={"device": "h100-sxm", "candidate": profile_doc()})
        text = c.get("/metrics").text
    assert 'canary_admissions_total{decided_by="hard-fit",endpoint="fit",verdict="admit"}' in text
    for name in ("canary_decision_seconds_bucket", "canary_store_seconds_bucket", 'canary_probes{state="running"}',
                 "canary_store_up 1.0", "canary_probe_coalesced_requests_total"):
        assert name in text


def test_probe_that_does_not_exist(api: Api) -> None:
    with api.client("admit") as c:
        assert c.get("/v1/probes/nope").status_code == 404
        assert c.delete("/v1/probes/nope").status_code == 404
        assert c.get("/v1/probes/nope", params={"wait": "forever"}).status_code == 422


_COMMAND = {"executor": "process", "command": ["/bin/sh", "-c", "echo owned"], "monitor": "sim"}


def _resident_with(canary: dict[str, Any]) -> dict[str, Any]:
    """A snapshot whose first resident carries a profile with this ``canary`` section."""
    doc = snapshot_doc("a-persistent-35pct.yaml")
    resident = doc["residents"][0] | {"profile": profile_doc("llm-decode.yaml", canary=canary)}
    return doc | {"residents": [resident, *doc["residents"][1:]]}


@pytest.mark.parametrize(("path", "body", "field"), [
    pytest.param("/v1/profiles", {"document": profile_doc(version="trust-1", canary=_COMMAND)},
                 "body.document.canary", id="profile-with-a-real-executor"),
    pytest.param("/v1/profiles", {"document": profile_doc(version="trust-2", canary={
        "executor": "sim", "monitor": "sim", "metrics_url": "http://169.254.169.254/"})},
                 "body.document.canary.metrics_url", id="profile-with-a-url"),
    pytest.param("/v1/snapshots", {"document": _resident_with(_COMMAND), "name": "trust-node", "version": "1"},
                 "body.document.residents[0].profile.canary", id="snapshot-resident-with-a-command"),
])
def test_the_registry_holds_only_what_a_request_may_send(api: Api, path: str, body: dict[str, Any],
                                                          field: str) -> None:
    """A request names registry entries, so a put is held to the request's trust rule: refused with the
    field, and nothing is stored."""
    with api.client("admin") as c:
        r = c.post(path, json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith(f"field '{field}'"), r.text
        stored = c.get(path).json()
    assert not any(e["version"] in ("trust-1", "trust-2") or e["name"] == "trust-node" for e in stored), stored


@pytest.mark.parametrize(("args", "document", "field"), [
    pytest.param([], profile_doc(version="trust-cli", canary=_COMMAND), "canary", id="profile"),
    pytest.param(["--snapshot", "--name", "trust-cli", "--version", "1"], _resident_with(_COMMAND),
                 "residents[0].profile.canary", id="snapshot"),
])
def test_profiles_put_holds_the_same_rule(tmp_path: Any, args: list[str], document: dict[str, Any],
                                          field: str) -> None:
    """``canary profiles put`` refuses what ``POST /v1/profiles`` refuses, naming the file and field:
    exit 2, no traceback, nothing stored."""
    from tests.support.stores import migrated_sqlite

    url = migrated_sqlite(tmp_path / "store.sqlite3")
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    put = subprocess.run([*canary_cmd(), "--db", url, "profiles", "put", str(path), *args], capture_output=True,
                         text=True, timeout=120)
    assert put.returncode == 2, put.stderr
    assert f"{path}: field '{field}'" in put.stderr and "Traceback" not in put.stderr, put.stderr
    listed = subprocess.run([*canary_cmd(), "--db", url, "profiles", "list", *(["--snapshots"] if args else [])],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "trust-cli" not in listed.stdout, listed.stdout
