"""``make serve-demo``: start ``canary serve``, make two admission calls over HTTP, stop.

A fresh SQLite store under ``.canary-demo/``; a token with the ``admit`` scope created with
``canary tokens create``; an unseen pair (an embedding service beside an NCCL kernel on a simulated
H100 under MPS) → ``202`` and a probe; the same request again → ``200`` from the evidence cache.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _show(method: str, url: str, r: httpx.Response, body_note: str = "") -> None:
    sys.stdout.write(f"\n$ curl -sS -X {method} {url} -H 'Authorization: Bearer $TOKEN'{body_note}\n")
    sys.stdout.write(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\n")
    if "location" in r.headers:
        sys.stdout.write(f"location: {r.headers['location']}\n")
    data: dict[str, Any] = r.json()
    cert = data.get("certificate") if "certificate" in data else data
    brief: dict[str, Any] = {k: data[k] for k in ("id", "state", "waiters") if k in data}
    if cert:
        brief |= {k: cert.get(k) for k in ("verdict", "decided_by", "hard_fit", "regime", "confidence",
                                           "predicted_slowdown_range")}
    sys.stdout.write(json.dumps(brief, indent=2) + "\n")


def run() -> int:
    from canary.profile import load_profile
    from canary.snapshot import load_snapshot

    store = ROOT / ".canary-demo" / "serve.sqlite3"
    store.parent.mkdir(exist_ok=True)
    for leftover in store.parent.glob("serve.sqlite3*"):
        leftover.unlink()
    db = f"sqlite:///{store}"
    canary = [sys.executable, "-m", "canary.cli", "--db", db]
    token = subprocess.run([*canary, "tokens", "create", "--name", "demo", "--scope", "admit"], check=True,
                           capture_output=True, text=True, timeout=120).stdout.strip()
    sys.stdout.write("$ canary tokens create --name demo --scope admit   → TOKEN (stored hashed, shown once)\n")
    port = _port()
    base = f"http://127.0.0.1:{port}"
    sys.stdout.write(f"$ canary serve --port {port} --sim-time-scale 0.02 &\n")
    server = subprocess.Popen([*canary, "serve", "--port", str(port), "--sim-time-scale", "0.02"],
                              start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.stderr.write(f"serve-demo: the server did not start: {server.stderr.read() if server.stderr else ''}\n")
                return 1
            time.sleep(0.1)
        body = {"device": load_snapshot(EX / "snapshots" / "g-nccl-mps-room.yaml").model_dump(mode="json"),
                "candidate": load_profile(EX / "profiles" / "embedding-service.yaml").model_dump(mode="json")}
        note = " -H 'Content-Type: application/json' -d @admission.json   # snapshot g + embedding-service, by value"
        with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as c:
            first = c.post("/v1/admissions", json=body)
            _show("POST", f"{base}/v1/admissions", first, note)
            if first.status_code != 202:
                return 1
            done = c.get(first.headers["location"], params={"wait": "30s"})
            _show("GET", f"'{base}{first.headers['location']}?wait=30s'", done)
            second = c.post("/v1/admissions", json=body)
            _show("POST", f"{base}/v1/admissions", second, note)
            ok = (done.json().get("state") == "done" and second.status_code == 200
                  and second.json().get("decided_by") == "cache")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        sys.stdout.write("$ kill %1   # server stopped\n")
    if not ok:
        sys.stderr.write("serve-demo: expected a probe, then an answer from the evidence cache\n")
        return 1
    sys.stdout.write(f"\nThe probe's evidence and both certificates are in {store}.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
