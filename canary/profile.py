"""What a workload needs and does: its envelope (``WorkloadProfile``).

Numbers carry their source (``declared`` by a person, ``cubin`` read from a binary, ``profiled``
from a recorded run, ``observed`` from a live device, ``catalog``, ``simulated``), so a
certificate can say how far to trust them. ``None`` always means *unknown*, never zero.
"""

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from canary._model import Model, load_document
from canary.units import Bytes

WorkloadClass = Literal["online-inference", "batch", "training"]
NumberSource = Literal["declared", "cubin", "profiled", "observed", "catalog", "simulated", "policy"]
Fraction = float


class MemoryEnvelope(Model):
    """Device memory the workload holds. ``reserved`` is taken at start (weights, KV-cache pool);
    ``peak`` is the most it will ever hold; ``reclaimable`` is what it can give back (a cache it can
    shrink) within ``reclaim_deadline_ms`` (``None``: it cannot promise a deadline, so nothing counts
    as reclaimable for a candidate that needs memory now)."""

    reserved_bytes: Bytes
    peak_bytes: Bytes
    reclaimable_bytes: Bytes = 0
    reclaim_deadline_ms: float | None = Field(default=None, ge=0)
    acquire_deadline_ms: float | None = Field(
        default=None,
        ge=0,
        description="as a candidate: how long it may wait at start for residents to give memory back; "
        "None = it needs its memory at once",
    )
    source: NumberSource = "declared"

    @model_validator(mode="after")
    def _consistent(self) -> "MemoryEnvelope":
        if self.peak_bytes < self.reserved_bytes:
            raise ValueError("peak_bytes is smaller than reserved_bytes; peak is the most the workload ever holds")
        if self.reclaimable_bytes > self.peak_bytes:
            raise ValueError("reclaimable_bytes exceeds peak_bytes")
        return self


class KernelSpec(Model):
    """One kernel's static resources, as ``nvcc -Xptxas -v``/``cuobjdump -res-usage`` report them.

    ``static_shared_bytes`` is what ptxas reports (without the 1 KiB per-block system reserve that
    the occupancy rules add themselves)."""

    name: str = Field(min_length=1)
    registers_per_thread: int = Field(ge=0, le=255)
    threads_per_block: int = Field(ge=1, le=1024)
    static_shared_bytes: Bytes = 0
    dynamic_shared_bytes: Bytes = 0
    grid_blocks: int | None = Field(default=None, ge=1)
    persistent: bool = False
    gpu_time_share: Fraction | None = Field(default=None, ge=0, le=1)
    barriers: int = Field(default=1, ge=0, le=16)
    dram_intensity: Fraction | None = Field(default=None, ge=0, le=1)
    source: NumberSource = "declared"
    note: str | None = None


class Phase(Model):
    """A stretch of the workload's life with steady behaviour (prefill burst, idle gap, epoch)."""

    name: str = Field(min_length=1)
    duration_s: float = Field(gt=0)
    duty_cycle: Fraction = Field(ge=0, le=1)
    dram_intensity: Fraction = Field(default=0.0, ge=0, le=1)
    sm_share: Fraction | None = Field(default=None, ge=0, le=1)
    memory_bytes: Bytes | None = None


class SharingModes(Model):
    """How the workload accepts to share a device. ``mps_active_thread_pct=None``: no MPS."""

    timeslice: bool = True
    streams: bool = False
    mps_active_thread_pct: int | None = Field(default=None, ge=1, le=100)
    mig_profiles: tuple[str, ...] = ()
    green_sms: int | None = Field(default=None, ge=1)


class Slo(Model):
    latency_p99_ms: float | None = Field(default=None, gt=0)
    throughput_min_rps: float | None = Field(default=None, gt=0)
    max_slowdown_pct: float | None = Field(default=None, ge=0, le=1000)


class CanarySpec(Model):
    """How to run this workload as a canary and how to watch it as a resident.

    Commands come only from profiles on disk, never from a request body."""

    executor: Literal["sim", "process", "cuda"] = "sim"
    command: tuple[str, ...] | None = None
    workdir: str | None = None
    endpoint: str | None = None
    request_path: str = "/"
    request_method: Literal["GET", "POST"] = "GET"
    request_body: str | None = None
    ready_path: str | None = None
    startup_timeout_s: float = Field(default=30.0, gt=0, le=600)
    monitor: Literal["sim", "http", "prometheus"] = "sim"
    metrics_url: str | None = None
    latency_metric: str | None = None
    cubin: str | None = None
    kernel: str | None = None
    grid_blocks: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _complete(self) -> "CanarySpec":
        if self.executor == "process" and not self.command:
            raise ValueError("executor 'process' needs a command")
        if self.executor == "cuda" and not (self.cubin and self.kernel):
            raise ValueError("executor 'cuda' needs cubin and kernel")
        if self.monitor == "http" and not self.endpoint:
            raise ValueError("monitor 'http' needs an endpoint")
        if self.monitor == "prometheus" and not (self.metrics_url and self.latency_metric):
            raise ValueError("monitor 'prometheus' needs metrics_url and latency_metric")
        return self


class Provenance(Model):
    source: NumberSource = "declared"
    tool: str | None = None
    created: dt.datetime | None = None
    notes: str | None = None
    coverage: Fraction | None = Field(default=None, ge=0, le=1)
    shape_families_covered: tuple[str, ...] = ()


class WorkloadProfile(Model):
    """The envelope of one workload version on one shape family."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1, description="digest or semver of the exact binary/image/model")
    shape_family: str = Field(default="any", min_length=1)
    workload_class: WorkloadClass = "batch"
    latency_critical: bool = False
    memory: MemoryEnvelope
    kernels: tuple[KernelSpec, ...] = ()
    phases: tuple[Phase, ...] = ()
    duty_cycle: Fraction | None = Field(default=None, ge=0, le=1)
    dram_intensity: Fraction | None = Field(default=None, ge=0, le=1)
    sharing: SharingModes = SharingModes()
    slo: Slo | None = None
    canary: CanarySpec | None = None
    provenance: Provenance = Provenance()

    @model_validator(mode="after")
    def _unique_kernels(self) -> "WorkloadProfile":
        names = [k.name for k in self.kernels]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"kernel names must be unique; repeated: {', '.join(dupes)}")
        return self

    @property
    def key(self) -> tuple[str, str]:
        return (self.version, self.shape_family)

    @property
    def has_compute_profile(self) -> bool:
        """Whether kernel resources are declared (else SM co-residency is unknown)."""
        return bool(self.kernels)

    def effective_duty_cycle(self) -> float | None:
        """The declared duty cycle, else the time-weighted mean of the phases, else ``None``."""
        if self.duty_cycle is not None:
            return self.duty_cycle
        if self.phases:
            total = sum(p.duration_s for p in self.phases)
            return sum(p.duty_cycle * p.duration_s for p in self.phases) / total
        return None

    def effective_dram_intensity(self) -> float | None:
        if self.dram_intensity is not None:
            return self.dram_intensity
        if self.phases:
            busy = sum(p.duration_s * p.duty_cycle for p in self.phases)
            if busy == 0:
                return 0.0
            return sum(p.dram_intensity * p.duration_s * p.duty_cycle for p in self.phases) / busy
        return None


def load_profile(path: str | Path) -> WorkloadProfile:
    """Load a profile file (YAML or JSON); ``InputError`` names file, field and problem."""
    return load_document(WorkloadProfile, path)
