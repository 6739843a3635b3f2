"""The Kubernetes scheduler extender verbs over real HTTP, fed kube-scheduler's extender v1 JSON
(``ExtenderArgs`` with a real ``Pod`` and ``NodeList``). Nodes come from the server's ``--node`` config:
gpu-node-a = snapshot g (NCCL resident under MPS), gpu-node-b = snapshot a (the persistent megakernel that
leaves no registers), gpu-node-idle = an idle H100, gpu-node-unknown = not configured."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import Api, profile_doc

FIXTURES = Path(__file__).parent / "fixtures"


def _args(kind: str, profile_ref: str) -> dict[str, Any]:
    text = (FIXTURES / f"extender-args-{kind}.json").read_text().replace("PROFILE_REF", profile_ref)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _put(api: Api, doc: dict[str, Any]) -> str:
    with api.client("admin") as c:
        assert c.post("/v1/profiles", json={"document": doc}).status_code == 200
    return f"{doc['name']}@{doc['version']}"


@pytest.mark.parametrize("kind", ["nodes", "nodenames"])
def test_filter_keeps_what_fits_and_says_why_not(api: Api, kind: str) -> None:
    ref = _put(api, profile_doc("llm-decode.yaml", version=f"2.0-{uuid.uuid4().hex[:6]}"))
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json=_args(kind, ref))
    assert r.status_code == 200, r.text
    result = r.json()
    assert set(result) <= {"nodes", "nodenames", "failedNodes", "failedAndUnresolvableNodes", "error"}
    kept = result["nodenames"] if kind == "nodenames" else [n["metadata"]["name"] for n in result["nodes"]["items"]]
    failed = result["failedNodes"]
    assert "gpu-node-idle" in kept
    assert "limiting resource: registers" in failed["gpu-node-b"]
    assert failed["gpu-node-unknown"].startswith("unknown")
    assert set(kept) | set(failed) == {"gpu-node-a", "gpu-node-b", "gpu-node-idle", "gpu-node-unknown"}
    assert not set(kept) & set(failed)
    if kind == "nodes":  # the Node objects come back as they were sent
        sent = {n["metadata"]["name"]: n for n in _args(kind, ref)["nodes"]["items"]}
        assert all(n == sent[n["metadata"]["name"]] for n in result["nodes"]["items"])


def test_unknown_interference_filters_then_probe_lets_it_pass(api: Api) -> None:
    """The embedding service beside the NCCL resident fits (stage 1) but has no evidence: filtered as
    unknown with a probe queued; once the probe is done, the node passes and is scored."""
    ref = _put(api, profile_doc(version=f"1.8.0-{uuid.uuid4().hex[:6]}"))
    with api.client("fit") as c:
        first = c.post("/v1/extender/filter", json=_args("nodenames", ref)).json()
        reason = first["failedNodes"]["gpu-node-a"]
        assert "unknown (limiting resource: interference)" in reason and "probe " in reason
        probe_id = reason.split("probe ")[1].split(" ")[0]
    with api.client("read") as c:
        for _ in range(20):
            status = c.get(f"/v1/probes/{probe_id}", params={"wait": "30s"}).json()
            if status["state"] not in ("queued", "running"):
                break
        assert status["state"] == "done" and status["certificate"]["verdict"] == "admit", status
    with api.client("fit") as c:
        second = c.post("/v1/extender/filter", json=_args("nodenames", ref)).json()
        assert "gpu-node-a" in second["nodenames"]
        scores = {h["host"]: h["score"] for h in c.post("/v1/extender/prioritize", json=_args("nodenames", ref)).json()}
    assert set(scores) == {"gpu-node-a", "gpu-node-b", "gpu-node-idle", "gpu-node-unknown"}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["gpu-node-unknown"] == 0
    # An idle H100 has more memory headroom and no resident to slow down than one holding a resident.
    assert scores["gpu-node-idle"] > scores["gpu-node-a"] > 0


def test_pod_without_annotation_is_not_ours(api: Api) -> None:
    args = _args("nodenames", "x@1")
    del args["pod"]["metadata"]["annotations"]
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json=args).json()
    assert r["nodenames"] == args["nodenames"] and not r.get("failedNodes")


def test_unregistered_profile_is_unknown_everywhere(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json=_args("nodenames", "never-registered@0")).json()
    assert r["nodenames"] == []
    assert all(reason.startswith("unknown") and "never-registered@0" in reason for reason in r["failedNodes"].values())


@pytest.mark.parametrize(("annotations", "want"), [
    pytest.param({"canary.dev/regime": "mps:300"}, "field 'annotation canary.dev/regime': ", id="regime-out-of-range"),
    pytest.param({"canary.dev/regime": "bogus"}, "field 'annotation canary.dev/regime': unknown regime 'bogus'",
                 id="regime-unknown"),
    pytest.param({"canary.dev/policy": "nope"}, "field 'annotation canary.dev/policy': no policy named 'nope'",
                 id="policy"),
])
def test_filter_names_a_bad_annotation_not_a_cli_option(api: Api, annotations: dict[str, str], want: str) -> None:
    """These reasons reach ``kubectl describe pod``: they name the pod's annotation, never ``--regime``."""
    ref = _put(api, profile_doc(version=f"1.8.0-{uuid.uuid4().hex[:6]}"))
    args = _args("nodenames", ref)
    args["pod"]["metadata"]["annotations"] |= annotations
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json=args)
    assert r.status_code == 200, r.text
    failed = r.json()["failedNodes"]
    configured = {"gpu-node-a", "gpu-node-b", "gpu-node-idle"}
    assert configured <= set(failed), failed
    for node in configured:
        assert want in failed[node] and "--" not in failed[node], failed[node]
