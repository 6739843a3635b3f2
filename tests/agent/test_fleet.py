"""Three node agents (real processes) + one service + a real store, simulated devices.

Every assertion reads what the store recorded: which process (owner) ran which probe on which device,
the states probes went through, the evidence and drift rows written."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from evidence_store.fleet_models import DriftEvent, PublishedSnapshot
from evidence_store.models import Evidence
from evidence_store.service.models import ServeProbe
from tests.agent.conftest import WAIT_S, rows, wait_for, write_device
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import make_token, profile_doc

pytestmark = pytest.mark.slow

FAST = ("--heartbeat-s", "0.5", "--lease-s", "2")
# Routing tests must not see a lease expire because a busy machine starved an agent for two seconds.
STEADY = ("--lease-s", "20")


def _fleet(store_url: str, tmp_path: Path, agent_factory: Any, *extra: str, devices_per_node: int = 2,
           nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> tuple[dict[str, Any], dict[str, str]]:
    """Start one agent per node; returns the agents and device ref → owning node."""
    run = uuid.uuid4().hex[:6]
    agents: dict[str, Any] = {}
    owner_node: dict[str, str] = {}
    for node in nodes:
        devices = {f"gpu{d}": write_device(tmp_path / f"{node}-gpu{d}.yaml", uuid=f"GPU-{run}-{node}-{d}")
                   for d in range(devices_per_node)}
        agents[node] = agent_factory(store_url, node, devices, *FAST, *extra)
        for d in range(devices_per_node):
            owner_node[f"agent:{node}/gpu{d}"] = node
    return agents, owner_node


def _device_ids(store_url: str) -> dict[str, str]:
    """device_id → node, as the agents published them."""
    return {r.device_id: r.node for r in rows(store_url, PublishedSnapshot)}


def _admit(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/admissions", json=body)
    if r.status_code == 200:
        return {"probe": None, "certificate": r.json()}
    assert r.status_code == 202, r.text
    for _ in range(20):
        status = client.get(r.headers["location"], params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            return {"probe": status["id"], "state": status["state"], "certificate": status.get("certificate"),
                    "error": status.get("error")}
    raise AssertionError(f"probe {r.json()['id']} never finished")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_admissions_probed_once_each_on_the_owning_agent(store_url: str, tmp_path: Path, agent_factory: Any,
                                                         server_factory: Any) -> None:
    """100 admissions over 25 unseen pairs, spread over 6 devices of 3 agents: each pair is probed once, by
    the agent of the node whose device the pair was asked for; every admission gets its pair's answer."""
    _, owner_node = _fleet(store_url, tmp_path, agent_factory, *STEADY)
    server = server_factory(store_url, "--sim-time-scale", "0")
    token = make_token(store_url, "admit")
    refs = sorted(owner_node)
    run = uuid.uuid4().hex[:6]
    pairs = [(profile_doc(version=f"fleet-{run}-{i}"), refs[i % len(refs)]) for i in range(25)]
    bodies = [{"device": ref, "candidate": cand, "reserve": False} for cand, ref in pairs for _ in range(4)]
    with server.client(token) as client, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda b: _admit(client, b), bodies))

    rows_ = rows(store_url, ServeProbe)
    by_id = _device_ids(store_url)
    for p in rows_:
        assert p.state == "done", (p.state, p.error)
        node = by_id[p.device_id]
        assert p.owner is not None and p.owner.startswith(f"agent/{node}@"), (p.owner, node)
    # A request that looked for evidence just before the pair's probe recorded it, and queued after the
    # probe had ended, gets a second queue row; its agent answers it from the evidence — no second
    # exposure. What must hold: one row per pair decided by a probe, one evidence record per pair.
    probes = [p for p in rows_ if p.certificate_json["decided_by"] == "canary"]
    assert {p.certificate_json["decided_by"] for p in rows_} <= {"canary", "cache"}
    assert len(probes) == 25, Counter(p.certificate_json["decided_by"] for p in rows_)
    assert len({p.pair_digest for p in probes}) == 25
    # each pair's probe ran on the device that pair was asked for
    asked = {cand["version"]: ref for cand, ref in pairs}
    for p in probes:
        assert p.request_json["device"]["ref"] == asked[p.request_json["candidate"]["version"]]
    assert Counter(by_id[p.device_id] for p in probes) == Counter(owner_node[ref] for _, ref in pairs)
    assert len(rows(store_url, Evidence)) == 25
    for body, answer in zip(bodies, answers, strict=True):
        assert answer["certificate"] is not None, answer
        assert answer["certificate"]["workload_version"] == body["candidate"]["version"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_killed_agent_probe_is_aborted_by_lease_expiry_and_never_moves(
        store_url: str, tmp_path: Path, agent_factory: Any, server_factory: Any) -> None:
    # n1's simulated probes hold their device for real time, so the probe is still running when n1 dies
    agents, _ = _fleet(store_url, tmp_path, agent_factory, devices_per_node=1, nodes=("n2", "n3"))
    slow = write_device(tmp_path / "n1-gpu0.yaml", uuid=f"GPU-{uuid.uuid4().hex[:6]}-slow")
    agents["n1"] = agent_factory(store_url, "n1", {"gpu0": slow}, *FAST, "--claim-s", "3", "--sim-time-scale", "1")
    server = server_factory(store_url, "--sim-time-scale", "0")
    token = make_token(store_url, "admit")
    body = {"device": "agent:n1/gpu0", "candidate": profile_doc(version=f"kill-{uuid.uuid4().hex[:6]}"),
            "reserve": False}
    with server.client(token) as client:
        r = client.post("/v1/admissions", json=body)
        assert r.status_code == 202, r.text
        probe_id = r.json()["id"]
        running = wait_for("the probe to run on n1", lambda: [p for p in rows(store_url, ServeProbe, ServeProbe.id ==
                                                                               probe_id) if p.state == "running"])
        owner = running[0].owner
        assert owner.startswith("agent/n1@")
        agents["n1"].kill()
        final = wait_for("the probe to be aborted", lambda: [p for p in rows(store_url, ServeProbe, ServeProbe.id ==
                                                                             probe_id) if p.state != "running"])[0]
        status = client.get(f"/v1/probes/{probe_id}").json()
    assert final.state == "aborted" and status["state"] == "aborted"
    assert "lease expired" in (final.error or ""), final.error
    assert final.owner == owner  # nobody else ever took it over
    # it was not run elsewhere: no other probe row for the pair, no evidence for it
    assert [p.id for p in rows(store_url, ServeProbe, ServeProbe.pair_digest == final.pair_digest)] == [probe_id]
    assert not [e for e in rows(store_url, Evidence) if e.candidate_version == body["candidate"]["version"]]
    assert _device_ids(store_url)[final.device_id] == "n1"
    assert agents["n2"].alive() and agents["n3"].alive()

    # n1's agent comes back (once the dead one's claim lapsed): the admission asked again runs there
    def n1_row() -> PublishedSnapshot:
        return next(r for r in rows(store_url, PublishedSnapshot) if r.node == "n1")

    dead_agent = n1_row().agent
    wait_for("the killed agent's claim to lapse", lambda: n1_row().claim_expires_at < dt.datetime.now(dt.UTC))
    agent_factory(store_url, "n1", {"gpu0": slow}, *FAST, "--claim-s", "3")
    back = wait_for("n1's new agent to publish", lambda: n1_row().agent != dead_agent and n1_row().agent)
    with server.client(token) as client:
        again = _admit(client, body)
    assert again["state"] == "done" and again["certificate"]["decided_by"] == "canary", again
    [rerun] = rows(store_url, ServeProbe, ServeProbe.id == again["probe"])
    assert rerun.owner == back and rerun.device_id == final.device_id
    assert {p.id for p in rows(store_url, ServeProbe, ServeProbe.pair_digest == final.pair_digest)} == {
        probe_id, rerun.id}  # the aborted run on the dead agent, the new run on its successor: nothing elsewhere


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_driver_change_marks_stale_revalidates_hot_pairs_within_budget(
        store_url: str, tmp_path: Path, agent_factory: Any, server_factory: Any) -> None:
    policy = tmp_path / "reval2.yaml"
    default = (Path(__file__).resolve().parents[2] / "policies" / "default.yaml").read_text()
    policy.write_text(default.replace("name: default", "name: reval2", 1) + "\nrevalidation_budget_pairs: 2\n")
    device_uuid = f"GPU-{uuid.uuid4().hex[:6]}-drv"
    device = write_device(tmp_path / "n1-gpu0.yaml", uuid=device_uuid, driver="580.95.05")
    agent_factory(store_url, "n1", {"gpu0": device}, *FAST, "--policy", str(policy))
    server = server_factory(store_url, "--sim-time-scale", "0")
    token = make_token(store_url, "admit")
    run = uuid.uuid4().hex[:6]
    asks = {"hot": 3, "warm": 2, "cold": 1}  # requests per pair: the budget of 2 takes hot and warm
    with server.client(token) as client:
        for name, n in asks.items():
            for _ in range(n):
                answer = _admit(client, {"device": "agent:n1/gpu0", "reserve": False,
                                         "candidate": profile_doc(version=f"{name}-{run}")})
                assert answer["certificate"] is not None, answer
    before = [e for e in rows(store_url, Evidence) if e.status == "current" and e.device_type == "h100-sxm"]
    assert {e.driver_version for e in before} == {"580.95.05"} and len(before) == 3

    write_device(device, uuid=device_uuid, driver="590.10.01")  # the node's driver is upgraded
    event = wait_for("a drift event", lambda: rows(store_url, DriftEvent))[0]
    assert (event.old_driver, event.new_driver) == ("580.95.05", "590.10.01")
    assert event.stale_marked == 3 and event.budget == 2
    assert sorted(p["label"].split("@")[1].split(" ")[0] for p in event.probes_json) == [f"hot-{run}", f"warm-{run}"]
    stale = [e for e in rows(store_url, Evidence) if e.id in {b.id for b in before}]
    assert {e.status for e in stale} == {"stale"}
    ids = [p["probe_id"] for p in event.probes_json]
    wait_for("the revalidation probes", lambda: all(
        p.state == "done" for p in rows(store_url, ServeProbe, ServeProbe.id.in_(ids))))
    for p in rows(store_url, ServeProbe, ServeProbe.id.in_(ids)):
        assert p.owner.startswith("agent/n1@") and p.request_json["device"]["snapshot"]["driver_version"] == "590.10.01"

    out = subprocess.run([*canary_cmd(), "--db", store_url, "drift", event.id, "--json"], capture_output=True,
                         text=True, timeout=WAIT_S, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert len(report["pairs"]) == 2
    for pair in report["pairs"]:
        assert pair["probe_state"] == "done"
        assert pair["old_outcome"] is not None and pair["old_status"] == "stale"
        assert pair["new_outcome"] is not None
        assert pair["change_pct"] == pytest.approx(pair["new_slowdown_pct"] - pair["old_slowdown_pct"])
    with server.client(make_token(store_url, "read")) as client:
        api = client.get(f"/v1/drift/{event.id}").json()
        assert api["pairs"] == report["pairs"]
        assert [e["id"] for e in client.get("/v1/drift").json()] == [event.id]
        assert client.get("/v1/drift/nope").status_code == 404
