"""The extender verbs on kube-scheduler's own wire format, and what their reasons may say.

``k8s.io/kube-scheduler/extender/v1`` declares ``ExtenderArgs{Pod *v1.Pod; Nodes *v1.NodeList;
NodeNames *[]string}`` without JSON tags, so kube-scheduler (``encoding/json``) sends the Go field names —
``Pod``, ``Nodes``, ``NodeNames`` — and ``null`` for the one it does not fill (``NodeNames`` when the
extender is not ``nodeCacheCapable``, ``Nodes`` when it is). It reads the answer with the same decoder,
which matches keys without regard to case.

A filtered node's reason becomes a scheduler event on the pod (``kubectl describe pod``): it names the
node's device (``NODE/gpuN``), never the server's files.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import EX, Api, make_token, profile_doc

FIXTURES = Path(__file__).parent / "fixtures"
NODES = ["gpu-node-a", "gpu-node-b", "gpu-node-idle", "gpu-node-unknown"]


def _wire(kind: str, profile_ref: str) -> dict[str, Any]:
    """The fixture as Go's encoding/json writes an ExtenderArgs: exported field names, nil pointers as null."""
    sent = json.loads((FIXTURES / f"extender-args-{kind}.json").read_text().replace("PROFILE_REF", profile_ref))
    return {"Pod": sent["pod"], "Nodes": sent.get("nodes"), "NodeNames": sent.get("nodenames")}


def _put(api: Api) -> str:
    doc = profile_doc("llm-decode.yaml", version=f"2.0-{uuid.uuid4().hex[:6]}")
    with api.client("admin") as c:
        assert c.post("/v1/profiles", json={"document": doc}).status_code == 200
    return f"{doc['name']}@{doc['version']}"


def _keys(result: dict[str, Any]) -> dict[str, Any]:
    """The answer as kube-scheduler's decoder reads it: keys matched to the Go field names without case."""
    go = {"nodes": "Nodes", "nodenames": "NodeNames", "failednodes": "FailedNodes",
          "failedandunresolvablenodes": "FailedAndUnresolvableNodes", "error": "Error"}
    assert all(k.lower() in go for k in result), result
    return {go[k.lower()]: v for k, v in result.items()}


@pytest.mark.parametrize("kind", ["nodes", "nodenames"])
def test_filter_reads_kube_schedulers_wire_format(api: Api, kind: str) -> None:
    args = _wire(kind, _put(api))
    assert (args["Nodes"] is None) == (kind == "nodenames")  # the field it does not fill is null
    with api.client("fit") as c:
        r = c.post("/v1/extender/filter", json=args)
    assert r.status_code == 200, r.text
    result = _keys(r.json())
    kept = result["NodeNames"] if kind == "nodenames" else [n["metadata"]["name"] for n in result["Nodes"]["items"]]
    assert "gpu-node-idle" in kept
    assert set(kept) | set(result["FailedNodes"]) == set(NODES)
    assert result["FailedNodes"]["gpu-node-b"].startswith("gpu-node-b/gpu0: reject (limiting resource: registers)")
    assert not result.get("Error")


def test_prioritize_reads_kube_schedulers_wire_format(api: Api) -> None:
    with api.client("fit") as c:
        r = c.post("/v1/extender/prioritize", json=_wire("nodenames", _put(api)))
    assert r.status_code == 200, r.text
    hosts = {h["host"]: h["score"] for h in r.json()}
    assert set(hosts) == set(NODES) and all(0 <= s <= 10 for s in hosts.values())
    assert hosts["gpu-node-unknown"] == 0 and hosts["gpu-node-idle"] > 0


def test_reasons_name_the_device_not_the_servers_files(api: Api) -> None:
    with api.client("fit") as c:
        result = _keys(c.post("/v1/extender/filter", json=_wire("nodenames", _put(api))).json())
    reasons = result["FailedNodes"]
    assert reasons, result
    for node, reason in reasons.items():
        assert str(EX) not in reason and ".yaml" not in reason, reason
        if node != "gpu-node-unknown":  # a node without devices has none to name
            assert reason.startswith(f"{node}/gpu"), reason


@pytest.mark.slow  # two server processes
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_unreadable_configured_snapshot_is_named_by_its_device(store_url: str, server_factory: Any,
                                                                  tmp_path: Path) -> None:
    missing = tmp_path / "secret-dir" / "node-c-gpu1.yaml"
    server = server_factory(store_url, "--node", f"gpu-node-c=h100-sxm,{missing}")
    token = make_token(store_url, "fit")
    args = _wire("nodenames", "llm-decode@never") | {"NodeNames": ["gpu-node-c"]}
    doc = profile_doc("llm-decode.yaml", version="2.0-wire")
    with server.client(make_token(store_url, "admin")) as admin:
        assert admin.post("/v1/profiles", json={"document": doc}).status_code == 200
    args["Pod"]["metadata"]["annotations"]["canary.dev/profile"] = "llm-decode@2.0-wire"
    with server.client(token) as c:
        result = _keys(c.post("/v1/extender/filter", json=args).json())
    # The idle H100 admits, so the node passes: its broken second device does not decide.
    assert result["NodeNames"] == ["gpu-node-c"], result
    server_only = server_factory(store_url, "--node", f"gpu-node-d={missing}", name="only-missing")
    args["NodeNames"] = ["gpu-node-d"]
    with server_only.client(token) as c:
        result = _keys(c.post("/v1/extender/filter", json=args).json())
    reason = result["FailedNodes"]["gpu-node-d"]
    assert reason.startswith("gpu-node-d/gpu0: unknown: "), reason
    assert "secret-dir" not in reason and str(tmp_path) not in reason
    assert "missing or unreadable on the server" in reason
