"""What a device looks like right now: ``DeviceSnapshot``.

Read once, in one batch, then computed on while frozen. Every field may be unknown (``None``):
a backend that cannot read a value leaves it ``None`` with the reason in ``unknown_reasons``.
"""

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from canary._model import (
    Model,
    Name,
    name_problem,
    read_document,
    read_text_limited,
    shorten,
    validate_document,
)
from canary.errors import InputError, printable
from canary.profile import WorkloadProfile
from canary.units import Bytes

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec

#: Longest ``unknown_reasons`` text: a sentence, not a document.
MAX_SNAPSHOT_REASON_CHARS = 1024


def _one_line_reason(value: str) -> str:
    problem = name_problem(value, max_chars=MAX_SNAPSHOT_REASON_CHARS)
    if problem is not None:
        raise ValueError(problem)
    return value


# A snapshot's identifiers (uuid, versions, names) are printed into tables, certificate headers and
# messages one value a line: a newline in a uuid would print a line of its own (``ADMIT`` under a
# REJECT) and a certificate would keep it. They are ``Name``s: one printable line, refused at load
# naming the field. A backend's reason for an unknown value is one printable line too, if longer.
SnapshotReason = Annotated[str, AfterValidator(_one_line_reason)]

ComputeMode = Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"]
SnapshotSource = Literal["simulated", "file", "nvml", "cuda", "rocm", "dcgm-exporter"]


class Measured(Model):
    """A telemetry value with when and how it was measured (window averages, as NVML/DCGM report)."""

    value: float = Field(description="the measured value, in the unit the field's name gives")
    observed_at: dt.datetime | None = Field(default=None, description="when it was measured (ISO 8601); None = unknown")
    window_s: float | None = Field(
        default=None, gt=0, description="the averaging window the value covers, in seconds; None = unknown"
    )
    source: Name = Field(default="declared", description="where the value comes from (nvml, dcgm-exporter, declared …)")


class Telemetry(Model):
    """What the device reports about its recent activity; context for a reader, never a capacity."""

    utilization_gpu_pct: Measured | None = Field(
        default=None, description="percent of time a kernel ran (NVML utilization.gpu); not free capacity"
    )
    sm_active_pct: Measured | None = Field(
        default=None, description="percent of SM cycles with a warp resident (DCGM PROF_SM_ACTIVE)"
    )
    sm_occupancy_pct: Measured | None = Field(
        default=None, description="resident warps as percent of the maximum (DCGM PROF_SM_OCCUPANCY)"
    )
    dram_active_pct: Measured | None = Field(
        default=None, description="percent of cycles the memory interface is busy (DCGM PROF_DRAM_ACTIVE)"
    )
    power_w: Measured | None = Field(default=None, description="power draw in watts")
    power_limit_w: Measured | None = Field(default=None, description="enforced power limit in watts")
    temperature_c: Measured | None = Field(default=None, description="GPU temperature in degrees Celsius")
    clock_event_reasons: tuple[Name, ...] | None = Field(
        default=None, description="why clocks are held down (NVML clock event reasons); None = not reported"
    )


class MigInstance(Model):
    """A GPU instance that exists on the device; ``start``/``size`` in memory-slice units."""

    profile: Name = Field(description="the GPU-instance profile (3g.40gb, MIG 1g.10gb …)")
    start: int = Field(ge=0, description="first memory slice of the instance")
    size: int = Field(ge=1, description="memory slices it spans (its profile's size)")
    gpu_instance_id: int | None = Field(default=None, description="NVML's GPU instance id; None = unknown")
    holder: Name | None = Field(default=None, description="the resident running in it; None = free or unknown")


class MigState(Model):
    """MIG mode and the GPU instances that exist."""

    enabled: bool | None = Field(default=None, description="whether MIG mode is on; None = unknown")
    instances: tuple[MigInstance, ...] = Field(default=(), description="the GPU instances that exist")


class MpsState(Model):
    """The MPS control daemon's state for the device."""

    running: bool | None = Field(default=None, description="whether an MPS server runs for the device; None = unknown")
    clients: int | None = Field(default=None, ge=0, description="MPS clients connected now; None = unknown")
    max_clients: int | None = Field(default=None, ge=1, description="the most clients the server accepts")
    pinned_memory_limit_bytes: Bytes | None = Field(
        default=None, description="per-client device memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT); bytes or a "
        "size such as 40G; None = none or unknown"
    )
    default_active_thread_pct: int | None = Field(
        default=None, ge=1, le=100, description="the server's default active-thread percentage; None = not set or unknown"
    )


class DevicePartition(Model):
    """AMD's partition modes for the logical device the snapshot describes (amdsmi
    ``amdsmi_get_gpu_compute_partition`` / ``amdsmi_get_gpu_memory_partition``): ``SPX``…``CPX`` and
    ``NPS1``…``NPS8``. ``None`` = not reported. NVIDIA devices leave both ``None`` (MIG is separate)."""

    compute: str | None = Field(
        default=None, pattern=r"^(SPX|DPX|TPX|QPX|CPX)$", description="compute partition mode; None = not reported"
    )
    memory: str | None = Field(
        default=None, pattern=r"^NPS[1-8]$", description="memory partition mode; None = not reported"
    )


class Resident(Model):
    """A workload already on the device: with a profile, or a bare process with observed memory."""

    name: Name = Field(min_length=1, description="the resident's name, unique within the snapshot")
    pid: int | None = Field(default=None, ge=1, description="its process id; None = unknown")
    profile: WorkloadProfile | None = Field(
        default=None, description="its workload profile (inline, or in a file a path here names, relative to the "
        "snapshot); None = unprofiled: its compute dimensions are unknown"
    )
    observed_memory_bytes: Bytes | None = Field(
        default=None, description="device memory the process holds (NVML usedGpuMemory); bytes or a size such as "
        "18Gi; None = unknown"
    )
    mig_instance: Name | None = Field(default=None, description="the GPU instance it runs in: PROFILE or PROFILE@START")
    mps_active_thread_pct: int | None = Field(
        default=None, ge=1, le=100, description="its MPS active-thread percentage; None = not under MPS or unknown"
    )
    green_sms: int | None = Field(
        default=None, ge=1, description="SMs of its green-context partition; None = none or unknown"
    )

    @property
    def profiled(self) -> bool:
        return self.profile is not None


class DeviceSnapshot(Model):
    """One device's sharing state, read once. Fields left out are unknown, never zero.

    Cross-field rules checked when a snapshot file is loaded (exit 2 naming the field): MIG
    instances only while MIG is enabled, each of a profile the device has, of that profile's size,
    at one of its valid starts, within the device's memory slices and overlapping no other; a
    resident's ``mig_instance`` names a listed instance; no resident (nor all together) observes
    more memory than the device has; used + reserved ≤ total; green partitions ≤ the device's SMs;
    MPS clients ≤ ``max_clients`` and none while MPS is off; AMD partition modes the device has."""

    device_type: Name = Field(min_length=1, description="the GPU model as the catalog names it (h100-sxm, mi300x …)")
    uuid: Name | None = Field(default=None, description="the device's UUID (GPU-…); None = unknown")
    index: int | None = Field(default=None, ge=0, description="the device's index on its node; None = unknown")
    driver_version: Name | None = Field(default=None, description="the GPU driver version; None = unknown")
    cuda_driver_version: Name | None = Field(
        default=None, description="the CUDA version the driver supports; None = unknown"
    )
    compute_mode: ComputeMode | None = Field(
        default=None, description="NVML compute mode; EXCLUSIVE_PROCESS and PROHIBITED forbid a second context; "
        "None = unknown"
    )
    mig: MigState = Field(default=MigState(), description="MIG mode and instances")
    mps: MpsState = Field(default=MpsState(), description="the MPS server's state")
    partition: DevicePartition = Field(default=DevicePartition(), description="AMD partition modes")
    memory_total_bytes: Bytes | None = Field(
        default=None, description="device memory in all (NVML total); bytes or a size such as 80Gi; None = the "
        "catalog's"
    )
    memory_used_bytes: Bytes | None = Field(
        default=None,
        description="memory allocated by contexts, without the driver reserve (NVML v2 used); None = unknown, "
        "and then processes nobody listed cannot be ruled out",
    )
    memory_reserved_bytes: Bytes | None = Field(
        default=None, description="driver/firmware reserve (NVML nvmlMemory_v2_t.reserved); None = unknown"
    )
    memory_used_includes_reserve: bool = Field(
        default=False,
        description="true when memory_used_bytes counts the driver reserve (NVML v1 used = reserved + allocated); "
        "false (default): used is memory allocated by contexts only (NVML v2: total = reserved + used + free)",
    )
    telemetry: Telemetry = Field(default=Telemetry(), description="recent activity; context only, never capacity")
    residents: tuple[Resident, ...] = Field(default=(), description="the workloads already on the device")
    green_partitions_sms: tuple[int, ...] | None = Field(
        default=None, description="SMs held by existing green-context partitions; [] = none; None (default) = unknown"
    )
    taken_at: dt.datetime | None = Field(default=None, description="when the snapshot was read (ISO 8601)")
    source: SnapshotSource = Field(default="file", description="what produced the snapshot")
    unknown_reasons: dict[Name, SnapshotReason] = Field(
        default_factory=dict, description="field name → why the backend could not read it"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "DeviceSnapshot":
        if (
            self.memory_total_bytes is not None
            and self.memory_used_bytes is not None
            and self.memory_used_bytes > self.memory_total_bytes
        ):
            raise ValueError("memory_used_bytes exceeds memory_total_bytes")
        names = [r.name for r in self.residents]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"resident names must be unique; repeated: {', '.join(dupes)}")
        return self


def _profile_file(ref: str, base: Path, file: str, field: str) -> WorkloadProfile:
    """The profile a resident's ``profile:`` path names, relative to the snapshot's directory (``base``).

    A snapshot is untrusted data (docs/security.md): its path may point anywhere the reader can read,
    so nothing of a file is echoed unless the file has a profile's shape — a regular file holding a
    YAML/JSON mapping whose top-level keys are all profile fields. Every refusal names the snapshot
    file and ``field``."""
    target = base / ref
    shown = printable(shorten(str(target), 200))

    def refuse(problem: str) -> InputError:
        return InputError(f"profile file {shown}: {problem}", file=file, field=field)

    try:
        read_text_limited(target, what="a workload profile")
    except InputError as exc:
        # The loader's own refusals (not found, a directory, not a regular file, too large, not UTF-8)
        # say nothing of the content.
        raise refuse(exc.problem) from None
    try:
        data = read_document(target)
    except InputError:
        # A YAML error may quote the text it stopped at (a tag, a repeated key): not echoed.
        raise refuse("not a profile: not a YAML/JSON document within the loader's limits (load the file "
                     "itself as a profile to see where)") from None
    if not isinstance(data, dict):
        raise refuse(f"not a profile: the top level is not a mapping (a {type(data).__name__})")
    fields = set(WorkloadProfile.model_fields)
    strangers = sum(1 for key in data if not isinstance(key, str) or key not in fields)
    if strangers:
        raise refuse(f"not a profile: {strangers} of its {len(data)} top-level key(s) are not workload-profile "
                     "fields (not shown: the file is not a profile)")
    try:
        return validate_document(WorkloadProfile, data, file=str(target))
    except InputError as exc:
        where = f"field '{exc.field}': " if exc.field else ""
        raise refuse(f"{where}{exc.problem}") from None


def _resolve_resident_profiles(data: Any, base: Path, file: str) -> Any:
    """A resident's ``profile`` may be a path (relative to the snapshot file) instead of inline."""
    if not isinstance(data, dict) or not isinstance(data.get("residents"), list):
        return data
    residents = []
    for i, resident in enumerate(data["residents"]):
        if isinstance(resident, dict) and isinstance(resident.get("profile"), str):
            profile = _profile_file(resident["profile"], base, file, f"residents[{i}].profile")
            resident = {**resident, "profile": profile.model_dump(mode="json")}
        residents.append(resident)
    return {**data, "residents": residents}


def load_snapshot(path: str | Path) -> DeviceSnapshot:
    """Load a snapshot file; residents' ``profile:`` entries may name profile files."""
    file = str(path)
    data = read_document(path)
    data = _resolve_resident_profiles(data, Path(path).resolve().parent, file)
    return validate_document(DeviceSnapshot, data, file=file)


def _instance_matches(ref: str, instance: MigInstance) -> bool:
    """``PROFILE``, ``PROFILE@START`` (snapshot files) or ``gi:N`` (NVML's GPU instance id)."""
    if ref.startswith("gi:"):
        return instance.gpu_instance_id is not None and ref[3:].strip() == str(instance.gpu_instance_id)
    profile, _, start = ref.partition("@")
    if profile.strip().lower().removeprefix("mig ").strip() != instance.profile.lower().removeprefix("mig ").strip():
        return False
    return not start or start.strip() == str(instance.start)


def validate_snapshot(snapshot: DeviceSnapshot, spec: "DeviceSpec", *, file: str | None = None) -> None:
    """Reject a snapshot that no device could produce; ``InputError`` names the file, field and problem.

    Checked: MIG instances listed while MIG is disabled; a MIG profile the device does not have; an
    instance whose size is not its profile's or whose start is not a valid placement; more instances
    of a profile than its ``max_instances``; an instance past the last memory slice; overlapping
    instances; a resident in an instance that does not exist; a resident (or all of them) observing more memory than the card has; used + reserved
    above the total; more green-context SMs than the device has; more MPS clients than its limit.
    Checks that need catalog numbers are skipped for a device the catalog lacks."""

    def bad(field: str, problem: str) -> InputError:
        return InputError(problem, file=file, field=field)

    instances = snapshot.mig.instances
    if instances and snapshot.mig.enabled is False:
        raise bad("mig.instances", f"{len(instances)} MIG instance(s) listed while mig.enabled is false")
    slices = spec.mig_memory_slices if spec.catalogued else None
    for i, inst in enumerate(instances):
        where = f"mig.instances[{i}]"
        if slices is not None and inst.start + inst.size > slices:
            raise bad(where, f"instance [{inst.start},{inst.start + inst.size}) runs past the last memory slice "
                             f"({spec.name} has {slices}: 0..{slices - 1})")
        if spec.catalogued:
            if not spec.mig_profiles:
                raise bad(f"{where}.profile", f"{spec.name} has no MIG, but a {inst.profile} instance is listed")
            try:
                profile = spec.mig_profile(inst.profile)
            except InputError as exc:
                raise bad(f"{where}.profile", exc.problem) from None
            if inst.size != profile.memory_slices:
                raise bad(f"{where}.size", f"{profile.name} takes {profile.memory_slices} memory slice(s) on "
                                           f"{spec.name}, not {inst.size}")
            if inst.start not in {p.start for p in profile.placements}:
                starts = ", ".join(str(p.start) for p in profile.placements)
                raise bad(f"{where}.start", f"{profile.name} cannot start at slice {inst.start} on {spec.name} "
                                            f"(valid starts: {starts})")
            # Earlier instances were checked already, so their profiles resolve.
            same = [j for j in range(i + 1) if spec.mig_profile(instances[j].profile).name == profile.name]
            if len(same) > profile.max_instances:
                raise bad(f"{where}.profile", f"{len(same)} {profile.name} instances listed (mig.instances"
                                              f"{same}), but {spec.name} allows at most {profile.max_instances} "
                                              f"(max_instances; catalog: {profile.source('max_instances')})")
        for j in range(i):
            other = instances[j]
            if inst.start < other.start + other.size and other.start < inst.start + inst.size:
                raise bad(where, f"slices [{inst.start},{inst.start + inst.size}) overlap mig.instances[{j}] "
                                 f"[{other.start},{other.start + other.size})")
    total = snapshot.memory_total_bytes
    if total is None and spec.catalogued:
        total = spec.memory_bytes
    observed_sum = 0
    for i, resident in enumerate(snapshot.residents):
        where = f"residents[{i}]"
        if resident.mig_instance is not None:
            if snapshot.mig.enabled is False:
                raise bad(f"{where}.mig_instance", f"resident {resident.name} is in MIG instance "
                                                   f"{resident.mig_instance!r} but mig.enabled is false")
            if snapshot.mig.enabled and "mig.instances" not in snapshot.unknown_reasons and not any(
                _instance_matches(resident.mig_instance, inst) for inst in instances
            ):
                raise bad(f"{where}.mig_instance", f"resident {resident.name} is in MIG instance "
                                                   f"{resident.mig_instance!r}, which mig.instances does not list")
        observed = resident.observed_memory_bytes
        if observed is not None:
            observed_sum += observed
            if total is not None and observed > total:
                raise bad(f"{where}.observed_memory_bytes",
                          f"resident {resident.name} observes {observed} bytes, more than the device's {total}")
    if total is not None and observed_sum > total:
        raise bad("residents", f"the residents observe {observed_sum} bytes together, more than the device's {total}")
    if total is not None and snapshot.memory_used_bytes is not None and not snapshot.memory_used_includes_reserve:
        reserved = snapshot.memory_reserved_bytes or 0
        if snapshot.memory_used_bytes + reserved > total:
            raise bad("memory_used_bytes", f"used {snapshot.memory_used_bytes} + reserved {reserved} bytes exceed the "
                                           f"total {total}")
    if spec.catalogued and spec.vendor == "nvidia" and snapshot.green_partitions_sms is not None:
        held = sum(snapshot.green_partitions_sms)
        if held > spec.sm_count:
            raise bad("green_partitions_sms", f"{held} SMs in green-context partitions, but {spec.name} has "
                                              f"{spec.sm_count}")
    part = snapshot.partition
    if spec.catalogued and (part.compute is not None or part.memory is not None):
        for kind, mode in (("compute", part.compute), ("memory", part.memory)):
            if mode is not None and spec.partitions_of(kind, mode) is None:
                have = ", ".join(name for name, _ in (spec.compute_partitions if kind == "compute"
                                                       else spec.memory_partitions)) or "none"
                raise bad(f"partition.{kind}", f"{spec.name} has no {kind} partition mode {mode} (modes: {have})")
        parts = spec.partitions_of("memory", part.memory) if part.memory is not None else None
        if parts is not None and snapshot.memory_total_bytes is not None \
                and snapshot.memory_total_bytes > spec.memory_bytes // parts:
            raise bad("memory_total_bytes", f"{part.memory} splits {spec.name}'s {spec.memory_bytes} bytes into "
                                            f"{parts}: a partition holds at most {spec.memory_bytes // parts}, "
                                            f"not {snapshot.memory_total_bytes}")
    mps = snapshot.mps
    if mps.clients is not None and mps.max_clients is not None and mps.clients > mps.max_clients:
        raise bad("mps.clients", f"{mps.clients} MPS clients connected, above max_clients {mps.max_clients}")
    if mps.running is False and mps.clients:
        raise bad("mps.clients", f"{mps.clients} MPS clients listed while mps.running is false")
