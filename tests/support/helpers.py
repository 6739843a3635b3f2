"""Profiles and ports for the tests that run real processes and loopback HTTP servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from canary._model import validate_document
from canary.profile import WorkloadProfile
from tests.support.timing import HANG_S

SERVERS = Path(__file__).resolve().parent / "servers.py"


#: Ports tests hand to servers: below the kernel's ephemeral range (32768–60999 here), so no client
#: socket's source port ever holds one, in a block of its own per pytest-xdist worker.
PORT_BLOCK = 1000
PORT_BASE = 12000
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port for a server a test starts, that no other test of this run can be given.

    Asking the kernel for port 0 and passing the number on races: another test process may be given
    the same number before the server binds it (its plain-HTTP server then answers this test's TLS
    handshake: "wrong version number"), and outgoing connections take their source ports from the same
    range. Here each xdist worker (``PYTEST_XDIST_WORKER``, gw0…) draws from its own block below the
    ephemeral range, never hands a port out twice, and skips ports something is bound to."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    start = PORT_BASE + (index % 20) * PORT_BLOCK
    offset = os.getpid() % PORT_BLOCK  # two runs at once (rare) start at different places
    for i in range(PORT_BLOCK):
        port = start + (offset + i) % PORT_BLOCK
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {start}..{start + PORT_BLOCK - 1}")


def server_command(port: int, *extra: str) -> tuple[str, ...]:
    return (sys.executable, str(SERVERS), "--port", str(port), *extra)


def profile(name: str, *, workload_class: str = "online-inference", **canary: Any) -> WorkloadProfile:
    # Validated as a profile file is (JSON mode), so lists stand for tuples.
    return validate_document(
        WorkloadProfile,
        {
            "name": name,
            "version": "1.0.0",
            "workload_class": workload_class,
            "memory": {"reserved_bytes": 1 << 30, "peak_bytes": 1 << 30},
            "canary": canary,
        },
    )


def candidate_profile(port: int, *extra: str, startup_timeout_s: float = 30.0) -> WorkloadProfile:
    return profile(
        "cpu-burner",
        executor="process",
        command=list(server_command(port, *extra)),
        endpoint=f"http://127.0.0.1:{port}",
        ready_path="/ready",
        startup_timeout_s=startup_timeout_s,
    )


def resident_profile(port: int, *, monitor: str = "http") -> WorkloadProfile:
    if monitor == "prometheus":
        return profile(
            "resident",
            monitor="prometheus",
            metrics_url=f"http://127.0.0.1:{port}/metrics",
            latency_metric="request_latency_seconds",
            endpoint=f"http://127.0.0.1:{port}",
        )
    return profile("resident", monitor="http", endpoint=f"http://127.0.0.1:{port}")


def start_server(port: int, *extra: str) -> subprocess.Popen[bytes]:
    """A server outside any probe (the resident), ready when this returns."""
    import httpx

    proc = subprocess.Popen(
        server_command(port, *extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=0.5).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("test server did not start")


def proc_nice(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[16])


def proc_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)
