"""The platform engineer's journey: ``make demo``'s flow, then their own workload profile through
``canary fit`` (a catalog device, a snapshot, a MIG device), ``canary admit`` until a MIG card is full,
and the service's scheduler-extender verbs as kube-scheduler calls them.

Expected answers come from the inputs, worked out by hand:

* ``ranker`` (the profile written below) needs peak 10 GiB; the default policy adds a 512 MiB context
  and keeps max(1 GiB, 5% of HBM) free.
* An idle H100 (80 GiB): 10.5 GiB needed against ~75 GiB free → admit, regime timeslice.
* ``b-idle-hbm-held.yaml`` (A100-80GB): 80 − 0.5 reserved − 76 held − 4 headroom = −0.5 GiB free →
  reject, limiting ``hbm``.
* ``c-mig-95pct.yaml`` (H200, MIG on): a 3g.71gb instance holds memory slices [0,4). ``ranker`` accepts
  only ``1g.18gb``, whose placements are starts 0‥6, size 1 (NVIDIA MIG User Guide, the H100/H200
  ``nvidia-smi mig -lgipp`` table; ``canary/catalog/devices.yaml``). Free: starts 4, 5 and 6 (slice 7
  takes no 1g instance) → exactly three admissions, each on its own placement, 10.5 GiB of the
  instance's 16 GiB; compute slices 3 + 3 ≤ 7. The fourth admission rejects, naming the held ones.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.journeys.conftest import EXAMPLES, ROOT, Canary, Steps, finding
from tests.serve.conftest import Server
from tests.support.paths import cli_env

pytestmark = pytest.mark.slow

SNAP = EXAMPLES / "snapshots"
PROFILE = """\
name: ranker
version: "3.2.0"
shape_family: "bs<=16"
workload_class: online-inference
latency_critical: true
memory: {reserved_bytes: 8Gi, peak_bytes: 10Gi}
kernels:
  - {name: rank_gemm, registers_per_thread: 64, threads_per_block: 256, static_shared_bytes: 16384,
     grid_blocks: 128, gpu_time_share: 0.8, dram_intensity: 0.4, source: declared}
duty_cycle: 0.3
dram_intensity: 0.4
sharing: {timeslice: true, streams: false, mig_profiles: [1g.18gb]}
slo: {latency_p99_ms: 30, max_slowdown_pct: 10}
canary: {executor: sim, monitor: sim}
provenance: {source: declared, coverage: 0.8}
"""
GIB = 1 << 30
FREE_1G_PLACEMENTS = {"1g.18gb@4", "1g.18gb@5", "1g.18gb@6"}


def _ci(obj: dict[str, Any], key: str) -> Any:
    """A field as Go's encoding/json (kube-scheduler) reads it: the key matched case-insensitively."""
    found = [v for k, v in obj.items() if k.lower() == key.lower()]
    assert len(found) == 1, f"{key!r} appears {len(found)} times in {obj}"
    return found[0]


def _stat(path: Path) -> tuple[int, int] | None:
    """The file's size and modification time, ``None`` when it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def test_platform_engineer(tmp_path: Path, steps: Steps) -> None:
    with steps.step("make demo: python -m canary.demo"):
        users_store = ROOT / ".canary-demo" / "evidence.sqlite3"  # a demo the user ran: left as it is
        before = _stat(users_store)
        env = cli_env(tmp_path) | {"CANARY_DEMO_DIR": str(tmp_path / "demo")}
        demo = subprocess.run([sys.executable, "-m", "canary.demo"], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=180)
        assert demo.returncode == 0, demo.stderr[-2000:]
        assert "Traceback" not in demo.stderr
        # The five steps and the exit code each must have: (a) the persistent kernel holds the registers:
        # reject; (c) a free MIG placement: admit; a probe, then the cache: admit twice; ResNet-50 beside
        # the service under time-slicing: reject.
        assert re.findall(r"^\(exit (\d+),", demo.stdout, flags=re.M) == ["1", "0", "0", "0", "1"], demo.stdout
        assert _stat(users_store) == before, "the demo wrote the repository's .canary-demo/, not $CANARY_DEMO_DIR"
        demo_store = Canary(f"sqlite:///{tmp_path / 'demo' / 'evidence.sqlite3'}", tmp_path)
        assert f"Evidence and certificates are in {tmp_path / 'demo' / 'evidence.sqlite3'}" in demo.stdout
        records = demo_store.evidence()
        # Two probes ran (the MPS pair, then the time-sliced pair); the repeated admission used the cache.
        assert len(records) == 2, records
        assert sorted(r["outcome"] for r in records) == ["safe", "unsafe"], records

    cli = Canary(f"sqlite:///{tmp_path / 'fleet.sqlite3'}", tmp_path)
    profile = tmp_path / "ranker.yaml"
    profile.write_text(PROFILE)

    with steps.step("canary fit h100 ranker.yaml (catalog device)"):
        _, cert = cli.json("fit", "h100", profile, want=0)
        assert cert["verdict"] == "admit" and cert["hard_fit"] == "yes", cert
        assert cert["regime"] == "timeslice"
        hbm = finding(cert, "hbm")
        assert hbm["verdict"] == "yes" and hbm["demand"] == 10 * GIB + 512 * (1 << 20), hbm

    with steps.step("canary fit b-idle-hbm-held.yaml ranker.yaml (snapshot)"):
        _, cert = cli.json("fit", SNAP / "b-idle-hbm-held.yaml", profile, want=1)
        assert cert["verdict"] == "reject" and cert["limiting_resource"] == "hbm", cert
        hbm = finding(cert, "hbm")
        assert hbm["available"] == -512 * (1 << 20), hbm  # 80 − 0.5 − 76 − 4 GiB

    with steps.step("canary fit c-mig-95pct.yaml ranker.yaml (MIG device)"):
        _, cert = cli.json("fit", SNAP / "c-mig-95pct.yaml", profile, want=0)
        assert cert["verdict"] == "admit" and cert["regime"] == "mig:1g.18gb", cert
        placement = finding(cert, "mig_placement")
        assert placement["verdict"] == "yes" and placement["available"] in {"start 4", "start 5", "start 6"}

    held: list[str] = []
    with steps.step("canary admit on the MIG snapshot until the card is full"):
        for attempt in range(1, 5):
            _, cert = cli.json("admit", SNAP / "c-mig-95pct.yaml", profile, "--quiet",
                                  want=0 if attempt <= 3 else 1)
            if attempt <= 3:
                booked = [r["mig_instance"] for r in cert["resource_reservations"]]
                assert len(booked) == 1 and booked[0] in FREE_1G_PLACEMENTS - set(held), (attempt, booked, held)
                held.append(booked[0])
            else:
                assert cert["verdict"] == "reject" and cert["limiting_resource"] == "mig_placement", cert
                assert cert["resource_reservations"] == []
                for instance in FREE_1G_PLACEMENTS:  # the reason names what holds the card
                    assert instance in cert["reason"], (instance, cert["reason"])
        assert set(held) == FREE_1G_PLACEMENTS

    with steps.step("the store holds one active booking per placement"):
        _, bookings = cli.json("reservations", "list", want=0)
        active = sorted(b["mig_instance"] for b in bookings if b["active"])
        assert active == sorted(FREE_1G_PLACEMENTS), bookings
        assert all(b["memory_bytes"] == 10 * GIB + 512 * (1 << 20) for b in bookings if b["active"])

    with steps.step("canary profiles put ranker.yaml"):
        cli.run("profiles", "put", profile, want=0)
    config = tmp_path / "serve.yaml"
    config.write_text("extender_auth: none\nnodes:\n"
                      f"  gpu-mig: ['{SNAP / 'c-mig-95pct.yaml'}']\n"
                      f"  gpu-hbm: ['{SNAP / 'b-idle-hbm-held.yaml'}']\n"
                      "  gpu-idle: [h100]\n")
    server = Server(cli.db_url, tmp_path, "--config", str(config), "--sim-time-scale", "0")
    with steps.step("canary serve starts"):
        server.start()
    try:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "ranker-7d9", "namespace": "search",
                            "annotations": {"canary.dev/profile": "ranker@3.2.0"}},
               "spec": {"containers": [{"name": "ranker", "image": "registry.local/ranker:3.2.0"}]}}
        names = ["gpu-mig", "gpu-hbm", "gpu-idle"]
        with steps.step("POST /v1/extender/filter with NodeNames"), httpx.Client(timeout=60) as http:
            r = http.post(f"{server.base}/v1/extender/filter", json={"Pod": pod, "NodeNames": names})
            assert r.status_code == 200, r.text
            body = r.json()
            # gpu-idle: an idle H100 holds it; gpu-hbm: no HBM; gpu-mig: every 1g placement is booked.
            assert _ci(body, "NodeNames") == ["gpu-idle"], body
            failed = _ci(body, "FailedNodes")
            assert set(failed) == {"gpu-mig", "gpu-hbm"}, failed
            assert "hbm" in failed["gpu-hbm"] and "mig" in failed["gpu-mig"], failed
            assert not body.get("error") and not body.get("Error")
        with steps.step("POST /v1/extender/filter with Nodes"), httpx.Client(timeout=60) as http:
            nodes = {"kind": "NodeList", "apiVersion": "v1",
                     "items": [{"metadata": {"name": n, "labels": {"gpu": "yes"}}} for n in names]}
            r = http.post(f"{server.base}/v1/extender/filter", json={"Pod": pod, "Nodes": nodes})
            assert r.status_code == 200, r.text
            kept = _ci(r.json(), "Nodes")
            assert [n["metadata"]["name"] for n in _ci(kept, "items")] == ["gpu-idle"], r.json()
            assert _ci(kept, "items")[0]["metadata"]["labels"] == {"gpu": "yes"}  # the node as sent
        with steps.step("POST /v1/extender/prioritize"), httpx.Client(timeout=60) as http:
            r = http.post(f"{server.base}/v1/extender/prioritize", json={"Pod": pod, "NodeNames": names})
            assert r.status_code == 200, r.text
            scores = {_ci(h, "Host"): _ci(h, "Score") for h in r.json()}
            assert set(scores) == set(names) and all(0 <= s <= 10 for s in scores.values()), scores
            assert scores["gpu-mig"] == scores["gpu-hbm"] == 0 < scores["gpu-idle"], scores
    finally:
        server.stop()
    steps.verify()
