"""Build the executor and monitor a profile asks for (``canary.executor`` / ``canary.monitor``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from canary.errors import ProbeError

if TYPE_CHECKING:
    from canary.policy import Policy
    from canary.probe.interfaces import Executor, Monitor
    from canary.profile import WorkloadProfile


def make_executor(
    candidate_profile: WorkloadProfile, *, policy: Policy, sim_device: Any | None = None
) -> Executor:
    """The candidate's executor, by ``candidate.canary.executor`` (``sim`` when the profile has no
    ``canary`` section). Raises ``ProbeError`` when it cannot be built (no simulated device for
    ``sim``, the ``cuda`` executor not installed)."""
    kind = candidate_profile.canary.executor if candidate_profile.canary else "sim"
    if kind == "sim":
        if sim_device is None:
            raise ProbeError(f"profile {candidate_profile.name!r}: executor 'sim' needs a simulated device")
        from canary.probe.executors.sim import SimExecutor

        return SimExecutor(sim_device, candidate_profile)
    if kind == "process":
        from canary.probe.executors.process import ProcessExecutor

        return ProcessExecutor(candidate_profile, mps_active_thread_pct=policy.mps_default_active_thread_pct)
    if kind == "cuda":
        import importlib

        try:
            cuda = importlib.import_module("canary.probe.executors.cuda")
        except ImportError as exc:
            raise ProbeError(f"executor 'cuda' is not available in this installation: {exc}") from exc
        factory = getattr(cuda, "make_cuda_executor", None) or getattr(cuda, "CudaExecutor", None)
        if factory is None:
            raise ProbeError(
                "canary.probe.executors.cuda defines neither make_cuda_executor nor CudaExecutor"
            )
        executor: Executor = factory(candidate_profile, policy=policy)
        return executor
    raise ProbeError(f"profile {candidate_profile.name!r}: unknown executor {kind!r}")


def make_monitor(
    resident_profile: WorkloadProfile,
    *,
    sim_device: Any | None = None,
    sim_resident_handle: str | None = None,
) -> Monitor:
    """The resident's monitor, by ``resident.canary.monitor`` (``sim`` without a ``canary`` section).

    For ``sim``, ``sim_resident_handle`` names the resident already placed on ``sim_device``; without
    it the monitor places the resident itself when the probe opens it and removes it at the end."""
    kind = resident_profile.canary.monitor if resident_profile.canary else "sim"
    if kind == "sim":
        if sim_device is None:
            raise ProbeError(f"profile {resident_profile.name!r}: monitor 'sim' needs a simulated device")
        from canary.probe.monitors.sim import SimMonitor

        return SimMonitor(sim_device, resident_profile, resident_handle=sim_resident_handle)
    if kind == "http":
        from canary.probe.monitors.http import HttpMonitor

        return HttpMonitor(resident_profile)
    if kind == "prometheus":
        from canary.probe.monitors.prometheus import PrometheusMonitor

        return PrometheusMonitor(resident_profile)
    raise ProbeError(f"profile {resident_profile.name!r}: unknown monitor {kind!r}")
