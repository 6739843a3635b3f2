"""A live NVIDIA device through the CUDA driver API (cuda-python's ``cuda.bindings.driver``).

What the driver knows that NVML does not: every number the catalog and the occupancy rules use
(``device_attributes``), the kernels of a cubin with their function attributes (``load_kernels``),
the driver's own occupancy answer (``driver_occupancy``), stream priorities and green-context
splits. What it does not know: other processes, MIG layout, telemetry — ``read_snapshot`` leaves
those unknown with the reason (use ``nvml:N`` for them).

Without libcuda the first call raises ``DynamicLibNotFoundError`` (a ``RuntimeError``); that, and
codes such as ``CUDA_ERROR_NO_DEVICE``, become ``DeviceUnavailable`` for commands.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary.backends._vendor import CudaCallError, CudaDriver, Unavailable
from canary.errors import InputError
from canary.snapshot import ComputeMode, DeviceSnapshot

# catalog field → CU_DEVICE_ATTRIBUTE_* name
CATALOG_ATTRIBUTES: dict[str, str] = {
    "sm_count": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
    "registers_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
    "registers_per_block": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK",
    "shared_memory_per_sm_bytes": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "shared_memory_per_block_bytes": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
    "shared_memory_per_block_optin_bytes": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "reserved_shared_memory_per_block_bytes": "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK",
    "max_threads_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
    "max_threads_per_block": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "max_blocks_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR",
    "warp_size": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
}
_EXTRA_ATTRIBUTES = {
    "cc_major": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "cc_minor": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
    "memory_clock_khz": "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE",
    "memory_bus_bits": "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH",
    "compute_mode": "CU_DEVICE_ATTRIBUTE_COMPUTE_MODE",
    "mps_enabled": "CU_DEVICE_ATTRIBUTE_MPS_ENABLED",
}
# Relative tolerance per field: memory sizes differ by what the driver keeps; peak bandwidth from
# clock × bus width is a model. Every other number must match exactly.
_TOLERANCE = {"memory_bytes": 0.08, "memory_bandwidth_bytes_per_s": 0.10}
_COMPUTE_MODES: dict[int, ComputeMode] = {0: "DEFAULT", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}

FUNCTION_ATTRIBUTES = {
    "registers_per_thread": "CU_FUNC_ATTRIBUTE_NUM_REGS",
    "static_shared_bytes": "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
    "local_bytes": "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
    "const_bytes": "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES",
    "max_threads_per_block": "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "max_dynamic_shared_bytes": "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    "ptx_version": "CU_FUNC_ATTRIBUTE_PTX_VERSION",
    "binary_version": "CU_FUNC_ATTRIBUTE_BINARY_VERSION",
}


@dataclass(frozen=True)
class Mismatch:
    """A catalog number the device disagrees with; ``device is None`` = the device did not say."""

    field: str
    catalog: float | int | tuple[int, int] | None
    device: float | int | tuple[int, int] | None
    tolerance: float = 0.0

    @property
    def unknown(self) -> bool:
        return self.device is None


@dataclass(frozen=True)
class KernelAttributes:
    """One kernel's function attributes as the driver reports them (``function`` is its CUfunction)."""

    name: str
    function: Any
    registers_per_thread: int
    static_shared_bytes: int
    local_bytes: int
    const_bytes: int
    max_threads_per_block: int
    max_dynamic_shared_bytes: int
    ptx_version: int
    binary_version: int


@dataclass(frozen=True)
class GreenSplit:
    """A green-context SM split: groups of ``group_sm_count`` SMs and what is left."""

    groups: int
    group_sm_count: tuple[int, ...]
    remaining_sms: int
    min_partition_sms: int | None
    sm_alignment: int | None


class CudaBackend:
    """A device opened through the driver API; the primary context is retained on first need."""

    def __init__(self, index: int, module: Any = None) -> None:
        self.driver = CudaDriver(module)
        self.lib = self.driver.lib
        self.index = index
        self.driver.call("cuInit", 0)
        count = int(self.driver.call("cuDeviceGetCount"))
        if not 0 <= index < count:
            from canary.errors import DeviceUnavailable

            raise DeviceUnavailable(f"no CUDA device with index {index} (the driver sees {count})")
        self.device = self.driver.call("cuDeviceGet", index)
        self.context: Any = None

    def attribute(self, name: str) -> int:
        return int(
            self.driver.call("cuDeviceGetAttribute", getattr(self.lib.CUdevice_attribute, name), self.device)
        )

    def make_current(self) -> Any:
        if self.context is None:
            self.context = self.driver.call("cuDevicePrimaryCtxRetain", self.device)
        self.driver.call("cuCtxSetCurrent", self.context)
        return self.context

    def close(self) -> None:
        if self.context is not None:
            self.driver.call("cuDevicePrimaryCtxRelease", self.device)
            self.context = None

    def __enter__(self) -> CudaBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------- device numbers
    def device_attributes(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(values, unknown reasons) for every catalog number; bandwidth = 2 × memory clock × bus width."""
        values: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for field, attr in {**CATALOG_ATTRIBUTES, **_EXTRA_ATTRIBUTES}.items():
            try:
                values[field] = self.attribute(attr)
            except Unavailable as exc:
                unknown[field] = exc.reason
            except CudaCallError as exc:  # e.g. an attribute this driver no longer reports
                unknown[field] = str(exc)
        if "cc_major" in values and "cc_minor" in values:
            values["compute_capability"] = (values.pop("cc_major"), values.pop("cc_minor"))
        try:
            values["memory_bytes"] = int(self.driver.call("cuDeviceTotalMem", self.device))
        except Unavailable as exc:
            unknown["memory_bytes"] = exc.reason
        except CudaCallError as exc:
            unknown["memory_bytes"] = str(exc)
        clock, bus = values.get("memory_clock_khz"), values.get("memory_bus_bits")
        if clock and bus:
            values["memory_bandwidth_bytes_per_s"] = 2.0 * clock * 1000 * bus / 8
        else:
            unknown["memory_bandwidth_bytes_per_s"] = "memory clock or bus width not reported by the driver"
        return values, unknown

    def name(self) -> str:
        raw = self.driver.call("cuDeviceGetName", 256, self.device)
        return (raw.decode() if isinstance(raw, bytes) else str(raw)).split("\0", 1)[0].strip()

    def uuid(self) -> str:
        raw = self.driver.call("cuDeviceGetUuid", self.device)
        data = bytes(raw.bytes) if hasattr(raw, "bytes") else bytes(raw)
        h = data.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    # ----------------------------------------------------------------------------- kernels
    def load_kernels(self, cubin_path: str | Path) -> list[KernelAttributes]:
        """Load a cubin/fatbin and read every kernel's function attributes (the module stays loaded)."""
        try:
            image = Path(cubin_path).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", file=str(cubin_path)) from None
        self.make_current()
        module = self.driver.call("cuModuleLoadData", image)
        count = int(self.driver.call("cuModuleGetFunctionCount", module))
        functions = self.driver.call("cuModuleEnumerateFunctions", count, module)
        if not isinstance(functions, list | tuple):
            functions = [functions]
        kernels = []
        for function in functions:
            raw_name = self.driver.call("cuFuncGetName", function)
            name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            kernels.append(self._attributes(name, function))
        return kernels

    def get_kernel(self, cubin_path: str | Path, kernel: str) -> KernelAttributes:
        for found in self.load_kernels(cubin_path):
            if found.name == kernel:
                return found
        raise InputError(
            f"no kernel named {kernel!r} in the binary", file=str(cubin_path), field="canary.kernel"
        )

    def _attributes(self, name: str, function: Any) -> KernelAttributes:
        values = {
            field: int(
                self.driver.call("cuFuncGetAttribute", getattr(self.lib.CUfunction_attribute, attr), function)
            )
            for field, attr in FUNCTION_ATTRIBUTES.items()
        }
        return KernelAttributes(name=name, function=function, **values)

    def driver_occupancy(self, function: Any, block_size: int, dynamic_shared_bytes: int) -> int:
        """The driver's max active blocks per SM (caching override disabled, as the occupancy rules assume
        the default carveout)."""
        self.make_current()
        flags = self.lib.CUoccupancy_flags.CU_OCCUPANCY_DEFAULT
        return int(
            self.driver.call(
                "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                function,
                block_size,
                dynamic_shared_bytes,
                flags,
            )
        )

    def set_max_dynamic_shared(self, function: Any, size_bytes: int) -> None:
        attr = self.lib.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.driver.call("cuFuncSetAttribute", function, attr, size_bytes)

    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest): least is the *low* priority (the larger number, normally 0)."""
        self.make_current()
        least, greatest = self.driver.call("cuCtxGetStreamPriorityRange")
        return int(least), int(greatest)

    def green_context_split(self, sm_count: int) -> GreenSplit:
        """Split the device's SMs into groups of at least ``sm_count`` (the driver rounds to its granularity)."""
        sm_type = self.lib.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        resource = self.driver.call("cuDeviceGetDevResource", self.device, sm_type)
        total = int(resource.sm.smCount)
        groups = total // sm_count if sm_count > 0 else 0
        if groups < 1:
            raise InputError(f"the device has {total} SMs, fewer than {sm_count}", field="sm_count")
        result, n_groups, remainder = self.driver.call(
            "cuDevSmResourceSplitByCount", groups, resource, 0, sm_count
        )
        sizes = tuple(int(r.sm.smCount) for r in list(result)[: int(n_groups)])
        min_part = getattr(resource.sm, "minSmPartitionSize", None)
        align = getattr(resource.sm, "smCoscheduledAlignment", None)
        return GreenSplit(
            groups=int(n_groups),
            group_sm_count=sizes,
            remaining_sms=int(remainder.sm.smCount),
            min_partition_sms=int(min_part) if min_part is not None else None,
            sm_alignment=int(align) if align is not None else None,
        )


def device_attributes(index: int, *, module: Any = None) -> dict[str, Any]:
    """Every catalog number read from device ``index``; a number the driver does not give is absent."""
    with CudaBackend(index, module) as backend:
        values, _ = backend.device_attributes()
        return values


def compare_with_catalog(spec: Any, attrs: dict[str, Any]) -> list[Mismatch]:
    """Catalog numbers the device disagrees with, and those it did not report (``device=None``)."""
    mismatches = []
    for field in (*CATALOG_ATTRIBUTES, "compute_capability", "memory_bytes", "memory_bandwidth_bytes_per_s"):
        catalog = getattr(spec, field, None)
        device = attrs.get(field)
        tolerance = _TOLERANCE.get(field, 0.0)
        if device is None:
            mismatches.append(Mismatch(field, catalog, None, tolerance))
            continue
        if catalog is None:
            continue  # the catalog does not claim a number here; nothing to disagree with
        if tolerance == 0.0:
            same = tuple(catalog) == tuple(device) if isinstance(catalog, tuple) else catalog == device
            if not same:
                mismatches.append(Mismatch(field, catalog, device, 0.0))
        elif abs(float(device) - float(catalog)) > tolerance * float(catalog):
            mismatches.append(Mismatch(field, catalog, device, tolerance))
    return mismatches


def load_kernels(cubin_path: str | Path, *, index: int = 0, module: Any = None) -> list[KernelAttributes]:
    """Function attributes of every kernel in a cubin (NUM_REGS, SHARED_SIZE_BYTES, LOCAL_SIZE_BYTES, …)."""
    with CudaBackend(index, module) as backend:
        return backend.load_kernels(cubin_path)


def stream_priority_range(*, index: int = 0, module: Any = None) -> tuple[int, int]:
    with CudaBackend(index, module) as backend:
        return backend.stream_priority_range()


def green_context_split(index: int, sm_count: int, *, module: Any = None) -> GreenSplit:
    with CudaBackend(index, module) as backend:
        return backend.green_context_split(sm_count)


def read_snapshot(index: int, *, module: Any = None) -> DeviceSnapshot:
    """Device ``index`` as the driver API sees it (source ``cuda``).

    Residents, used memory, MIG and telemetry are unknown here (the driver API cannot see other
    processes without creating a context of its own); the reasons say to use ``nvml:N``."""
    from canary.catalog import lookup

    with CudaBackend(index, module) as backend:
        unknown: dict[str, str] = {}
        name = backend.name()
        device_type = name
        try:
            device_type = lookup(name).name
        except InputError as exc:
            unknown["device_type"] = (
                f"CUDA name {name!r} is not in the catalog ({exc.problem}); kept as reported"
            )
        values, reasons = backend.device_attributes()
        try:
            uuid: str | None = backend.uuid()
        except (Unavailable, CudaCallError) as exc:
            uuid, unknown["uuid"] = None, str(exc)
        try:
            version = int(backend.driver.call("cuDriverGetVersion"))
            cuda_version: str | None = f"{version // 1000}.{(version % 1000) // 10}"
        except (Unavailable, CudaCallError) as exc:
            cuda_version, unknown["cuda_driver_version"] = None, str(exc)
        mode = _COMPUTE_MODES.get(values["compute_mode"]) if "compute_mode" in values else None
        if mode is None:
            unknown["compute_mode"] = reasons.get(
                "compute_mode", "the driver reported an unknown compute mode"
            )
        if "memory_bytes" in reasons:
            unknown["memory_total_bytes"] = reasons["memory_bytes"]
        elsewhere = "not visible through the CUDA driver API without a context of our own; use nvml:N"
        for field in ("memory_used_bytes", "memory_reserved_bytes", "residents", "mig", "telemetry"):
            unknown[field] = elsewhere
        unknown["driver_version"] = "the CUDA driver API reports the CUDA version only; use nvml:N"
        mps = values.get("mps_enabled")
        if mps is None:
            unknown["mps"] = reasons.get("mps_enabled", "not reported")
        unknown["green_partitions_sms"] = "green-context partitions belong to processes; not visible here"
        from canary.snapshot import MigState, MpsState

        return DeviceSnapshot(
            device_type=device_type,
            uuid=uuid,
            index=index,
            cuda_driver_version=cuda_version,
            compute_mode=mode,
            mig=MigState(enabled=None),
            mps=MpsState(running=bool(mps) if mps is not None else None),
            memory_total_bytes=values.get("memory_bytes"),
            green_partitions_sms=None,
            taken_at=dt.datetime.now(dt.UTC),
            source="cuda",
            unknown_reasons=unknown,
        )
