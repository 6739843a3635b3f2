"""Probe dispatch latency: a probe queued by the service → running on the node agent that owns the device.

    python benchmarks/dispatch.py                        # PostgreSQL (127.0.0.1:5432) and SQLite, 40 probes each
    python benchmarks/dispatch.py --backends sqlite --probes 20

A real ``canary serve`` (loopback, no auth) and a real ``canary agent run`` (one simulated device) share a
fresh store. One admission at a time asks for an unseen pair, so exactly one probe is queued and the
device is idle: what is measured is dispatch, not queueing behind another probe. For each probe the
store records ``created_at`` (the service queued it) and ``started_at`` (its runner claimed it); the
latency is their difference (one machine, one clock).

Baseline, in the same run and through the same server: the same admissions on a device sent by value
(not agent-owned), which the server's own probe runner claims — it is woken in-process at once, so its
figure is the floor of the claim path itself. The agent is a separate process: on PostgreSQL the service
wakes it with a notification (``LISTEN``/``NOTIFY``) when it queues a probe for one of its devices; on
SQLite, which has no notifications, it polls the store every 0.25 s (and claims at once after finishing a
probe).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_url() -> str:
    import psycopg

    name = f"canary_dispatch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", autocommit=True,
                         connect_timeout=3) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def _drop_pg(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", autocommit=True,
                         connect_timeout=3) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _canary() -> list[str]:
    script = Path(sys.executable).parent / "canary"
    return [str(script)] if script.exists() else [sys.executable, "-m", "canary.cli"]


def _snapshot(uid: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EX / "snapshots" / "g-nccl-mps-room.yaml").read_text())
    doc["uuid"] = uid
    for resident in doc["residents"]:
        resident["profile"] = str((EX / "snapshots" / resident["profile"]).resolve())
    return doc


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _measure(client: httpx.Client, url: str, device: Any, n: int, tag: str) -> list[float]:
    from sqlalchemy import select

    from canary.profile import load_profile
    from evidence_store.database import make_engine, session_scope
    from evidence_store.service.models import ServeProbe

    base = load_profile(EX / "profiles" / "embedding-service.yaml").model_dump(mode="json")
    ids = []
    for i in range(n):
        body = {"device": device, "candidate": {**base, "version": f"{tag}-{i}"}, "reserve": False}
        r = client.post("/v1/admissions", json=body)
        if r.status_code != 202:
            raise SystemExit(f"expected a probe (202), got {r.status_code}: {r.text[:300]}")
        for _ in range(20):
            state = client.get(r.headers["location"], params={"wait": "30s"}).json()["state"]
            if state not in ("queued", "running"):
                break
        if state != "done":
            raise SystemExit(f"probe {r.json()['id']} ended {state}")
        ids.append(r.json()["id"])
    engine = make_engine(url)
    with session_scope(engine, read_only=True) as session:
        probes = session.scalars(select(ServeProbe).where(ServeProbe.id.in_(ids))).all()
        out = [(p.started_at - p.created_at).total_seconds() * 1000 for p in probes if p.started_at is not None]
    engine.dispose()
    return out


def run_backend(backend: str, n: int, heartbeat_s: float) -> dict[str, Any]:
    from evidence_store.migrate import upgrade

    tmp = Path(tempfile.mkdtemp(prefix="canary-dispatch-"))
    url = f"sqlite:///{tmp / 'store.sqlite3'}" if backend == "sqlite" else _pg_url()
    upgrade(url)
    device_file = tmp / "gpu0.yaml"
    device_file.write_text(yaml.safe_dump(_snapshot(f"GPU-dispatch-{uuid.uuid4().hex[:6]}")))
    port = _free_port()
    env = {**os.environ, "CANARY_DB_URL": url}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (tmp / "serve.log").open("wb") as log:
            procs.append(subprocess.Popen([*_canary(), "--db", url, "serve", "--no-auth", "--port", str(port),
                                           "--sim-time-scale", "0"], stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True))
        with (tmp / "agent.log").open("wb") as log:
            procs.append(subprocess.Popen([*_canary(), "--db", url, "agent", "run", "--node", "bench", "--device",
                                           f"gpu0={device_file}", "--heartbeat-s", str(heartbeat_s)],
                                          stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                agents = client.get("/v1/agents").json()
                if agents:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit(f"service or agent did not come up; see {tmp}")
        from canary.snapshot import load_snapshot

        by_value = load_snapshot(EX / "snapshots" / "g-nccl-mps-room.yaml").model_dump(mode="json")
        by_value["uuid"] = f"GPU-by-value-{uuid.uuid4().hex[:6]}"
        server_ms = _measure(client, url, by_value, n, "server")
        agent_ms = _measure(client, url, "agent:bench/gpu0", n, "agent")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        if backend == "postgresql":
            _drop_pg(url)

    def summary(values: list[float]) -> dict[str, float]:
        return {"n": len(values), "p50_ms": round(statistics.median(values), 1),
                "p99_ms": round(_percentile(values, 0.99), 1), "max_ms": round(max(values), 1)}

    agent, server = summary(agent_ms), summary(server_ms)
    return {"backend": backend, "agent": agent, "server_runner_baseline": server,
            "agent_over_baseline_p50": round(agent["p50_ms"] / server["p50_ms"], 1) if server["p50_ms"] else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--heartbeat-s", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run_backend(b.strip(), args.probes, args.heartbeat_s) for b in args.backends.split(",") if b.strip()]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'backend':<11} {'runner':<22} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in results:
        for label, key in (("agent (other process)", "agent"), ("server (in-process)", "server_runner_baseline")):
            s = r[key]
            print(f"{r['backend']:<11} {label:<22} {s['n']:>4} {s['p50_ms']:>8} {s['p99_ms']:>8} {s['max_ms']:>8}")
        print(f"{r['backend']:<11} agent p50 / baseline p50 = {r['agent_over_baseline_p50']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
