"""What a workload needs and does: its envelope (``WorkloadProfile``).

Numbers carry their source (``declared`` by a person, ``cubin`` read from a binary, ``profiled``
from a recorded run, ``observed`` from a live device, ``catalog``, ``simulated``), so a
certificate can say how far to trust them. ``None`` always means *unknown*, never zero.
"""

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from canary._model import KernelName, Model, Name, load_document, shorten
from canary.units import Bytes, parse_bytes

WorkloadClass = Literal["online-inference", "batch", "training"]
NumberSource = Literal["declared", "cubin", "profiled", "observed", "catalog", "simulated", "policy"]
Fraction = float

#: The least GPU memory a workload's memory field may hold when not 0: a CUDA or ROCm context alone
#: takes hundreds of MiB, so a value under 1 MiB is a size written without its unit (``5`` for ``5Gi``).
MIN_WORKLOAD_MEMORY_BYTES = 1024**2


def _plausible_workload_memory(value: Any, info: ValidationInfo) -> Any:
    """Refuse a document's non-zero GPU memory size under ``MIN_WORKLOAD_MEMORY_BYTES`` (the unit left
    off); pass anything else on to ``parse_bytes``, which reads it (or says what is wrong with it).

    Only documents — files and request bodies, validated in JSON mode — are checked: a size a program
    computes (a recorded run, a trace) is what was measured, and there a small number is not a typo."""
    if info.mode != "json":
        return value
    try:
        number = parse_bytes(value)
    except ValueError:
        return value
    if 0 < number < MIN_WORKLOAD_MEMORY_BYTES:
        bare = isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
        hint = f"; did you mean {number}Gi?" if bare else ""
        raise ValueError(
            f"{value!r} is less than 1 MiB, too little GPU memory for any workload: check the unit "
            f"({number} bytes{hint})"
        )
    return value


# The JSON Schema of documents (canary._model.document_json_schema) reads the bound from here.
_plausible_workload_memory.least_nonzero_bytes = MIN_WORKLOAD_MEMORY_BYTES  # type: ignore[attr-defined]

WorkloadMemoryBytes = Annotated[int, BeforeValidator(parse_bytes), BeforeValidator(_plausible_workload_memory)]
"""A workload's GPU memory size (``Bytes``): in a document, 0 or at least 1 MiB. (Before-validators run
last-first: the plausibility check sees the value as written, then ``parse_bytes`` reads it.)"""


def known_mig_profile_names() -> dict[str, str]:
    """Every MIG profile spelling some catalog device accepts (lower case: a name, or an lgip id) → the
    profile's name."""
    from canary.catalog import all_devices

    known: dict[str, str] = {}
    for spec in all_devices():
        for profile in spec.mig_profiles:
            known.setdefault(profile.name.lower(), profile.name)
            known.setdefault(str(profile.profile_id), profile.name)
    return known


class MemoryEnvelope(Model):
    """Device memory the workload holds. ``reserved`` is taken at start (weights, KV-cache pool);
    ``peak`` is the most it will ever hold; ``reclaimable`` is what it can give back (a cache it can
    shrink) within ``reclaim_deadline_ms`` (``None``: it cannot promise a deadline, so nothing counts
    as reclaimable for a candidate that needs memory now)."""

    reserved_bytes: WorkloadMemoryBytes = Field(
        description="device memory taken at start and held (weights, KV-cache pool); bytes or a size such as 40Gi"
    )
    peak_bytes: WorkloadMemoryBytes = Field(
        description="the most device memory the workload ever holds (reserved + activations, graphs); at least "
        "reserved_bytes"
    )
    reclaimable_bytes: WorkloadMemoryBytes = Field(
        default=0,
        description="memory it can give back on request (a cache it can shrink) within reclaim_deadline_ms; at most "
        "peak_bytes",
    )
    reclaim_deadline_ms: float | None = Field(
        default=None,
        ge=0,
        description="how fast it gives reclaimable memory back; None = no promise, so nothing counts as reclaimable",
    )
    acquire_deadline_ms: float | None = Field(
        default=None,
        ge=0,
        description="as a candidate: how long it may wait at start for residents to give memory back; "
        "None = it needs its memory at once",
    )
    source: NumberSource = Field(default="declared", description="where these numbers come from")

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

    name: KernelName = Field(min_length=1, description="the kernel's name, unique within the profile")
    registers_per_thread: int = Field(ge=0, le=255, description="registers per thread, as ptxas reports them")
    threads_per_block: int = Field(ge=1, le=1024, description="threads per block at launch")
    static_shared_bytes: Bytes = Field(
        default=0, description="static shared memory per block, as ptxas reports it (without the 1 KiB system reserve); "
        "absent = 0, as ptxas omits 'bytes smem' for a kernel that has none"
    )
    dynamic_shared_bytes: Bytes = Field(default=0, description="dynamic shared memory per block requested at launch")
    grid_blocks: int | None = Field(default=None, ge=1, description="blocks per launch; None = unknown")
    persistent: bool = Field(
        default=False, description="true for a persistent kernel whose blocks stay resident on their SMs"
    )
    gpu_time_share: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of the workload's GPU time spent in this kernel; None = unknown"
    )
    barriers: int = Field(default=1, ge=0, le=16, description="named barriers per block (ptxas 'barriers')")
    dram_intensity: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of peak DRAM bandwidth the kernel uses while it runs; None = unknown"
    )
    source: NumberSource = Field(default="declared", description="where these numbers come from")
    note: str | None = Field(default=None, description="free text, e.g. the ptxas line the numbers were read from")


class Phase(Model):
    """A stretch of the workload's life with steady behaviour (prefill burst, idle gap, epoch)."""

    name: Name = Field(min_length=1, description="the phase's name (prefill, idle, epoch …)")
    duration_s: float = Field(gt=0, description="how long the phase lasts, in seconds")
    duty_cycle: Fraction = Field(ge=0, le=1, description="fraction of the phase the GPU is busy with this workload")
    dram_intensity: Fraction = Field(
        default=0.0, ge=0, le=1, description="fraction of peak DRAM bandwidth used while busy in this phase"
    )
    sm_share: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of the SMs the phase occupies; None = unknown"
    )
    memory_bytes: WorkloadMemoryBytes | None = Field(
        default=None, description="device memory held during the phase; bytes or a size such as 18Gi; None = unknown"
    )


class SharingModes(Model):
    """How the workload accepts to share a device. ``mps_active_thread_pct=None``: no MPS."""

    timeslice: bool = Field(default=True, description="accepts time-slicing with other processes' contexts")
    streams: bool = Field(default=False, description="accepts sharing one process's context on separate streams")
    mps_active_thread_pct: int | None = Field(
        default=None, ge=1, le=100, description="accepts MPS with this active-thread percentage; None = no MPS"
    )
    mig_profiles: tuple[Name, ...] = Field(
        default=(), description="MIG GPU-instance profiles it can run in (e.g. 3g.40gb, or an lgip id), each one "
        "some catalog device has; empty = no MIG"
    )
    green_sms: int | None = Field(
        default=None, ge=1, description="accepts a green-context partition of this many SMs; None = no green context"
    )

    @field_validator("mig_profiles")
    @classmethod
    def _catalogued_mig_profiles(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """In a document, each name must be a MIG profile of some catalog device (a name such as
        ``3g.40gb``, ``MIG 3g.40gb``, or an lgip id): a typo (``1g.10g``) matched no device's profile and
        silently narrowed what the workload accepts. Which device has it is stage 1's question."""
        if info.mode != "json" or not value:
            return value
        known = known_mig_profile_names()
        for name in value:
            wanted = name.strip().lower()
            if wanted.startswith("mig "):
                wanted = wanted[4:].strip()
            if wanted not in known:
                import difflib  # only for the suggestion

                names = sorted(set(known.values()))
                close = difflib.get_close_matches(wanted, names, n=3)
                hint = f"; closest: {', '.join(close)}" if close else f"; catalog profiles: {', '.join(names)}"
                raise ValueError(f"{shorten(name)!r} is not a MIG profile of any catalog device{hint}")
        return value


class Slo(Model):
    """The workload's service-level objective as a resident: what a probe must not breach."""

    latency_p99_ms: float | None = Field(
        default=None, gt=0, description="99th-percentile request latency it must stay under, in ms; None = none"
    )
    throughput_min_rps: float | None = Field(
        default=None, gt=0, description="lowest throughput it must keep, in requests per second; None = none"
    )
    max_slowdown_pct: float | None = Field(
        default=None, ge=0, le=1000, description="largest slowdown it tolerates, in percent (10 = 10% slower); "
        "None = the policy's bound"
    )


def url_problem(url: str) -> str | None:
    """Why ``url`` may not appear in a profile — not a URL, not ``http``/``https`` with a host, user-info
    (credentials), port 0 — or ``None`` when its form is acceptable. Which hosts a probe may contact is
    the policy's ``probe_hosts``, checked at admission (``canary.probe.factory``)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return f"{shorten(url)!r} holds whitespace or a control character"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shorten(url)!r} is not an http(s) URL with a host"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "a URL in a profile may not carry credentials (user-info before '@')"
    if port == 0:
        return f"port 0 in {shorten(url)!r}"
    return None


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a request path (it must start with '/', without whitespace or backslash)."""
    if not path.startswith("/") or "\\" in path or any(ch.isspace() or ord(ch) < 32 for ch in path):
        return f"{shorten(path)!r} must be a path starting with '/', without whitespace, control characters or '\\'"
    return None


class CanarySpec(Model):
    """How to run this workload as a canary and how to watch it as a resident.

    Commands come only from profiles on disk, never from a request body."""

    executor: Literal["sim", "process", "cuda"] = Field(
        default="sim", description="how the canary is started: simulated, as a process (command), or as CUDA "
        "kernels from a cubin"
    )
    command: tuple[str, ...] | None = Field(
        default=None, description="argv of the candidate process (executor 'process'); its executable must be "
        "allowed by the policy's candidate_commands"
    )
    workdir: str | None = Field(default=None, description="working directory of the candidate process")
    endpoint: str | None = Field(
        default=None, description="base URL the canary's requests (as candidate) or timed requests (as resident, "
        "monitor 'http') go to; its host must be in the policy's probe_hosts"
    )
    request_path: str = Field(default="/", description="path of each request sent to the endpoint")
    request_method: Literal["GET", "POST"] = Field(default="GET", description="HTTP method of each request")
    request_body: str | None = Field(default=None, description="body of each POST request; None = empty")
    ready_path: str | None = Field(
        default=None, description="path polled until it answers 2xx before requests start; None = until the endpoint accepts "
        "connections"
    )
    startup_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="how long the candidate may take to become ready, in seconds"
    )
    monitor: Literal["sim", "http", "prometheus"] = Field(
        default="sim", description="how the workload is measured as a resident: simulated, timed HTTP requests, "
        "or a Prometheus latency histogram"
    )
    metrics_url: str | None = Field(
        default=None, description="Prometheus endpoint (monitor 'prometheus'); its host must be in probe_hosts"
    )
    latency_metric: Name | None = Field(
        default=None, description="name of the latency histogram at metrics_url (monitor 'prometheus')"
    )
    cubin: str | None = Field(
        default=None, description="cubin file the cuda executor loads; inside one of the policy's candidate_cubin_dirs"
    )
    kernel: KernelName | None = Field(default=None, description="kernel in the cubin the cuda executor launches")
    grid_blocks: int | None = Field(
        default=None, ge=1, description="blocks per launch for the cuda executor; None = the kernel's grid_blocks"
    )

    @field_validator("endpoint", "metrics_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        """Whatever the executor and monitor, a URL a profile carries is http(s) without credentials
        (docs/security.md): a profile is refused when it is loaded, not when the URL is first used."""
        if value is not None:
            problem = url_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("request_path", "ready_path")
    @classmethod
    def _request_path(cls, value: str | None) -> str | None:
        if value is not None:
            problem = path_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

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
    """Where the profile came from and how much of the workload it covers."""

    source: NumberSource = Field(default="declared", description="where the profile's numbers come from")
    tool: Name | None = Field(default=None, description="the tool that wrote the profile, with its version")
    created: dt.datetime | None = Field(default=None, description="when the profile was written (ISO 8601)")
    notes: str | None = Field(default=None, description="free text")
    coverage: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of the workload's GPU time the listed kernels account for"
    )
    shape_families_covered: tuple[Name, ...] = Field(
        default=(), description="shape families the numbers were measured on"
    )


class WorkloadProfile(Model):
    """The envelope of one workload version on one shape family."""

    name: Name = Field(min_length=1, description="the workload's name (llm-decode)")
    version: Name = Field(min_length=1, description="digest or semver of the exact binary/image/model")
    shape_family: Name = Field(
        default="any", min_length=1, description="the class of input shapes the profile covers (bs<=32,seq<=4096)"
    )
    workload_class: WorkloadClass = Field(
        default="batch", description="which of the policy's risk budgets applies when it is the resident"
    )
    latency_critical: bool = Field(
        default=False, description="its kernels must run concurrently with a resident's (no waiting for a time slice)"
    )
    memory: MemoryEnvelope = Field(description="the device memory it holds")
    kernels: tuple[KernelSpec, ...] = Field(
        default=(), description="its kernels' static resources; empty = compute dimensions unknown"
    )
    phases: tuple[Phase, ...] = Field(default=(), description="stretches of steady behaviour, in order")
    duty_cycle: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of time the GPU is busy with it; None = from phases, or unknown"
    )
    dram_intensity: Fraction | None = Field(
        default=None, ge=0, le=1, description="fraction of peak DRAM bandwidth used while busy; None = from phases, "
        "or unknown"
    )
    sharing: SharingModes = Field(default=SharingModes(), description="the sharing modes it accepts")
    slo: Slo | None = Field(default=None, description="its service-level objective as a resident; None = none stated")
    canary: CanarySpec | None = Field(
        default=None, description="how to run it as a canary and watch it as a resident; None = the simulated executor and "
        "monitor"
    )
    provenance: Provenance = Field(default=Provenance(), description="where the profile came from")

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
