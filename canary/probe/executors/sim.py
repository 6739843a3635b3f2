"""The ``sim`` executor: places the candidate on a :class:`canary.sim.SimDevice` for each on-window.

Windows advance simulated time (the sim monitor runs them), so a simulated probe takes milliseconds
of wall time and reports simulated seconds. The candidate is placed with ``role="candidate"`` for
an on-window and removed after it (the simulator costs no warm-up for re-placing), at
``priority=1``, below the resident's 0 (CUDA numbering: a larger number is a lower priority), as the
canary runs on the lowest-priority stream. Its requests are metered from the window's
``requests_served`` through the orchestrator's gate: after the first window the executor knows the
candidate's rate and asks the simulator for no more requests than the gate still allows; simulated
requests beyond the gate are never counted and end the probe's exposure budget.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import TaskStatus

from canary.errors import ProbeError
from canary.probe.interfaces import CandidateProcess, ExposureGate, RollbackReport
from canary.probe.simlink import link_for
from canary.profile import WorkloadProfile


class SimExecutor:
    name = "sim"
    simulated = True

    def __init__(
        self,
        device: Any,
        profile: WorkloadProfile,
        *,
        request_rate_rps: float | None = None,
        priority: int = 0,
    ) -> None:
        self.device = device
        self.profile = profile
        self.link = link_for(device)
        self.request_rate_rps = request_rate_rps
        self.priority = priority
        self._observed_rate_rps: float | None = None
        self._handle: str | None = None
        self._memory_before_bytes: int | None = None
        self.refused_requests = 0

    async def prepare(self, probe_id: str) -> CandidateProcess | None:
        return None

    def _place(self, request_rate_rps: float | None) -> str:
        from canary.sim import SimOutOfMemory

        try:
            handle: str = self.device.place(
                self.profile, role="candidate", priority=self.priority, request_rate_rps=request_rate_rps
            )
        except SimOutOfMemory as exc:
            raise ProbeError(f"the candidate does not fit on the simulated device: {exc}") from exc
        self.link.candidate_handles.append(handle)
        return handle

    async def start(self) -> None:
        # Memory with the resident but without the candidate: what rollback must get back to.
        self._memory_before_bytes = int(self.device.memory_used_bytes)
        # Placing once proves the candidate fits; it runs only during on-windows.
        handle = self._place(self.request_rate_rps)
        self.device.remove(handle)

    def _rate_for(self, duration_s: float, allowance: int) -> float | None:
        natural = self.request_rate_rps if self.request_rate_rps is not None else self._observed_rate_rps
        cap = allowance / duration_s
        if natural is None:
            return None
        return min(natural, cap)

    async def drive(self, duration_s: float, gate: ExposureGate, *, task_status: TaskStatus[None]) -> None:
        if gate.remaining <= 0:
            task_status.started()
            return
        windows_before = self.link.windows
        self._handle = self._place(self._rate_for(duration_s, gate.remaining))
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            handle, self._handle = self._handle, None
            self.device.remove(handle)
            window = self.link.last_window
            if window is not None and self.link.windows > windows_before:
                served = int(window.requests_served.get(handle, 0))
                if self._observed_rate_rps is None and served > 0:
                    self._observed_rate_rps = served / duration_s
                granted = gate.acquire_up_to(served)
                self.refused_requests += served - granted

    async def rollback(self) -> RollbackReport:
        for handle in self.link.candidate_handles:
            self.device.remove(handle)
        left = [h for h in self.link.candidate_handles if h in set(self.device.handles())]
        memory_now = int(self.device.memory_used_bytes)
        memory_back = self._memory_before_bytes is None or memory_now <= self._memory_before_bytes
        verified = not left and memory_back
        detail = (
            f"simulated candidate removed; memory {memory_now} B (before {self._memory_before_bytes} B)"
            if verified
            else f"handles still placed: {left}; memory {memory_now} B vs {self._memory_before_bytes} B before"
        )
        return RollbackReport(verified, detail, memory_checked=self._memory_before_bytes is not None)
