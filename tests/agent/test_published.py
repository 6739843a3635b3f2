"""The service reads devices from the snapshots node agents publish: a stale snapshot answers unknown
("snapshot is N s old"), never a stale yes; a draining node takes nothing new; the extender finds a
node's devices there; a probe for an agent's device waits for that agent (the server never runs it)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from evidence_store import published
from evidence_store.database import make_engine, session_scope
from evidence_store.service.models import ServeProbe
from tests.agent.conftest import WAIT_S, rows
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parents[1] / "serve" / "fixtures"


def _publish(url: str, node: str, doc: dict[str, Any], *, age_s: float = 0.0) -> str:
    now = dt.datetime.now(dt.UTC)
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            pub = published.publish(session, node=node, name="gpu0", agent=f"agent/{node}@test", snapshot_json=doc,
                                device_type=doc["device_type"], driver_version=doc.get("driver_version"),
                                device_uuid=doc.get("uuid"), taken_at=now - dt.timedelta(seconds=age_s), now=now,
                                claim_s=30)
            return pub.published.device_id
    finally:
        engine.dispose()


def _idle(uid: str) -> dict[str, Any]:
    return snapshot_doc(uuid=uid, residents=[], memory_used_bytes=0, mps={"running": False})  # nothing runs


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_published_snapshots_freshness_drain_extender_and_routing(store_url: str, server_factory: Any,
                                                                  tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:6]
    _publish(store_url, "fresh", _idle(f"GPU-{run}-f"))
    _publish(store_url, "stale", _idle(f"GPU-{run}-s"), age_s=600)  # default policy: 60 s
    _publish(store_url, "drained", _idle(f"GPU-{run}-d"))
    busy_id = _publish(store_url, "busy", snapshot_doc(uuid=f"GPU-{run}-b"))
    out = subprocess.run([*canary_cmd(), "--db", store_url, "agent", "drain", "drained"], capture_output=True,
                         text=True, timeout=WAIT_S, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr

    server = server_factory(store_url, "--sim-time-scale", "0")
    tokens = {s: make_token(store_url, s) for s in ("admin", "admit")}
    decode = profile_doc("llm-decode.yaml", version=f"2.0-{run}")
    with server.client(tokens["admin"]) as admin:
        assert admin.post("/v1/profiles", json={"document": decode}).status_code == 200
        listed = {a["node"]: a for a in admin.get("/v1/agents").json()}
        assert listed["stale"]["age_s"] >= 600 and listed["fresh"]["age_s"] < 600 and listed["drained"]["draining"]

        def fit(node: str) -> dict[str, Any]:
            r = admin.post("/v1/fit", json={"device": f"agent:{node}/gpu0", "candidate": decode})
            assert r.status_code == 200, r.text
            result: dict[str, Any] = r.json()
            return result

        fresh, stale, drained = fit("fresh"), fit("stale"), fit("drained")
        assert fresh["verdict"] == "admit" and fresh["hard_fit"] == "yes"
        assert stale["verdict"] == "unknown" and stale["hard_fit"] == "unknown"
        assert "snapshot is" in json.dumps(stale) and "s old" in json.dumps(stale)
        assert drained["verdict"] == "unknown" and "draining" in json.dumps(drained)
        missing = admin.post("/v1/fit", json={"device": "agent:nobody/gpu0", "candidate": decode})
        assert missing.status_code == 422 and "no node agent publishes" in missing.text

        args = json.loads((FIXTURES / "extender-args-nodenames.json").read_text()
                          .replace("PROFILE_REF", f"{decode['name']}@{decode['version']}"))
        args["nodenames"] = ["fresh", "stale", "drained", "ghost"]
        result = admin.post("/v1/extender/filter", json=args).json()
        assert result["nodenames"] == ["fresh"]
        assert "snapshot is" in result["failedNodes"]["stale"]
        assert result["failedNodes"]["ghost"].startswith("unknown")
        assert "drained" in result["failedNodes"]

        # a pair that needs a probe on an agent's device is queued for that agent; the server leaves it
        body = {"device": "agent:busy/gpu0", "candidate": profile_doc(version=f"route-{run}"), "reserve": False}
        r = admin.post("/v1/admissions", json=body)
        assert r.status_code == 202, r.text
        assert r.json()["device_id"] == busy_id
        status = admin.get(r.headers["location"], params={"wait": "3s"}).json()
        assert status["state"] == "queued"
    (row,) = rows(store_url, ServeProbe, ServeProbe.id == status["id"])
    assert row.owner is None and row.started_at is None
