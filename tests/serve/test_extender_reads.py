"""The extender decides each device from one read of the store: the bookings and the evidence in one
statement, stage 1 once — the certificate ``canary fit`` gives and, when it is unknown, the pair keys
to probe, from the same read (not ``fit`` and then ``pairs_to_probe``, which read and ran stage 1 twice).
In process, on the service's own objects over a real SQLite store."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from canary.admission import EvidenceAccess
from canary.admission.request import QueuedRequest
from canary.serve.config import ServeConfig
from canary.serve.extender import Pod, decide_node
from canary.serve.service import Service
from evidence_store.database import make_engine, session_scope
from evidence_store.service import probe_queue, registry
from tests.serve.conftest import EX, profile_doc
from tests.support.stores import migrated_sqlite


@pytest.mark.parametrize(("node", "verdict", "probe"), [
    pytest.param("gpu-node-a", "unknown (limiting resource: interference)", True, id="unknown-queues-a-probe"),
    pytest.param("gpu-node-idle", "admit", False, id="an-idle-device-admits"),
])
def test_each_device_is_decided_from_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str,
                                              verdict: str, probe: bool) -> None:
    engine = make_engine(migrated_sqlite(tmp_path / "store.sqlite3"))
    doc = profile_doc(version=f"1.8.0-{uuid.uuid4().hex[:6]}")
    now = dt.datetime.now(dt.UTC)
    with session_scope(engine) as s:
        registry.put(s, kind="profile", name=doc["name"], version=doc["version"], document=doc, now=now)
    reads: list[str] = []
    real = EvidenceAccess.decision_inputs

    def counted(self: EvidenceAccess, req: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(req.device_id)
        return real(self, req, *args, **kwargs)

    monkeypatch.setattr(EvidenceAccess, "decision_inputs", counted)
    config = ServeConfig(auth="none", nodes={"gpu-node-a": (str(EX / "snapshots" / "g-nccl-mps-room.yaml"),),
                                             "gpu-node-idle": ("h100-sxm",)})
    pod = Pod.model_validate({"metadata": {"name": "p", "annotations": {
        "canary.dev/profile": f"{doc['name']}@{doc['version']}"}}})

    async def main() -> tuple[Any, Service]:
        svc = Service(config, engine)
        return await anyio.to_thread.run_sync(lambda: decide_node(svc, pod, node, now)), svc

    try:
        outcome, svc = anyio.run(main)
        assert len(reads) == 1, reads
        assert svc.stage1.hits + svc.stage1.misses == 1
        assert (verdict in outcome.reason) if not outcome.passes else outcome.reason == verdict
        with session_scope(engine, read_only=True) as s:
            queued = [t for t in (probe_queue.get(s, i) for i in _probe_ids(outcome.reason)) if t is not None]
        assert bool(queued) is probe
        for ticket in queued:  # the question as the probe runner will read it
            asked = QueuedRequest.read(ticket.request_json)
            assert (asked.reserve, asked.seed, asked.candidate.version) == (False, 0, doc["version"])
            assert ticket.device_id == reads[0] == asked.request().device_id
    finally:
        engine.dispose()


def _probe_ids(reason: str) -> list[str]:
    return [part.split(" ")[0] for part in reason.split("; probe ")[1:]]
