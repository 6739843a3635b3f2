"""A recorded NVIDIA device in pynvml's own shapes, for tests on machines without a GPU.

Everything not overridden here (constants, struct classes, ``NVMLError`` and its per-code
subclasses, ``nvmlStructToFriendlyObject``) is nvidia-ml-py's real module, so the adapter sees the
library's actual error classes and ctypes structs:

- memory: ``c_nvmlMemory_v2_t`` (version, total, reserved, free, used), as
  ``nvmlDeviceGetMemoryInfo(h, version=nvmlMemory_v2)`` returns;
- processes: ``nvmlStructToFriendlyObject(c_nvmlProcessInfo_v2_t)`` objects with ``usedGpuMemory``
  set to ``None`` where NVML reports NVML_VALUE_NOT_AVAILABLE, as
  ``nvmlDeviceGetComputeRunningProcesses`` returns;
- MIG: ``c_nvmlGpuInstanceProfileInfo_v2_t`` (id, instanceCount, name ``b"MIG 1g.18gb"``) and
  ``c_nvmlGpuInstanceInfo_t`` (id, profileId, placement.start/size), caller-allocated arrays filled
  through ``nvmlDeviceGetGpuInstances(h, profileId, array, byref(count))``;
- GPM: ``c_nvmlGpmSupport_t.isSupportedDevice`` and ``c_nvmlGpmMetricsGet_t.metrics[i]``
  (metricId, nvmlReturn, value).

The recorded values are an H200 SXM (NVML name "NVIDIA H200", 143771 MiB total, CUDA 13.0 driver).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, ClassVar

import pynvml

H200_UUID = "GPU-5e1a3c1e-8f0b-4d5e-9b9c-2f64d1e0a7b1"
MIB = 1024 * 1024
TOTAL = 143771 * MIB
RESERVED = 549 * MIB
FREE = 39468 * MIB


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Attribute access falls through to the real pynvml; ``errors`` maps a function name to the
    NVML error code it raises (or a list of codes raised on successive calls, then success)."""

    def __init__(self, **overrides: Any) -> None:
        self.calls: list[str] = []
        self.errors: dict[str, int | list[int]] = overrides.pop("errors", {})
        self.name = overrides.pop("name", "NVIDIA H200")
        self.mig_mode = overrides.pop("mig_mode", [0, 0])
        self.gpm_supported = overrides.pop("gpm_supported", 1)
        self.processes = overrides.pop(
            "processes", [(4242, 81 * 1024 * MIB), (5151, 22 * 1024 * MIB), (6161, None)]
        )
        self.mig_instances: dict[int, list[tuple[int, int, int]]] = overrides.pop("mig_instances", {})
        self.clock_reasons = overrides.pop("clock_reasons", 0x1 | 0x4)
        assert not overrides, overrides

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        planned = self.errors.get(name)
        if planned is None:
            return
        if isinstance(planned, list):
            if planned:
                raise nvml_error(planned.pop(0))
            return
        raise nvml_error(planned)

    def _fn(self, name: str, result: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._enter(name)
            return result(*args, **kwargs)

        return call

    # --- lifecycle / identity -------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index != 0:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ctypes.c_void_p(0xD0)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        return str(self.name)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID")
        return H200_UUID

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "580.82.07"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return 13000

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetComputeMode")
        return int(pynvml.NVML_COMPUTEMODE_DEFAULT)

    # --- memory / processes ---------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""))
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.total, mem.reserved, mem.free = TOTAL, RESERVED, FREE
            mem.used = TOTAL - FREE  # R525 semantics: used includes the reserve
            return mem
        v1 = pynvml.c_nvmlMemory_t()
        v1.total, v1.free, v1.used = TOTAL, FREE, TOTAL - FREE
        return v1

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        out = []
        for pid, used in self.processes:
            info = pynvml.c_nvmlProcessInfo_v2_t()
            info.pid = pid
            info.usedGpuMemory = used if used is not None else pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            info.gpuInstanceId = 0xFFFFFFFF
            info.computeInstanceId = 0xFFFFFFFF
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if obj.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # what pynvml itself does
            out.append(obj)
        return out

    # --- MIG --------------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        return list(self.mig_mode)

    _PROFILES: ClassVar[
        dict[int, tuple[int, bytes, int]]
    ] = {  # NVML_GPU_INSTANCE_PROFILE_* enum → (lgip id, name, max instances): H200 -lgip
        0: (19, b"MIG 1g.18gb", 7),
        1: (14, b"MIG 2g.35gb", 3),
        2: (9, b"MIG 3g.71gb", 2),
        3: (5, b"MIG 4g.71gb", 1),
        4: (0, b"MIG 7g.141gb", 1),
        7: (20, b"MIG 1g.18gb+me", 1),
        9: (15, b"MIG 1g.35gb", 4),
    }

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int, version: int = 2) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        if profile not in self._PROFILES:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, name, count = self._PROFILES[profile]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.name, info.instanceCount = pid, name, count
        return info

    def nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: int, array: Any, count_ref: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstances")
        mine = self.mig_instances.get(profile_id, [])
        for k, (gi_id, _start, _size) in enumerate(mine):
            array[k] = ctypes.cast(ctypes.c_void_p(0x1000 + gi_id), pynvml.c_nvmlGpuInstance_t)
        count_ref._obj.value = len(mine)
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: Any) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        gi_id = int(ctypes.cast(gpu_instance, ctypes.c_void_p).value or 0) - 0x1000
        for profile_id, instances in self.mig_instances.items():
            for known_id, start, size in instances:
                if known_id == gi_id:
                    info = pynvml.c_nvmlGpuInstanceInfo_t()
                    info.id, info.profileId = gi_id, profile_id
                    info.placement.start, info.placement.size = start, size
                    return info
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    # --- telemetry ------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates")
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = 97, 31
        return util

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return 412734  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return 700000

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons")
        return int(self.clock_reasons)

    # --- GPM --------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        self._enter("nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = self.gpm_supported
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        return pynvml.c_nvmlGpmSample_t()

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        self._enter("nvmlGpmSampleGet")
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")

    GPM_VALUES: ClassVar[dict[int, float]] = {
        2: 35.19,
        3: 11.26,
        10: 28.44,
    }  # SM_UTIL, SM_OCCUPANCY, DRAM_BW_UTIL (%)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = self.GPM_VALUES[metric.metricId]
        return request
