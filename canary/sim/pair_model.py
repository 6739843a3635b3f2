"""Two training jobs time-sliced on one GPU: a closed-form model fitted to Gavel's pairs.

Gavel ran its co-located pairs as two separate processes on one GPU, without MPS (see
docs/simulator.md, "How Gavel ran its pairs"): the driver time-slices their contexts. This module
is the steady state of that regime for two training loops, in closed form, so that it can be
fitted on a 2-core machine in seconds and scored on any GPU named in a Gavel-format file.

A job is a loop of steps: ``host_ms`` of CPU work (data loading, Python, launches that wait) then
``gpu_ms`` of GPU work. ``host_ms`` is a property of the job and the host, held fixed across GPUs
(:func:`host_ms_of`); ``gpu_ms`` on a device is the isolated step time measured *on that device* minus
``host_ms`` (:func:`device_jobs`). Nothing else about the device enters: under time slicing a
context has the whole device while it runs, so SM counts and bandwidth are already inside the
isolated step time.

One *round* of time slicing gives each job one chunk of the GPU, ``a = min(g_a, slice)`` and
``b = min(g_b, slice)``; a job's host work per round is ``h_a' = H_a·a/g_a`` in the fluid limit
(once per step, a step spanning ``g_a/a`` rounds). The GPU side of A's round is
``gpu_a = a + (1 − overlap)·b + 2·switch``. Host phases either serialize (one CPU set: each job's
host work that does not hide behind the other's chunk adds to the round) or overlap (independent
CPUs: the round is the longer of the two jobs' own cycles):

    serial_a  = gpu_a + max(0, h_a' − b) + max(0, h_b' − a)
    overlap_a = max(a + h_a', b + h_b', gpu_a)
    round_a   = s·serial_a + (1 − s)·overlap_a          (s = host_serialization)

A's throughput is ``(a/g_a)/round_a`` steps/s, so its slowdown is ``round_a·g_a/(a·T_a) − 1``.

Mechanisms, each with its parameter (``PairModelParams``) and why the data needs it:

- ``timeslice_ms`` — a context keeps the GPU for up to one slice. This is what makes the job with
  the *shorter* step the loser (measured: on P100 the job whose step is 7× shorter keeps 30% of its
  throughput, the longer one 70%), which no proportional-share model reproduces.
- ``context_switch_us`` — dead time at each switch (save/restore, cold L2 and TLB). It is what
  lets two jobs' throughputs sum to less than one machine.
- ``host_contention`` — both processes were pinned to the same CPU set (Gavel's dispatcher gives
  both jobs of a pair the numactl CPU list of their GPU): a job's host time stretches by
  ``1 + host_contention × (the other's host fraction)``.
- ``overlap`` — the fraction of the co-runner's chunk that the job still progresses through
  (0 = strict time slicing; > 0 reads as concurrency, e.g. copy engines or MPS).
- ``host_serialization`` — how far the two jobs' host phases exclude each other. Held at 1 in the
  fit (Gavel pinned both processes to one CPU list); a diagnostic fit per device is in
  docs/simulator.md.

Not modelled, and why: launch serialization and L2/DRAM interference between concurrent kernels
need kernels of the two jobs to run at the same time, which time slicing does not allow; what a
switch costs in cold caches is inside ``context_switch_us``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from canary.sim.gavel_profiles import MIN_GPU_FRACTION

# Host time of a job type canary has no profile of, as a fraction of its isolated step: the median
# host fraction of the 26 profiled Gavel job types on V100 is 0.10 (canary.sim.gavel_profiles).
HOST_FRACTION_UNKNOWN = 0.1


@dataclass(frozen=True)
class PairModelParams:
    """The fitted parameters of the time-sliced pair model (module docstring)."""

    timeslice_ms: float
    context_switch_us: float
    host_contention: float
    overlap: float
    host_serialization: float = 1.0

    def __post_init__(self) -> None:
        if not self.timeslice_ms > 0:
            raise ValueError("timeslice_ms must be > 0")
        if self.context_switch_us < 0 or self.host_contention < 0:
            raise ValueError("context_switch_us and host_contention must be >= 0")
        if not 0.0 <= self.overlap < 1.0:
            raise ValueError("overlap must be within [0, 1)")
        if not 0.0 <= self.host_serialization <= 1.0:
            raise ValueError("host_serialization must be within [0, 1]")

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class DeviceJob:
    """One job on one device: measured isolated step, fixed host time, the rest on the GPU."""

    name: str
    step_ms: float
    host_ms: float
    gpu_ms: float
    host_basis: str


def _host_table() -> dict[str, tuple[float, str]]:
    from canary.sim.gavel_profiles import gavel_jobs

    out: dict[str, tuple[float, str]] = {}
    for name, job in gavel_jobs().items():
        out[name] = (
            job.step_time_ms * (1.0 - job.duty_cycle),
            f"V100 step x (1 - duty cycle); duty: {job.basis.get('duty_cycle', 'declared')}",
        )
    return out


_HOST: dict[str, tuple[float, str]] | None = None


def host_ms_of(name: str) -> tuple[float, str] | None:
    """The fixed host time (ms) of a known Gavel job type and its basis; ``None`` when unknown."""
    global _HOST
    if _HOST is None:
        _HOST = _host_table()
    return _HOST.get(name)


def device_jobs(isolated_steps_per_s: Mapping[str, float]) -> tuple[dict[str, DeviceJob], list[str]]:
    """Device-aware jobs from one device's isolated throughputs (steps/s), and the assumptions made.

    A job type canary has no profile of gets ``HOST_FRACTION_UNKNOWN`` of its isolated step as
    host time, and the assumption is returned so the caller can say it."""
    jobs: dict[str, DeviceJob] = {}
    assumptions: list[str] = []
    for name, tput in sorted(isolated_steps_per_s.items()):
        step_ms = 1000.0 / tput
        known = host_ms_of(name)
        if known is None:
            host, basis = HOST_FRACTION_UNKNOWN * step_ms, f"unknown job: host = {HOST_FRACTION_UNKNOWN:g} x step"
            assumptions.append(f"{name}: no profile; host time assumed {HOST_FRACTION_UNKNOWN:g} of its step")
        else:
            host, basis = known
        gpu = max(step_ms - host, MIN_GPU_FRACTION * step_ms)
        jobs[name] = DeviceJob(name, step_ms, step_ms - gpu, gpu, basis)
    return jobs, assumptions


def predict_slowdowns(
    params: PairModelParams,
    step_a_ms: np.ndarray,
    host_a_ms: np.ndarray,
    step_b_ms: np.ndarray,
    host_b_ms: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted slowdowns (isolated/colocated − 1, as fractions) of A and B, vectorised over pairs."""
    ga, gb = step_a_ms - host_a_ms, step_b_ms - host_b_ms
    ha = host_a_ms * (1.0 + params.host_contention * host_b_ms / step_b_ms)
    hb = host_b_ms * (1.0 + params.host_contention * host_a_ms / step_a_ms)
    a = np.minimum(ga, params.timeslice_ms)
    b = np.minimum(gb, params.timeslice_ms)
    switch = 2.0 * params.context_switch_us / 1000.0
    host_a, host_b = ha * a / ga, hb * b / gb
    gpu_a = a + (1.0 - params.overlap) * b + switch
    gpu_b = b + (1.0 - params.overlap) * a + switch
    # Host phases that overlap each other (independent CPUs) vs ones that serialize (one CPU set).
    serial = np.maximum(0.0, host_a - b) + np.maximum(0.0, host_b - a)
    cycles = np.maximum(a + host_a, b + host_b)
    s = params.host_serialization
    round_a = s * (gpu_a + serial) + (1.0 - s) * np.maximum(cycles, gpu_a)
    round_b = s * (gpu_b + serial) + (1.0 - s) * np.maximum(cycles, gpu_b)
    return round_a * ga / (a * step_a_ms) - 1.0, round_b * gb / (b * step_b_ms) - 1.0


def predict_pairs(
    params: PairModelParams, jobs: Mapping[str, DeviceJob], pairs: Sequence[tuple[str, str]]
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted slowdowns in percent of each pair's (A, B)."""
    sa = np.array([jobs[a].step_ms for a, _ in pairs])
    ha = np.array([jobs[a].host_ms for a, _ in pairs])
    sb = np.array([jobs[b].step_ms for _, b in pairs])
    hb = np.array([jobs[b].host_ms for _, b in pairs])
    pa, pb = predict_slowdowns(params, sa, ha, sb, hb)
    return pa * 100.0, pb * 100.0


def family(job: str) -> str:
    """``"ResNet-50 (batch size 16)"`` → ``"ResNet-50"``."""
    return re.split(r" \(", job, maxsplit=1)[0]


def log_error(predicted_pct: np.ndarray, measured_pct: np.ndarray) -> np.ndarray:
    """|log((1 + predicted)/(1 + measured))|: the error of the predicted throughput ratio."""
    out: np.ndarray = np.abs(np.log1p(np.maximum(predicted_pct, -99.0) / 100.0) - np.log1p(measured_pct / 100.0))
    return out

