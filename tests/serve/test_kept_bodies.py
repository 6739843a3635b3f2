"""Decision request bodies the service keeps (``canary.serve.decide``): a body seen before is decided
without being validated and resolved again — but only when its resolution cannot change, never before
its token is checked, and never instead of reading the store.

Over real HTTP against a real ``canary serve`` (SQLite and PostgreSQL); what the server did is read
from its own counters (``canary_request_bodies_total``) and from the store."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from canary.serve.bodies import Prepared, PreparedBodies, pinned
from tests.serve.conftest import Api, profile_doc, snapshot_doc

JSON = {"content-type": "application/json"}


def _bodies(c: httpx.Client) -> dict[tuple[str, str], float]:
    """``canary_request_bodies_total`` by (route, result), from the server's own scrape."""
    text = c.get("/metrics").text
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "canary_request_bodies":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[(sample.labels["route"], sample.labels["result"])] = sample.value
    return out


def _delta(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()
            if after.get(k, 0) != before.get(k, 0)}


def _raw(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def test_a_body_seen_before_is_decided_without_preparing_it_again(api: Api) -> None:
    raw = _raw({"device": snapshot_doc(), "candidate": profile_doc(version=f"kb-{uuid.uuid4().hex[:8]}"),
                "probe": False, "reserve": False})
    with api.client("admin") as c:
        before = _bodies(c)
        first = c.post("/v1/admissions", content=raw, headers=JSON)
        second = c.post("/v1/admissions", content=raw, headers=JSON)
        third = c.post("/v1/admissions", content=raw, headers=JSON)
        counted = _delta(before, _bodies(c))
    assert first.status_code == second.status_code == third.status_code == 200, first.text
    assert counted == {("admissions", "prepared"): 1, ("admissions", "kept"): 2}
    a, b = first.json(), second.json()
    assert b["issued_at"] >= a["issued_at"]  # decided again, at its own time
    for cert in (a, b):
        cert.pop("issued_at")
        cert["expiry_or_revalidation_trigger"].pop("expires_at")
    assert a == b  # the same documents, the same store: the same certificate


def test_a_bare_registry_name_is_resolved_anew_every_time(api: Api) -> None:
    """``name`` means its newest version: a body naming it is never kept, so a version put after the
    first request decides the next one."""
    name = f"kept-bare-{uuid.uuid4().hex[:8]}"
    raw = _raw({"device": "h100-sxm", "candidate": name, "probe": False, "reserve": False})
    with api.client("admin") as c:
        assert c.post("/v1/profiles", json={"document": {**profile_doc(), "name": name, "version": "1.0"}}).status_code == 200
        before = _bodies(c)
        first = c.post("/v1/admissions", content=raw, headers=JSON)
        assert c.post("/v1/profiles", json={"document": {**profile_doc(), "name": name, "version": "2.0"}}).status_code == 200
        second = c.post("/v1/admissions", content=raw, headers=JSON)
        counted = _delta(before, _bodies(c))
    assert first.json()["workload_version"] == "1.0", first.text
    assert second.json()["workload_version"] == "2.0", second.text
    assert counted == {("admissions", "not_kept"): 2}


def test_a_pinned_reference_is_kept(api: Api) -> None:
    name = f"kept-pinned-{uuid.uuid4().hex[:8]}"
    raw = _raw({"device": "h100-sxm", "candidate": f"{name}@1.0", "probe": False, "reserve": False})
    with api.client("admin") as c:
        assert c.post("/v1/profiles", json={"document": {**profile_doc(), "name": name, "version": "1.0"}}).status_code == 200
        before = _bodies(c)
        answers = [c.post("/v1/admissions", content=raw, headers=JSON) for _ in range(2)]
        counted = _delta(before, _bodies(c))
    assert [a.json()["workload_version"] for a in answers] == ["1.0", "1.0"]
    assert counted == {("admissions", "prepared"): 1, ("admissions", "kept"): 1}


@pytest.mark.parametrize(("scope", "want"), [(None, 401), ("read", 403), ("fit", 403), ("feedback", 403)])
def test_the_token_is_checked_before_a_kept_body(api: Api, scope: str | None, want: int) -> None:
    raw = _raw({"device": snapshot_doc(), "candidate": profile_doc(version=f"auth-{uuid.uuid4().hex[:8]}"),
                "probe": False, "reserve": False})
    with api.client("admin") as c:
        assert c.post("/v1/admissions", content=raw, headers=JSON).status_code == 200  # now kept
    with api.client(scope) as c:
        refused = c.post("/v1/admissions", content=raw, headers=JSON)
    assert refused.status_code == want, refused.text
    assert "token" in refused.json()["detail"]
    with httpx.Client(base_url=api.server.base, headers={"Authorization": "Bearer cnr_0000_not-a-token"}) as c:
        assert c.post("/v1/admissions", content=raw, headers=JSON).status_code == 401


def test_fit_and_admissions_keep_their_bodies_apart(api: Api) -> None:
    """Bytes an admission accepted are not a fit request: ``probe`` is not a field of ``/v1/fit``."""
    raw = _raw({"device": snapshot_doc(), "candidate": profile_doc(version=f"apart-{uuid.uuid4().hex[:8]}"),
                "probe": False})
    with api.client("admin") as c:
        assert c.post("/v1/admissions", content=raw, headers=JSON).status_code == 200
        refused = c.post("/v1/fit", content=raw, headers=JSON)
    assert refused.status_code == 422 and "probe" in refused.json()["detail"], refused.text


def test_a_kept_body_is_decided_against_the_bookings_made_since(api: Api) -> None:
    """``reserve`` (the default) books on an admit, and a kept body is decided anew against the store:
    the same body again sees the first admission's booking on the idle device — a workload about to run
    there, which nothing can be measured beside yet — and answers unknown, booking nothing more."""
    from canary.backends import idle_snapshot
    from canary.catalog import lookup

    # an idle device of its own (nothing else runs: stage 1 admits), so the bookings are this test's
    device = idle_snapshot(lookup("h100-sxm")).model_dump(mode="json") | {"uuid": f"GPU-kept-{uuid.uuid4()}"}
    raw = _raw({"device": device, "candidate": profile_doc(version=f"book-{uuid.uuid4().hex[:8]}")})
    with api.client("admin") as c:
        answers = [c.post("/v1/admissions", content=raw, headers=JSON) for _ in range(2)]
        held = c.get("/v1/reservations", params={"device": device["uuid"]}).json()
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert [a.json()["verdict"] for a in answers] == ["admit", "unknown"]
    booked = answers[0].json()["resource_reservations"][0]["id"]
    assert answers[1].json()["resource_reservations"] == []
    assert "other admissions booked" in answers[1].json()["reason"] and "not running yet" in answers[1].json()["reason"]
    assert [r["id"] for r in held if r["active"]] == [booked]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_kept_bytes_under_another_media_type_are_refused_as_before(api: Api, content_type: str | None) -> None:
    """The same bytes that are not declared JSON are refused, kept or not: 415 saying the body must be
    application/json when another type is declared, 422 when none is."""
    raw = _raw({"device": snapshot_doc(), "candidate": profile_doc(version=f"ct-{uuid.uuid4().hex[:8]}"),
                "probe": False, "reserve": False})
    with api.client("admin") as c:
        assert c.post("/v1/admissions", content=raw, headers=JSON).status_code == 200
        assert c.post("/v1/admissions", content=raw, headers={"content-type": "application/json; charset=utf-8"}
                      ).status_code == 200
        refused = c.post("/v1/admissions", content=raw, headers={} if content_type is None else
                         {"content-type": content_type})
    if content_type is None:
        assert refused.status_code == 422, refused.text
    else:
        assert refused.status_code == 415, refused.text
        assert "application/json" in refused.json()["detail"]


def test_a_changed_byte_is_a_new_body_validated_anew(api: Api) -> None:
    good = {"device": snapshot_doc(), "candidate": profile_doc(version=f"byte-{uuid.uuid4().hex[:8]}"),
            "probe": False, "reserve": False}
    with api.client("admin") as c:
        assert c.post("/v1/admissions", content=_raw(good), headers=JSON).status_code == 200
        bad = c.post("/v1/admissions", content=_raw(good | {"seed": -1}), headers=JSON)
    assert bad.status_code == 422 and "seed" in bad.json()["detail"], bad.text


# ------------------------------------------------------------------ what may be kept


@pytest.mark.parametrize(("value", "device", "kept"), [
    ({"device_type": "h100-sxm"}, True, True),  # a document by value
    ("h100-sxm", True, True),  # a catalog device
    ("node-a-gpu0@7", True, True),  # a snapshot registry reference
    ("agent:gpu-node-a/0", True, False),  # what a node agent publishes now
    ("embedding-service@1.8.0", False, True),
    ("embedding-service", False, False),  # the newest version
    ("embedding-service@", False, False),
    ("@1.0", False, False),
    ("h100-sxm", False, False),  # a profile is never a catalog name
])
def test_what_a_kept_body_may_name(value: Any, device: bool, kept: bool) -> None:
    assert pinned(value, device=device) is kept


def _prepared(kept: bool = True) -> Prepared:
    from canary.admission import build_request
    from canary.admission.request import QueuedRequest
    from canary.backends import ResolvedDevice, idle_snapshot
    from canary.catalog import lookup
    from canary.profile import WorkloadProfile
    from canary.serve.resolve import Resolved, cached_policy

    spec = lookup("h100-sxm")
    device = ResolvedDevice(snapshot=idle_snapshot(spec), spec=spec, ref="h100-sxm", kind="catalog")
    candidate = WorkloadProfile.model_validate_json(json.dumps(profile_doc()))
    req = build_request(device, candidate, cached_policy("default"))
    queued = QueuedRequest.of(device, candidate, req.policy)
    return Prepared(resolved=Resolved(req, queued, queued.stored()), keys=(), digests=(), probe=False, reserve=False, history=None,
                    kept=kept)


def test_a_policy_changed_on_disk_unkeeps_the_bodies_decided_under_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import canary.policy

    policies = tmp_path / "policies"
    shutil.copytree(canary.policy.POLICY_DIR, policies)
    monkeypatch.setattr(canary.policy, "POLICY_DIR", policies)
    kept = PreparedBodies()
    prepared = _prepared()
    assert kept.put(b"body", prepared) and kept.get(b"body") is prepared
    assert kept.get(b"body ") is None  # other bytes
    path = policies / "default.yaml"
    path.write_text(path.read_text() + "\n# edited\n")
    import os

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a new version of the file
    assert kept.get(b"body") is None


def test_kept_bodies_are_bounded_and_unkeepable_ones_never_kept() -> None:
    kept = PreparedBodies(size=3)
    assert not kept.put(b"x", _prepared(kept=False)) and len(kept) == 0
    prepared = _prepared()
    for i in range(7):
        assert kept.put(f"body {i}".encode(), prepared)
        assert len(kept) <= 3
    assert kept.get(b"body 6") is prepared
