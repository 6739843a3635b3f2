"""The ``http`` monitor: timed requests to the resident's endpoint; one latency per request.

Requests go one at a time (closed loop, keep-alive, optionally paced by ``interval_s``) to
``endpoint + request_path`` for the whole window. They are timed in a small process of their own
(``_http_worker``), not in the prober's event loop: the prober also drives the candidate's requests,
and its own scheduling delays must not read as the resident's slowdown. A request that fails or times
out has no latency: it is left out and counted in the window's note. A window whose requests all
failed or timed out is marked ``stalled`` (the judge reads it as unsafe); a window with too few
answered requests and no failure is only no data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from anyio.abc import Process

from canary.errors import ProbeError
from canary.probe.interfaces import WindowSample
from canary.profile import WorkloadProfile

_WORKER = Path(__file__).resolve().with_name("_http_worker.py")

#: Time the timing process may take beyond a window to report (start-up, the last request).
REPORT_SLACK_S = 5.0


class HttpMonitor:
    name = "http"
    simulated = False

    def __init__(
        self, profile: WorkloadProfile, *, interval_s: float = 0.0, request_timeout_s: float = 5.0
    ) -> None:
        spec = profile.canary
        if spec is None or not spec.endpoint:
            raise ProbeError(f"profile {profile.name!r}: monitor 'http' needs canary.endpoint")
        self.config = {
            "url": spec.endpoint.rstrip("/") + spec.request_path,
            "method": spec.request_method,
            "body": spec.request_body,
            "timeout_s": request_timeout_s,
            "interval_s": interval_s,
        }
        self.request_timeout_s = request_timeout_s
        self._proc: Process | None = None
        self._buffer = b""

    async def open(self) -> None:
        if self._proc is None:
            self._proc = await anyio.open_process(
                # By path, not ``-m``: the worker is standard library only, so it needs neither the
                # package on sys.path nor the time to import it. ``-I`` keeps the worker's own folder
                # (which holds this ``http.py``) off sys.path, where it would shadow the stdlib's http.
                [sys.executable, "-I", str(_WORKER), json.dumps(self.config)],
                stderr=None,
            )

    async def _read_line(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self._proc.stdout.receive()
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    async def measure(self, duration_s: float) -> WindowSample:
        if self._proc is None or self._proc.stdin is None:
            raise ProbeError("http monitor measured before open()")
        try:
            await self._proc.stdin.send(f"{duration_s}\n".encode())
            with anyio.fail_after(duration_s + self.request_timeout_s + REPORT_SLACK_S):
                line = await self._read_line()
            report = json.loads(line)
        except (anyio.EndOfStream, anyio.BrokenResourceError, TimeoutError, ValueError) as exc:
            raise ProbeError(f"the http monitor's timing process failed: {exc!r}") from exc
        failures = int(report["failures"])
        latencies = list(report["latencies_ms"])
        return WindowSample(
            latencies,
            duration_s,
            note=f"{failures} failed request(s)" if failures else "",
            # Requests sent and none answered within its timeout: the resident is stalled, not just quiet.
            stalled=failures > 0 and not latencies,
        )

    async def close(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            if proc.returncode is None:
                proc.kill()
            with anyio.move_on_after(1.0):
                await proc.wait()
            await proc.aclose()
