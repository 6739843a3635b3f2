"""Profiles and ports for the tests that run real processes and loopback HTTP servers."""

from __future__ import annotations

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
