"""A profile draft from a run: sample NVML while a command runs.

Every ``interval_ms`` the sampler reads the device memory held by the command's process tree and the
device's utilisation. The draft's memory is what the run held (``reserved`` = the least it held once
it started holding any, ``peak`` = the most), its duty cycle the mean utilisation, and its phases the
stretches where the utilisation level stayed the same. ``provenance.coverage`` is the fraction of
samples in which both readings were available; what was not measured stays out of the draft.

The summary (``summarize``) is pure; ``record`` does the IO.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary._model import name_problem
from canary.backends._vendor import Nvml, Unavailable
from canary.errors import InputError
from canary.profile import MemoryEnvelope, Phase, Provenance, WorkloadProfile

MIN_PHASE_SAMPLES = 3


@dataclass(frozen=True)
class Sample:
    t_s: float
    memory_bytes: int | None
    utilization_pct: float | None


def _level(util_pct: float) -> str:
    if util_pct < 10:
        return "idle"
    if util_pct < 60:
        return "partial"
    return "busy"


def summarize(
    samples: Sequence[Sample],
    *,
    name: str,
    version: str,
    interval_s: float,
    notes: str,
    created: dt.datetime | None = None,
) -> WorkloadProfile:
    """Turn samples into a profile draft; no memory reading at all is an ``InputError`` (no envelope)."""
    memory = [s.memory_bytes for s in samples if s.memory_bytes is not None]
    held = [m for m in memory if m > 0]
    if not held:
        raise InputError(
            "the command held no device memory that NVML could attribute to it; nothing to profile "
            "(did it run on this GPU? in a container NVML may not see its processes)",
            field="COMMAND",
        )
    utils = [s.utilization_pct for s in samples if s.utilization_pct is not None]
    complete = [s for s in samples if s.memory_bytes is not None and s.utilization_pct is not None]
    phases: list[Phase] = []
    run: list[Sample] = []
    for sample in complete:
        assert sample.utilization_pct is not None
        if run and _level(run[-1].utilization_pct or 0.0) != _level(sample.utilization_pct):
            phases.append(_phase(run, len(phases), interval_s))
            run = []
        run.append(sample)
    if run:
        phases.append(_phase(run, len(phases), interval_s))
    # fold phases too short to be behaviour (a sample or two of noise) into their predecessor, and
    # join a phase to its predecessor when the fold made them the same level again
    merged: list[Phase] = []
    for phase in phases:
        same_level = bool(merged) and merged[-1].name.split("-", 1)[1] == phase.name.split("-", 1)[1]
        if merged and (phase.duration_s < MIN_PHASE_SAMPLES * interval_s or same_level):
            prev = merged.pop()
            total = prev.duration_s + phase.duration_s
            merged.append(
                prev.model_copy(
                    update={
                        "duration_s": total,
                        "duty_cycle": (
                            prev.duty_cycle * prev.duration_s + phase.duty_cycle * phase.duration_s
                        )
                        / total,
                        "memory_bytes": max(prev.memory_bytes or 0, phase.memory_bytes or 0),
                    }
                )
            )
        else:
            merged.append(phase.model_copy(update={"name": f"{len(merged)}-{phase.name.split('-', 1)[1]}"}))
    return WorkloadProfile(
        name=name,
        version=version,
        memory=MemoryEnvelope(reserved_bytes=min(held), peak_bytes=max(held), source="profiled"),
        phases=tuple(merged),
        duty_cycle=(sum(utils) / len(utils) / 100) if utils else None,
        provenance=Provenance(
            source="profiled",
            tool="canary envelope record (NVML)",
            created=created,
            coverage=len(complete) / len(samples) if samples else 0.0,
            notes=notes,
        ),
    )


def _phase(run: Sequence[Sample], index: int, interval_s: float) -> Phase:
    utils = [s.utilization_pct or 0.0 for s in run]
    level = _level(utils[0])
    return Phase(
        name=f"{index}-{level}",
        duration_s=len(run) * interval_s,
        duty_cycle=min(sum(utils) / len(utils) / 100, 1.0),
        memory_bytes=max(s.memory_bytes or 0 for s in run),
    )


def process_tree(root: int, proc: Path = Path("/proc")) -> set[int]:
    """``root`` and its descendants, from ``/proc/<pid>/stat`` (processes that vanish are skipped)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def record(
    command: Sequence[str],
    *,
    index: int = 0,
    interval_ms: float = 100.0,
    name: str | None = None,
    version: str | None = None,
    module: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[WorkloadProfile, int]:
    """Run ``command`` and sample device ``index``; returns the draft and the command's exit status.

    NVML is started before the command, so without a GPU this raises ``DeviceUnavailable`` and the
    command never runs."""
    if not command:
        raise InputError("no command given after --", field="COMMAND")
    if interval_ms < 10:
        raise InputError("the sampling interval must be at least 10 ms", field="--interval-ms")
    if name is None or version is None:  # the command's name stands in for them: it must be a name
        problem = name_problem(Path(command[0]).name)
        if problem is not None:
            raise InputError(f"the command's name {problem}; give --name and --version", field="COMMAND")
    nvml = Nvml(module)
    nvml.init()
    try:
        handle = nvml.handle(index)
        try:
            child = subprocess.Popen(list(command))
        except OSError as exc:
            raise InputError(f"cannot start {command[0]!r}: {exc.strerror}", field="COMMAND") from None
        samples: list[Sample] = []
        start = clock()
        interval_s = interval_ms / 1000
        try:
            while True:
                samples.append(_sample(nvml, handle, child.pid, clock() - start))
                if child.poll() is not None:
                    break
                time.sleep(interval_s)
        finally:
            if child.poll() is None:
                child.terminate()
            status = child.wait()
    finally:
        nvml.shutdown()
    notes = (
        f"{len(samples)} samples every {interval_ms:g} ms of `{' '.join(command)}` (exit status {status}); "
        "duty cycle is the device-wide NVML utilisation while it ran"
    )
    draft = summarize(
        samples,
        name=name or Path(command[0]).name,
        version=version or f"unversioned:{Path(command[0]).name}",
        interval_s=interval_s,
        notes=notes,
        created=dt.datetime.now(dt.UTC),
    )
    return draft, status


def _sample(nvml: Nvml, handle: Any, root: int, t_s: float) -> Sample:
    memory: int | None
    try:
        tree = process_tree(root)
        procs = nvml.call("nvmlDeviceGetComputeRunningProcesses", handle)
        mine = [p for p in procs if int(p.pid) in tree]
        memory = (
            None if any(p.usedGpuMemory is None for p in mine) else sum(int(p.usedGpuMemory) for p in mine)
        )
    except Unavailable:
        memory = None
    try:
        util: float | None = float(nvml.call("nvmlDeviceGetUtilizationRates", handle).gpu)
    except Unavailable:
        util = None
    return Sample(t_s=t_s, memory_bytes=memory, utilization_pct=util)
