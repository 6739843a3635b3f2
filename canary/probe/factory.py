"""Build the executor and monitor a profile asks for (``canary.executor`` / ``canary.monitor``).

Profiles and snapshots are data from people who may be careless or hostile (docs/security.md): they
may choose *which* of the operator's allowed endpoints and commands a probe uses, never *what* canary
contacts or runs. Before anything is built, every URL a profile names (``endpoint``,
``metrics_url``) must be ``http``/``https`` on a host of the policy's ``probe_hosts`` (loopback by
default), and a ``process`` executor's command must start with an executable the policy's
``candidate_commands`` lists (none by default), and a ``cuda`` executor's cubin must lie in a
directory of ``candidate_cubin_dirs`` (none by default). A refusal is an ``InputError`` (exit 2) naming the
profile field; nothing was contacted or started.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from canary._model import shorten
from canary.errors import InputError, ProbeError
from canary.profile import path_problem, url_problem

if TYPE_CHECKING:
    from canary.policy import Policy
    from canary.probe.interfaces import Executor, Monitor
    from canary.profile import WorkloadProfile


def _default_policy() -> Policy:
    from canary.policy import load_policy

    return load_policy("default")


def _host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().rstrip(".")
        if host == entry:
            return True
        try:
            if ipaddress.ip_address(host) == ipaddress.ip_address(entry):
                return True
        except ValueError:
            continue
    return False


def _who(profile: WorkloadProfile, origin: str | None) -> str:
    """How a refusal names the profile: its name, and where it came from when the caller knows."""
    name = f"profile {shorten(profile.name)!r}"
    return f"{name} ({origin})" if origin else name


def check_url(profile: WorkloadProfile, field: str, url: str, policy: Policy, *, file: str | None = None,
              origin: str | None = None, prefix: str = "") -> None:
    """Raise ``InputError`` unless ``url`` is http(s) on a host of ``policy.probe_hosts`` (no credentials).
    The error names ``file`` and the field ``{prefix}canary.{field}``; ``origin`` says where the profile
    came from when no file holds it alone (a resident of a snapshot)."""
    where = f"{prefix}canary.{field}"
    who = _who(profile, origin)
    problem = url_problem(url)
    if problem is not None:
        raise InputError(f"{who}: {problem}", file=file, field=where)
    host = urlsplit(url).hostname or ""
    if not _host_allowed(host, policy.probe_hosts):
        raise InputError(
            f"{who}: host {shorten(host)!r} is not in policy {policy.name!r} probe_hosts "
            f"({', '.join(policy.probe_hosts) or 'none'}); an operator must allow it",
            file=file,
            field=where,
        )


def check_command(profile: WorkloadProfile, command: tuple[str, ...], policy: Policy, *, file: str | None = None,
                  origin: str | None = None, prefix: str = "") -> None:
    """Raise ``InputError`` unless ``command[0]`` is in ``policy.candidate_commands`` (or it holds ``*``)."""
    allowed = policy.candidate_commands
    if "*" in allowed or (command and command[0] in allowed):
        return
    shown = shorten(command[0]) if command else "(empty)"
    raise InputError(
        f"{_who(profile, origin)}: executable {shown!r} is not in policy {policy.name!r} candidate_commands "
        f"({', '.join(allowed) or 'none'}); an operator must allow it",
        file=file,
        field=f"{prefix}canary.command",
    )


def check_cubin(profile: WorkloadProfile, cubin: str, policy: Policy, *, file: str | None = None,
                origin: str | None = None, prefix: str = "") -> None:
    """Raise ``InputError`` unless ``cubin`` (links resolved) lies in a directory of
    ``policy.candidate_cubin_dirs`` (or it holds ``*``)."""
    from pathlib import Path

    allowed = policy.candidate_cubin_dirs
    if "*" in allowed:
        return
    target = Path(cubin).resolve()
    for entry in allowed:
        if target.is_relative_to(Path(entry).resolve()):
            return
    raise InputError(
        f"{_who(profile, origin)}: cubin {shorten(cubin)!r} is not inside a directory of policy {policy.name!r} "
        f"candidate_cubin_dirs ({', '.join(allowed) or 'none'}); an operator must allow it",
        file=file,
        field=f"{prefix}canary.cubin",
    )


def check_profile(profile: WorkloadProfile, policy: Policy, *, as_candidate: bool, file: str | None = None,
                  origin: str | None = None, prefix: str = "") -> None:
    """Every URL the profile's ``canary`` section carries, whatever its executor and monitor (a profile
    may never name a forbidden URL, used or not: docs/security.md), and the command or cubin a candidate
    would run, checked against the policy. ``InputError`` names ``file`` (the profile's, or the snapshot
    holding it, with ``prefix`` before the field) and ``origin`` when given."""
    spec = profile.canary
    if spec is None:
        return
    context: dict[str, Any] = {"file": file, "origin": origin, "prefix": prefix}
    if spec.endpoint:
        check_url(profile, "endpoint", spec.endpoint, policy, **context)
        # The URLs really requested are endpoint + path: a path such as "@169.254.169.254/" would turn
        # the endpoint's host into user-info, so the joined URL is checked too.
        base = spec.endpoint.rstrip("/")
        paths = [("request_path", spec.request_path)]
        if spec.ready_path is not None:
            paths.append(("ready_path", spec.ready_path))
        for field, path in paths:
            problem = path_problem(path)
            if problem is not None:
                raise InputError(f"{_who(profile, origin)}: {problem}", file=file, field=f"{prefix}canary.{field}")
            check_url(profile, field, base + path, policy, **context)
    if spec.metrics_url:
        check_url(profile, "metrics_url", spec.metrics_url, policy, **context)
    if as_candidate and spec.executor == "process":
        check_command(profile, spec.command or (), policy, **context)
    if as_candidate and spec.executor == "cuda":
        check_cubin(profile, spec.cubin or "", policy, **context)


def make_executor(
    candidate_profile: WorkloadProfile, *, policy: Policy, sim_device: Any | None = None
) -> Executor:
    """The candidate's executor, by ``candidate.canary.executor`` (``sim`` when the profile has no
    ``canary`` section). Raises ``ProbeError`` when it cannot be built (no simulated device for
    ``sim``, the ``cuda`` executor not installed)."""
    kind = candidate_profile.canary.executor if candidate_profile.canary else "sim"
    executor = _build_executor(kind, candidate_profile, policy=policy, sim_device=sim_device)
    # Building one starts and contacts nothing; it is refused before it is returned, so an incomplete
    # profile is still told what it lacks first.
    check_profile(candidate_profile, policy, as_candidate=True)
    return executor


def _build_executor(kind: str, candidate_profile: WorkloadProfile, *, policy: Policy, sim_device: Any) -> Executor:
    if kind == "sim":
        if sim_device is None:
            raise ProbeError(f"profile {candidate_profile.name!r}: executor 'sim' needs a simulated device")
        from canary.probe.executors.sim import SimExecutor

        return SimExecutor(sim_device, candidate_profile)
    if kind == "process":
        from canary.probe.executors.process import ProcessExecutor

        return ProcessExecutor(
            candidate_profile,
            mps_active_thread_pct=policy.mps_default_active_thread_pct,
            environment_passthrough=policy.candidate_environment,
        )
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
    policy: Policy | None = None,
    sim_device: Any | None = None,
    sim_resident_handle: str | None = None,
) -> Monitor:
    """The resident's monitor, by ``resident.canary.monitor`` (``sim`` without a ``canary`` section).

    For ``sim``, ``sim_resident_handle`` names the resident already placed on ``sim_device``; without
    it the monitor places the resident itself when the probe opens it and removes it at the end.
    ``policy`` says which hosts the monitor may contact (``None``: the default policy, loopback only);
    ``InputError`` when the profile names another."""
    kind = resident_profile.canary.monitor if resident_profile.canary else "sim"
    check_profile(resident_profile, policy if policy is not None else _default_policy(), as_candidate=False)
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


def check_request(req: Any, *, candidate_file: str | None = None, snapshot_file: str | None = None,
                  resident_files: Mapping[str, str] | None = None) -> None:
    """Before an admission that may probe touches the store: the candidate's and every profiled
    resident's URLs and commands, against the request's policy. ``InputError`` names the file a refused
    profile came from where the caller says which: ``candidate_file``; ``resident_files[name]`` for a
    resident added from a file of its own (``--resident``); else ``snapshot_file``, the snapshot holding
    the resident, with the resident's place in it. The message always names the profile, and for a
    resident the resident and the device (``file:PATH`` of a snapshot file)."""
    device = req.device
    device_ref = f"{device.kind}:{device.ref}" if device.kind == "file" else str(device.ref)
    check_profile(req.candidate, req.policy, as_candidate=True, file=candidate_file,
                  origin=None if candidate_file else "the candidate")
    files = resident_files or {}
    for index, resident in enumerate(req.snapshot.residents):
        if resident.profile is None:
            continue
        origin = f"resident {shorten(resident.name)!r} on device {shorten(device_ref, 4 * 80)}"
        if resident.name in files:
            check_profile(resident.profile, req.policy, as_candidate=False, file=files[resident.name], origin=origin)
        else:
            check_profile(resident.profile, req.policy, as_candidate=False, file=snapshot_file, origin=origin,
                          prefix=f"residents[{index}].profile." if snapshot_file else "")
