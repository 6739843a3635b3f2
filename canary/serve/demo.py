"""``make serve-demo``: start ``canary serve``, make two admission calls over HTTP, stop.

A fresh SQLite store under ``.canary-demo/`` (or ``--dir DIR``); a token with the ``admit`` scope
created with ``canary tokens create``; an unseen pair (an embedding service beside an NCCL kernel on a
simulated H100 under MPS) → ``202`` and a probe; the same request again → ``200`` from the evidence cache.

Every ``$`` line it prints is a shell command that works when pasted: the token is exported by value
(a throwaway token of the demo's own store), the request body is written to the file the ``curl`` lines
send, and ``$TOKEN`` sits in double quotes so the shell expands it. After the demo, start the server
with its printed command and the ``curl`` lines replay against the same store.
"""

from __future__ import annotations

import json
import os
import shlex
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


def _canary_command() -> list[str]:
    """How a shell starts this canary: the ``canary`` script beside this interpreter, else ``-m``."""
    script = Path(sys.executable).parent / "canary"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "canary.cli"]


def _say(argv: list[str], suffix: str = "") -> None:
    sys.stdout.write(f"$ {shlex.join(argv)}{suffix}\n")


def curl_argv(method: str, url: str, body_file: Path | None = None) -> str:
    """A curl command line that works pasted into a POSIX shell with ``TOKEN`` set."""
    line = f"curl -sS -X {method} {shlex.quote(url)} -H \"Authorization: Bearer $TOKEN\""
    if body_file is not None:
        line += f" -H 'Content-Type: application/json' -d @{shlex.quote(str(body_file))}"
    return line


def _show(line: str, r: httpx.Response, note: str = "") -> None:
    sys.stdout.write(f"\n$ {line}{note}\n")
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


def run(argv: list[str] | None = None) -> int:
    import argparse

    from canary.profile import load_profile
    from canary.snapshot import load_snapshot

    parser = argparse.ArgumentParser(prog="python -m canary.serve.demo", description=__doc__.splitlines()[0])
    # $CANARY_DEMO_DIR, as make demo reads it (canary.demo.DEMO_DIR_ENV), else the repository's .canary-demo/
    given = os.environ.get("CANARY_DEMO_DIR", "")
    parser.add_argument("--dir", type=Path, default=Path(given) if given else ROOT / ".canary-demo",
                        help="where the store and the request body go (default: $CANARY_DEMO_DIR, else .canary-demo/)")
    where: Path = parser.parse_args(argv).dir.resolve()
    store = where / "serve.sqlite3"
    where.mkdir(parents=True, exist_ok=True)
    for leftover in where.glob("serve.sqlite3*"):
        leftover.unlink()
    db = f"sqlite:///{store}"
    canary = [*_canary_command(), "--db", db]
    token = subprocess.run([*canary, "tokens", "create", "--name", "demo", "--scope", "admit"], check=True,
                           capture_output=True, text=True, timeout=120).stdout.strip()
    _say([*canary, "tokens", "create", "--name", "demo", "--scope", "admit"],
         "   # prints a token (stored hashed, shown once):")
    sys.stdout.write(f"$ export TOKEN={shlex.quote(token)}\n")
    port = _port()
    base = f"http://127.0.0.1:{port}"
    serve = [*canary, "serve", "--port", str(port), "--sim-time-scale", "0.02"]
    _say(serve, " &")
    server = subprocess.Popen(serve, start_new_session=True, stderr=subprocess.PIPE, text=True)
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
        body_file = where / "admission.json"
        body_file.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        note = "   # snapshot g + embedding-service, by value"
        post = curl_argv("POST", f"{base}/v1/admissions", body_file)
        with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as c:
            first = c.post("/v1/admissions", content=body_file.read_bytes(),
                           headers={"Content-Type": "application/json"})
            _show(post, first, note)
            if first.status_code != 202:
                return 1
            done = c.get(first.headers["location"], params={"wait": "30s"})
            _show(curl_argv("GET", f"{base}{first.headers['location']}?wait=30s"), done)
            second = c.post("/v1/admissions", content=body_file.read_bytes(),
                            headers={"Content-Type": "application/json"})
            _show(post, second, note)
            ok = (done.json().get("state") == "done" and second.status_code == 200
                  and second.json().get("decided_by") == "cache")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        sys.stdout.write("$ kill %1   # server stopped\n")
    if not ok:
        sys.stderr.write("serve-demo: expected a probe, then an answer from the evidence cache\n")
        return 1
    sys.stdout.write(f"\nThe probe's evidence and both certificates are in {store}; the request body is "
                     f"{body_file}.\nTo replay: start the server with the command above, then the curl lines.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
