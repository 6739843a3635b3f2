"""A live NVIDIA device through NVML (nvidia-ml-py) → ``DeviceSnapshot`` (source ``nvml``).

Read in one batch, then frozen. Every field may be unknown; the reason is in
``snapshot.unknown_reasons[field]``. Missing library, driver not loaded and GPU lost are
``DeviceUnavailable`` (exit 4); "not supported" and "no permission" make a field unknown.

GPM (Hopper and newer) needs two samples at least 100 ms apart, so a snapshot on such a device takes
that long; elsewhere the SM-occupancy and DRAM-bandwidth fields are unknown with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from canary.backends._vendor import Nvml, Unavailable
from canary.errors import InputError
from canary.snapshot import (
    ComputeMode,
    DeviceSnapshot,
    Measured,
    MigInstance,
    MigState,
    Resident,
    Telemetry,
)

GPM_INTERVAL_S = 0.1  # NVML's minimum spacing between the two GPM samples

# NVML_COMPUTEMODE_* → the snapshot's names. EXCLUSIVE_THREAD (1) was removed from drivers long ago.
_COMPUTE_MODES: dict[int, ComputeMode] = {0: "DEFAULT", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}

# nvmlClocksEventReason* bits (nvidia-ml-py) → names.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

_GPM_SM_OCCUPANCY = 3  # NVML_GPM_METRIC_SM_OCCUPANCY
_GPM_DRAM_BW_UTIL = 10  # NVML_GPM_METRIC_DRAM_BW_UTIL
_GPM_SM_UTIL = 2  # NVML_GPM_METRIC_SM_UTIL


def clock_event_names(mask: int) -> tuple[str, ...]:
    """Names of the set bits; unknown bits appear as ``bit_0x…`` rather than being dropped."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    extra = mask & ~known
    bit = 1
    while extra:
        if extra & bit:
            names.append(f"bit_{bit:#x}")
            extra &= ~bit
        bit <<= 1
    return tuple(names)


def cuda_version_text(encoded: int) -> str:
    """NVML/CUDA encode versions as 1000·major + 10·minor (13040 → "13.4")."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Reader:
    """Reads fields one by one; a field that cannot be read is recorded as unknown with its reason."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self.unknown: dict[str, str] = {}

    def get(self, field: str, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.nvml.call(name, *args, **kwargs)
        except Unavailable as exc:
            self.unknown.setdefault(field, exc.reason)
            return None


def read_snapshot(
    index: int,
    *,
    module: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], dt.datetime] | None = None,
) -> DeviceSnapshot:
    """Read NVIDIA GPU ``index`` through NVML.

    ``module`` replaces ``pynvml`` (tests pass recorded values in pynvml's own struct shapes).
    Raises ``DeviceUnavailable`` when NVML, the driver or the GPU cannot be reached."""
    nvml = Nvml(module)
    nvml.init()
    try:
        return _read(nvml, index, sleep, now or (lambda: dt.datetime.now(dt.UTC)))
    finally:
        nvml.shutdown()


def _read(
    nvml: Nvml, index: int, sleep: Callable[[float], None], now: Callable[[], dt.datetime]
) -> DeviceSnapshot:
    from canary.catalog import lookup

    lib = nvml.lib
    handle = nvml.handle(index)
    r = _Reader(nvml)
    taken_at = now()

    name = r.get("device_type", "nvmlDeviceGetName", handle)
    device_type = _text(name) if name is not None else f"unknown-nvidia-{index}"
    if name is not None:
        try:
            device_type = lookup(device_type).name
        except InputError as exc:
            r.unknown["device_type"] = (
                f"NVML name {device_type!r} is not in the catalog ({exc.problem}); kept as reported"
            )
    uuid = r.get("uuid", "nvmlDeviceGetUUID", handle)
    driver = r.get("driver_version", "nvmlSystemGetDriverVersion")
    cuda_encoded = r.get("cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2")

    mode_value = r.get("compute_mode", "nvmlDeviceGetComputeMode", handle)
    compute_mode: ComputeMode | None = None
    if mode_value is not None:
        compute_mode = _COMPUTE_MODES.get(int(mode_value))
        if compute_mode is None:
            r.unknown["compute_mode"] = f"NVML compute mode {mode_value} is not one canary knows"

    total, used, reserved, used_includes_reserve = _memory(r, lib, handle)
    mig = _mig(r, lib, handle)
    residents = _residents(r, handle)
    telemetry = _telemetry(r, lib, handle, taken_at, sleep)

    r.unknown.setdefault("mps", "NVML does not report whether an MPS control daemon is running")
    r.unknown.setdefault(
        "green_partitions_sms",
        "green-context partitions belong to processes and are not visible through NVML",
    )
    return DeviceSnapshot(
        device_type=device_type,
        uuid=_text(uuid) if uuid is not None else None,
        index=index,
        driver_version=_text(driver) if driver is not None else None,
        cuda_driver_version=cuda_version_text(int(cuda_encoded)) if cuda_encoded is not None else None,
        compute_mode=compute_mode,
        mig=mig,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_reserved_bytes=reserved,
        memory_used_includes_reserve=used_includes_reserve,
        telemetry=telemetry,
        residents=residents,
        green_partitions_sms=None,
        taken_at=taken_at,
        source="nvml",
        unknown_reasons=r.unknown,
    )


def _memory(r: _Reader, lib: Any, handle: Any) -> tuple[int | None, int | None, int | None, bool]:
    """(total, used by compute allocations, driver-reserved, used-includes-reserve).

    v2 (``nvmlMemory_v2_t``): total = reserved + used + free; used is taken as total − free −
    reserved because NVML releases disagree on whether v2 ``used`` includes the reserve, and this
    form cannot count it twice. v1 (``nvmlMemory_t``): ``used`` = reserved + allocated, so the
    snapshot says ``memory_used_includes_reserve`` and stage 1 does not subtract a reserve again."""
    info = r.get("memory_reserved_bytes", "nvmlDeviceGetMemoryInfo", handle, version=lib.nvmlMemory_v2)
    if info is not None:
        total, free, reserved = int(info.total), int(info.free), int(info.reserved)
        return total, max(total - free - reserved, 0), reserved, False
    v1 = r.get("memory_total_bytes", "nvmlDeviceGetMemoryInfo", handle)
    if v1 is None:
        r.unknown["memory_used_bytes"] = r.unknown["memory_total_bytes"]
        return None, None, None, False
    r.unknown["memory_reserved_bytes"] += "; memory_used_bytes includes the driver reserve (v1 memory info)"
    return int(v1.total), int(v1.total) - int(v1.free), None, True


def _mig(r: _Reader, lib: Any, handle: Any) -> MigState:
    modes = r.get("mig", "nvmlDeviceGetMigMode", handle)
    if modes is None:
        return MigState(enabled=None)
    if int(modes[0]) != 1:
        return MigState(enabled=False)
    instances: list[MigInstance] = []
    for profile_enum in range(int(lib.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = r.nvml.call("nvmlDeviceGetGpuInstanceProfileInfo", handle, profile_enum)
        except Unavailable:
            continue  # this device has no such profile: NVML answers NOT_SUPPORTED / INVALID_ARGUMENT
        capacity = max(int(info.instanceCount), 1)
        array = (lib.c_nvmlGpuInstance_t * capacity)()
        count = ctypes.c_uint(0)
        try:
            r.nvml.call("nvmlDeviceGetGpuInstances", handle, int(info.id), array, ctypes.byref(count))
        except Unavailable as exc:
            r.unknown["mig.instances"] = exc.reason
            return MigState(enabled=True)
        profile_name = _text(info.name).removeprefix("MIG ").strip() or f"profile-{int(info.id)}"
        for i in range(count.value):
            gi = r.get("mig.instances", "nvmlGpuInstanceGetInfo", array[i])
            if gi is None:
                return MigState(enabled=True)
            instances.append(
                MigInstance(
                    profile=profile_name,
                    start=int(gi.placement.start),
                    size=int(gi.placement.size),
                    gpu_instance_id=int(gi.id),
                )
            )
    instances.sort(key=lambda m: (m.start, m.size))
    return MigState(enabled=True, instances=tuple(instances))


def _residents(r: _Reader, handle: Any) -> tuple[Resident, ...]:
    procs = r.get("residents", "nvmlDeviceGetComputeRunningProcesses", handle)
    if procs is None:
        return ()
    residents = []
    for proc in procs:
        pid = int(proc.pid)
        used = proc.usedGpuMemory
        name = f"pid:{pid}"
        if used is None:
            # pynvml turns NVML_VALUE_NOT_AVAILABLE into None (WDDM, some containers)
            r.unknown[f"residents.{name}.observed_memory_bytes"] = (
                "NVML does not report this process's memory"
            )
        gi_id = getattr(proc, "gpuInstanceId", None)
        mig_instance = None
        if gi_id is not None and int(gi_id) != 0xFFFFFFFF:
            mig_instance = f"gi:{int(gi_id)}"
        residents.append(
            Resident(
                name=name,
                pid=pid,
                observed_memory_bytes=int(used) if used is not None else None,
                profile=None,
                mig_instance=mig_instance,
            )
        )
    return tuple(residents)


def _telemetry(
    r: _Reader, lib: Any, handle: Any, taken_at: dt.datetime, sleep: Callable[[float], None]
) -> Telemetry:
    def measured(value: float | None, window_s: float | None = None) -> Measured | None:
        if value is None:
            return None
        return Measured(value=float(value), observed_at=taken_at, window_s=window_s, source="nvml")

    util = r.get("telemetry.utilization_gpu_pct", "nvmlDeviceGetUtilizationRates", handle)
    power_mw = r.get("telemetry.power_w", "nvmlDeviceGetPowerUsage", handle)
    limit_mw = r.get("telemetry.power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    temp_c = r.get("telemetry.temperature_c", "nvmlDeviceGetTemperature", handle, lib.NVML_TEMPERATURE_GPU)
    reasons = r.get("telemetry.clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    sm_active, occupancy, dram = _gpm(r, lib, handle, sleep)
    return Telemetry(
        utilization_gpu_pct=measured(util.gpu if util is not None else None),
        sm_active_pct=measured(sm_active, GPM_INTERVAL_S),
        sm_occupancy_pct=measured(occupancy, GPM_INTERVAL_S),
        dram_active_pct=measured(dram, GPM_INTERVAL_S),
        power_w=measured(power_mw / 1000 if power_mw is not None else None),
        power_limit_w=measured(limit_mw / 1000 if limit_mw is not None else None),
        temperature_c=measured(temp_c),
        clock_event_reasons=clock_event_names(int(reasons)) if reasons is not None else None,
    )


_GPM_FIELDS = ("telemetry.sm_active_pct", "telemetry.sm_occupancy_pct", "telemetry.dram_active_pct")


def _gpm(
    r: _Reader, lib: Any, handle: Any, sleep: Callable[[float], None]
) -> tuple[float | None, float | None, float | None]:
    """SM utilisation, SM occupancy, DRAM bandwidth utilisation (%) from two GPM samples."""

    def unknown(reason: str) -> tuple[None, None, None]:
        for field in _GPM_FIELDS:
            r.unknown.setdefault(field, reason)
        return None, None, None

    try:
        support = r.nvml.call("nvmlGpmQueryDeviceSupport", handle)
    except Unavailable as exc:
        return unknown(f"GPM: {exc.reason}")
    if not int(support.isSupportedDevice):
        return unknown("GPM metrics need a Hopper or newer GPU")
    samples: list[Any] = []
    try:
        samples = [r.nvml.call("nvmlGpmSampleAlloc"), r.nvml.call("nvmlGpmSampleAlloc")]
        r.nvml.call("nvmlGpmSampleGet", handle, samples[0])
        sleep(GPM_INTERVAL_S)
        r.nvml.call("nvmlGpmSampleGet", handle, samples[1])
        request = lib.c_nvmlGpmMetricsGet_t()
        request.version = lib.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 3
        request.sample1 = samples[0]
        request.sample2 = samples[1]
        for i, metric in enumerate((_GPM_SM_UTIL, _GPM_SM_OCCUPANCY, _GPM_DRAM_BW_UTIL)):
            request.metrics[i].metricId = metric
        result = r.nvml.call("nvmlGpmMetricsGet", request)
    except Unavailable as exc:
        return unknown(f"GPM: {exc.reason}")
    finally:
        for sample in samples:
            # freeing a sample NVML never filled: nothing to release
            with contextlib.suppress(Unavailable):
                r.nvml.call("nvmlGpmSampleFree", sample)
    values: list[float | None] = []
    for i, field in enumerate(_GPM_FIELDS):
        metric = result.metrics[i]
        if int(metric.nvmlReturn) != 0:
            r.unknown.setdefault(
                field, f"GPM metric {int(metric.metricId)} returned NVML error {int(metric.nvmlReturn)}"
            )
            values.append(None)
        else:
            values.append(float(metric.value))
    return values[0], values[1], values[2]
