"""``canary fit --server URL agent:NODE/NAME``: a device a node agent publishes is named, not read, by the
CLI (only the server's store holds it), so the CLI passes the name through and the server decides on the
published snapshot, as it does for the same name sent over HTTP."""

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
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import EX, make_token, snapshot_doc

pytestmark = pytest.mark.slow  # a server process


def _publish(url: str, node: str, doc: dict[str, Any]) -> None:
    now = dt.datetime.now(dt.UTC)
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            published.publish(session, node=node, name="gpu0", agent=f"agent/{node}@test", snapshot_json=doc,
                          device_type=doc["device_type"], driver_version=doc.get("driver_version"),
                          device_uuid=doc.get("uuid"), taken_at=now, now=now, claim_s=30)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_fit_server_passes_agent_devices_through(store_url: str, server_factory: Any, tmp_path: Path) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    # An idle H100 (snapshot g with nothing running): a lone embedding service fits (exit 0).
    _publish(store_url, node, snapshot_doc(uuid=f"GPU-{node}", residents=[], memory_used_bytes=0,
                                           mps={"running": False}))
    server = server_factory(store_url, "--sim-time-scale", "0")
    env = cli_env(tmp_path) | {"CANARY_TOKEN": make_token(store_url, "fit")}
    profile = str(EX / "profiles" / "embedding-service.yaml")

    def fit(device: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*canary_cmd(), "fit", device, profile, "--json", "--server", server.base],
                              capture_output=True, text=True, env=env, timeout=120)

    done = fit(f"agent:{node}/gpu0")
    assert done.returncode == 0, done.stderr
    cert = json.loads(done.stdout)
    assert cert["verdict"] == "admit" and cert["hard_fit"] == "yes"
    assert cert["device"]["uuid"] == f"GPU-{node}"  # decided on the published snapshot
    # A name no agent publishes: the server's answer (422 → exit 2), not the CLI's "unknown device".
    missing = fit("agent:nobody/gpu0")
    assert missing.returncode == 2
    assert "no node agent publishes" in missing.stderr and "use a catalog name" not in missing.stderr
    assert "Traceback" not in missing.stderr
