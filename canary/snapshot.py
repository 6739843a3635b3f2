"""What a device looks like right now: ``DeviceSnapshot``.

Read once, in one batch, then computed on while frozen. Every field may be unknown (``None``):
a backend that cannot read a value leaves it ``None`` with the reason in ``unknown_reasons``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from canary._model import Model, read_document, validate_document
from canary.errors import InputError
from canary.profile import WorkloadProfile, load_profile
from canary.units import Bytes

ComputeMode = Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"]
SnapshotSource = Literal["simulated", "file", "nvml", "cuda", "rocm", "dcgm-exporter"]


class Measured(Model):
    """A telemetry value with when and how it was measured (window averages, as NVML/DCGM report)."""

    value: float
    observed_at: dt.datetime | None = None
    window_s: float | None = Field(default=None, gt=0)
    source: str = "declared"


class Telemetry(Model):
    utilization_gpu_pct: Measured | None = None
    sm_active_pct: Measured | None = None
    sm_occupancy_pct: Measured | None = None
    dram_active_pct: Measured | None = None
    power_w: Measured | None = None
    power_limit_w: Measured | None = None
    temperature_c: Measured | None = None
    clock_event_reasons: tuple[str, ...] | None = None


class MigInstance(Model):
    """A GPU instance that exists on the device; ``start``/``size`` in memory-slice units."""

    profile: str
    start: int = Field(ge=0)
    size: int = Field(ge=1)
    gpu_instance_id: int | None = None
    holder: str | None = None


class MigState(Model):
    enabled: bool | None = None
    instances: tuple[MigInstance, ...] = ()


class MpsState(Model):
    running: bool | None = None
    clients: int | None = Field(default=None, ge=0)
    max_clients: int | None = Field(default=None, ge=1)
    pinned_memory_limit_bytes: Bytes | None = None
    default_active_thread_pct: int | None = Field(default=None, ge=1, le=100)


class Resident(Model):
    """A workload already on the device: with a profile, or a bare process with observed memory."""

    name: str = Field(min_length=1)
    pid: int | None = Field(default=None, ge=1)
    profile: WorkloadProfile | None = None
    observed_memory_bytes: Bytes | None = None
    mig_instance: str | None = Field(default=None, description="the GPU instance it runs in: PROFILE or PROFILE@START")
    mps_active_thread_pct: int | None = Field(default=None, ge=1, le=100)
    green_sms: int | None = Field(default=None, ge=1)

    @property
    def profiled(self) -> bool:
        return self.profile is not None


class DeviceSnapshot(Model):
    device_type: str = Field(min_length=1)
    uuid: str | None = None
    index: int | None = Field(default=None, ge=0)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    compute_mode: ComputeMode | None = None
    mig: MigState = MigState()
    mps: MpsState = MpsState()
    memory_total_bytes: Bytes | None = None
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
    telemetry: Telemetry = Telemetry()
    residents: tuple[Resident, ...] = ()
    green_partitions_sms: tuple[int, ...] | None = Field(
        default=None, description="SMs held by existing green-context partitions; [] = none; None (default) = unknown"
    )
    taken_at: dt.datetime | None = None
    source: SnapshotSource = "file"
    unknown_reasons: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> DeviceSnapshot:
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


def _resolve_resident_profiles(data: Any, base: Path, file: str) -> Any:
    """A resident's ``profile`` may be a path (relative to the snapshot file) instead of inline."""
    if not isinstance(data, dict) or not isinstance(data.get("residents"), list):
        return data
    residents = []
    for i, resident in enumerate(data["residents"]):
        if isinstance(resident, dict) and isinstance(resident.get("profile"), str):
            ref = base / resident["profile"]
            if not ref.is_file():
                raise InputError(f"profile file {ref} not found", file=file, field=f"residents[{i}].profile")
            profile = load_profile(ref)
            resident = {**resident, "profile": profile.model_dump(mode="json")}
        residents.append(resident)
    return {**data, "residents": residents}


def load_snapshot(path: str | Path) -> DeviceSnapshot:
    """Load a snapshot file; residents' ``profile:`` entries may name profile files."""
    file = str(path)
    data = read_document(path)
    data = _resolve_resident_profiles(data, Path(path).resolve().parent, file)
    return validate_document(DeviceSnapshot, data, file=file)
