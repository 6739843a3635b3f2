"""What a newcomer types is understood as the docs say: ``?pair=`` sides by profile registry name too,
``?device_type=`` an alias or a 422 naming it, a booking by the 8-character id the tables print, a second
release or revocation that says it changed nothing, and a local ``canary fit`` that says a registry
reference or an ``agent:`` device needs ``--server``."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import Api, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def _probe_to_end(c: httpx.Client, r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 202, r.text
    for _ in range(20):
        status: dict[str, Any] = c.get(r.headers["location"], params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            assert status["state"] == "done", status
            return dict(status["certificate"])
    raise AssertionError("the probe never finished")


def test_pair_sides_by_profile_registry_name(api: Api, tmp_path: Path) -> None:
    # g-nccl-mps-room's resident is the process 'comms', running the registry's profile nccl-comms
    candidate = profile_doc(version=f"1.8.0-names-{uuid.uuid4().hex[:8]}")
    with api.client("admin") as c:
        put = c.post("/v1/profiles", json={"document": profile_doc("nccl-comms.yaml")})
        assert put.status_code in (200, 201, 409), put.text
        cert = _probe_to_end(c, c.post("/v1/admissions", json={"device": snapshot_doc(), "candidate": candidate,
                                                                 "reserve": False}))
        evidence_id = cert["evidence"]["ids"][0]
        for pair in ("nccl-comms:embedding-service", f"nccl-comms@2.21.5:embedding-service@{candidate['version']}",
                     "comms:embedding-service"):
            listed = c.get("/v1/evidence", params={"pair": pair})
            assert listed.status_code == 200, listed.text
            assert evidence_id in [e["id"] for e in listed.json()], pair
    # The CLI reads --pair as the service reads ?pair=: by registry name too, on the same store.
    for pair in ("nccl-comms:embedding-service", "comms:embedding-service"):
        done = subprocess.run([*canary_cmd(), "--db", api.db_url, "evidence", "list", "--pair", pair, "--json"],
                              capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
        assert done.returncode == 0, done.stderr
        assert evidence_id[:8] in done.stdout, (pair, done.stdout[-500:])


def test_device_type_is_an_alias_or_a_422(api: Api) -> None:
    with api.client("read") as c:
        unknown = c.get("/v1/evidence", params={"device_type": "h100x"})
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["detail"].startswith("field 'query.device_type': ")
        by_alias = c.get("/v1/evidence", params={"device_type": "h100"})
        assert by_alias.status_code == 200
        assert all(e["key"]["device_type"] == "h100-sxm" for e in by_alias.json())


def test_release_by_prefix_and_twice(api: Api) -> None:
    from canary.backends import idle_snapshot
    from canary.catalog import lookup

    device = idle_snapshot(lookup("h100-sxm")).model_dump(mode="json") | {"uuid": f"GPU-{uuid.uuid4()}"}
    with api.client("admit") as c:
        cert = c.post("/v1/admissions", json={"device": device, "candidate": profile_doc()}).json()
        booking = cert["resource_reservations"][0]["id"]
        first = c.delete(f"/v1/reservations/{booking[:8]}")
        assert first.status_code == 200, first.text
        assert first.json()["released"] == booking and first.json()["already_released"] is False
        again = c.delete(f"/v1/reservations/{booking[:8]}")
        assert again.status_code == 200 and again.json()["already_released"] is True
        assert again.json()["released_at"] == first.json()["released_at"]
        assert c.delete("/v1/reservations/zzzzzzzz").status_code == 404


def test_revoke_twice_says_so(api: Api) -> None:
    with api.client("admin") as c:
        cert = _probe_to_end(c, c.post("/v1/admissions", json={
            "device": snapshot_doc(), "candidate": profile_doc(version=f"1.8.0-rv-{uuid.uuid4().hex[:8]}"),
            "reserve": False}))
        evidence_id = cert["evidence"]["ids"][0]
        first = c.post(f"/v1/evidence/{evidence_id[:8]}/revoke", json={"reason": "bad sensor"}).json()
        again = c.post(f"/v1/evidence/{evidence_id[:8]}/revoke", json={"reason": "another reason"}).json()
    assert first["already_revoked"] is False and again["already_revoked"] is True
    assert again["revoked_reason"] == "bad sensor"


@pytest.mark.parametrize(("device", "profile", "names"), [
    pytest.param("h100-sxm", "embedding-service@1.8.0", ("PROFILE", "--server", "embedding-service@1.8.0"),
                 id="registry-reference"),
    pytest.param("agent:gpu-node-a/gpu0", "embedding-service@1.8.0", ("DEVICE", "agent:", "--server"),
                 id="agent-device-first"),
])
def test_local_fit_says_what_needs_the_server(tmp_path: Path, device: str, profile: str, names: tuple[str, ...]) -> None:
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "CANARY_SERVER"}
    for command in ("fit", "admit"):
        done = subprocess.run([*canary_cmd(), "--db", f"sqlite:///{tmp_path / 's.sqlite3'}", command, device, profile],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "file not found" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        for name in names:
            assert name in done.stderr, (name, done.stderr)
