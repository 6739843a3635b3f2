"""The ``sim`` monitor: runs a simulated window and returns the resident's per-request latencies."""

from __future__ import annotations

from typing import Any

from canary.errors import ProbeError
from canary.probe.interfaces import WindowSample
from canary.probe.simlink import link_for
from canary.profile import WorkloadProfile


class SimMonitor:
    """Watches ``resident_handle`` on ``device``; without a handle it places the resident on ``open``
    and removes it on ``close``."""

    name = "sim"
    simulated = True

    def __init__(self, device: Any, profile: WorkloadProfile, *, resident_handle: str | None = None) -> None:
        self.device = device
        self.profile = profile
        self.link = link_for(device)
        self.handle = resident_handle
        self._placed_here = False

    async def open(self) -> None:
        if self.handle is None:
            from canary.sim import SimOutOfMemory

            try:
                self.handle = self.device.place(self.profile, role="resident")
            except SimOutOfMemory as exc:
                raise ProbeError(f"the resident does not fit on the simulated device: {exc}") from exc
            self._placed_here = True
        elif self.handle not in self.device.handles():
            raise ProbeError(f"resident handle {self.handle!r} is not on the simulated device")

    async def measure(self, duration_s: float) -> WindowSample:
        if self.handle is None:
            raise ProbeError("sim monitor measured before open()")
        window = self.device.run_window(duration_s)
        self.link.last_window = window
        self.link.windows += 1
        if self.profile.workload_class == "online-inference" or window.latencies_ms.get(self.handle):
            return WindowSample(list(window.latencies_ms.get(self.handle, [])), duration_s)
        # A batch resident reports throughput, not request latencies: the work it did in the window,
        # partial steps included, so a window shorter than a step still measures its speed.
        work = float(window.throughput.get(self.handle, 0.0)) * duration_s
        if work > 0:
            return WindowSample([1000.0 * duration_s / work], duration_s,
                                note="time per step from work done, partial steps included", work_units=work)
        return WindowSample([], duration_s, note="the resident did no work in the window", work_units=0.0)

    async def close(self) -> None:
        if self._placed_here and self.handle is not None:
            self.device.remove(self.handle)
            self.handle = None
            self._placed_here = False
