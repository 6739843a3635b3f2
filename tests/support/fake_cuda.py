"""A recorded H200 in cuda-python's calling convention (cuda-bindings 13.x), for tests without a GPU.

Every function returns a tuple ``(CUresult, *outputs)`` exactly as ``cuda.bindings.driver`` does
(gpu-facts §1); enums (``CUresult``, ``CUdevice_attribute``, ``CUfunction_attribute``,
``CUstream_flags``, ``CUoccupancy_flags``) and ``CUuuid`` are the real library's. Attribute values
are an H200 SXM's device query (132 SMs, 228 KiB shared memory per SM, 1 KiB reserved per block).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cuda.bindings import driver as real

OK = real.CUresult.CUDA_SUCCESS
A = real.CUdevice_attribute

H200_ATTRIBUTES = {
    A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
    A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: 65536,
    A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: 65536,
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472,
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 49152,
    A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
    A.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: 1024,
    A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: 2048,
    A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
    A.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: 32,
    A.CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
    A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: 3201000,  # kHz
    A.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: 6144,  # bits
    A.CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: 0,
    A.CU_DEVICE_ATTRIBUTE_MPS_ENABLED: 0,
}
H200_TOTAL_MEM = 150754820096  # 143771 MiB


class FakeCudaDriver:
    def __init__(
        self,
        *,
        attributes: dict[Any, int] | None = None,
        init_error: Any = None,
        fail: dict[str, Any] | None = None,
    ) -> None:
        self.attributes = dict(H200_ATTRIBUTES if attributes is None else attributes)
        self.init_error = init_error
        self.fail = dict(fail or {})
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.allocated: set[int] = set()
        self.streams: dict[int, int] = {}
        self.launches: list[dict[str, Any]] = []
        self.primary_refs = 0
        self._next = 0x1000

    def __getattr__(self, name: str) -> Any:
        if name.startswith("cu"):
            raise AttributeError(name)  # a driver call this fake does not record
        return getattr(real, name)

    def _handle(self) -> int:
        self._next += 0x10
        return self._next

    def _log(self, name: str, *args: Any) -> Any:
        self.calls.append((name, args))
        return self.fail.get(name)

    def cuInit(self, flags: int) -> tuple[Any]:
        self._log("cuInit", flags)
        return (self.init_error if self.init_error is not None else OK,)

    def cuDeviceGetCount(self) -> tuple[Any, int]:
        self._log("cuDeviceGetCount")
        return OK, 1

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, Any]:
        self._log("cuDeviceGet", ordinal)
        return OK, real.CUdevice(ordinal)

    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> tuple[Any, int]:
        err = self._log("cuDeviceGetAttribute", attrib)
        if err is not None:
            return err, 0
        if attrib not in self.attributes:
            return real.CUresult.CUDA_ERROR_NOT_SUPPORTED, 0
        return OK, self.attributes[attrib]

    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, int]:
        self._log("cuDeviceTotalMem")
        return OK, H200_TOTAL_MEM

    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, bytes]:
        self._log("cuDeviceGetName")
        return OK, b"NVIDIA H200" + b"\0" * (length - 11)

    def cuDeviceGetUuid(self, dev: Any) -> tuple[Any, Any]:
        self._log("cuDeviceGetUuid")
        # the real return is a CUuuid whose read-only ``bytes`` holds the 16 octets
        return OK, SimpleNamespace(bytes=bytes.fromhex("5e1a3c1e8f0b4d5e9b9c2f64d1e0a7b1"))

    def cuDriverGetVersion(self) -> tuple[Any, int]:
        self._log("cuDriverGetVersion")
        return OK, 13000

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, int]:
        self._log("cuDevicePrimaryCtxRetain")
        self.primary_refs += 1
        return OK, 0xC0

    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any]:
        self._log("cuDevicePrimaryCtxRelease")
        self.primary_refs -= 1
        return (OK,)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any]:
        self._log("cuCtxSetCurrent")
        return (OK,)

    def cuCtxGetStreamPriorityRange(self) -> tuple[Any, int, int]:
        self._log("cuCtxGetStreamPriorityRange")
        return OK, 0, -5

    def cuStreamCreateWithPriority(self, flags: Any, priority: int) -> tuple[Any, int]:
        self._log("cuStreamCreateWithPriority", flags, priority)
        handle = self._handle()
        self.streams[handle] = priority
        return OK, handle

    def cuStreamSynchronize(self, stream: int) -> tuple[Any]:
        self._log("cuStreamSynchronize")
        return (OK,)

    def cuStreamDestroy(self, stream: int) -> tuple[Any]:
        self._log("cuStreamDestroy")
        del self.streams[stream]
        return (OK,)

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, int]:
        err = self._log("cuModuleLoadData")
        if err is not None:
            return err, 0
        return OK, self._handle()

    def cuModuleUnload(self, module: int) -> tuple[Any]:
        self._log("cuModuleUnload")
        return (OK,)

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[Any, int]:
        self._log("cuModuleGetFunction", name)
        return OK, self._handle()

    def cuMemAlloc(self, size: int) -> tuple[Any, int]:
        self._log("cuMemAlloc", size)
        handle = self._handle()
        self.allocated.add(handle)
        return OK, handle

    def cuMemsetD8(self, ptr: int, value: int, size: int) -> tuple[Any]:
        self._log("cuMemsetD8")
        return (OK,)

    def cuMemFree(self, ptr: int) -> tuple[Any]:
        self._log("cuMemFree")
        self.allocated.discard(ptr)
        return (OK,)

    def cuEventCreate(self, flags: int) -> tuple[Any, int]:
        self._log("cuEventCreate")
        return OK, self._handle()

    def cuEventRecord(self, event: int, stream: int) -> tuple[Any]:
        self._log("cuEventRecord")
        return (OK,)

    def cuEventSynchronize(self, event: int) -> tuple[Any]:
        self._log("cuEventSynchronize")
        return (OK,)

    def cuEventElapsedTime(self, start: int, end: int) -> tuple[Any, float]:
        self._log("cuEventElapsedTime")
        return OK, 0.25

    def cuEventDestroy(self, event: int) -> tuple[Any]:
        self._log("cuEventDestroy")
        return (OK,)

    def cuLaunchKernel(
        self,
        f: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        smem: int,
        stream: int,
        params: Any,
        extra: Any,
    ) -> tuple[Any]:
        err = self._log("cuLaunchKernel")
        if err is not None:
            return (err,)
        self.launches.append({"grid": gx, "block": bx, "smem": smem, "stream": stream, "params": params})
        return (OK,)


class FakeCudaDriverWithModules(FakeCudaDriver):
    """Also loads modules: the kernels and their attributes come from the image itself, read with
    cuobjdump (as the driver would read the ELF), so function attributes have the driver's shape
    (``cuFuncGetAttribute`` → ``(CUresult, int)``, ``cuModuleEnumerateFunctions`` → ``(CUresult, list)``).
    Occupancy answers come from ``canary.occupancy`` on the H200 catalog entry: this is a dry run of
    the code paths, not a second opinion on the model."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.modules: dict[int, list[Any]] = {}
        self.functions: dict[int, Any] = {}
        self.max_dynamic: dict[int, int] = {}

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, int]:
        import tempfile
        from pathlib import Path

        from canary.envelope.cuobjdump import read_binary

        err, handle = super().cuModuleLoadData(image)
        if err != OK:
            return err, handle
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "image.cubin"
            path.write_bytes(image)
            kernels = [k for elf in read_binary(path) for k in elf.kernels]
        self.modules[handle] = []
        for kernel in kernels:
            function = self._handle()
            self.functions[function] = kernel
            self.modules[handle].append(function)
        return OK, handle

    def cuModuleGetFunctionCount(self, module: int) -> tuple[Any, int]:
        self._log("cuModuleGetFunctionCount")
        return OK, len(self.modules[module])

    def cuModuleEnumerateFunctions(self, count: int, module: int) -> tuple[Any, list[int]]:
        self._log("cuModuleEnumerateFunctions")
        return OK, list(self.modules[module][:count])

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[Any, int]:
        self._log("cuModuleGetFunction", name)
        for function in self.modules.get(module, []):
            if self.functions[function].name == name.decode():
                return OK, function
        return real.CUresult.CUDA_ERROR_NOT_FOUND, 0

    def cuFuncGetName(self, function: int) -> tuple[Any, bytes]:
        self._log("cuFuncGetName")
        return OK, self.functions[function].name.encode()

    def cuFuncGetAttribute(self, attrib: Any, function: int) -> tuple[Any, int]:
        self._log("cuFuncGetAttribute", attrib)
        kernel = self.functions[function]
        F = real.CUfunction_attribute
        values = {
            F.CU_FUNC_ATTRIBUTE_NUM_REGS: kernel.registers_per_thread,
            F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: kernel.static_shared_bytes,
            F.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: kernel.local_bytes,
            F.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: 0,
            F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
            F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: self.max_dynamic.get(
                function, 49152 - kernel.static_shared_bytes
            ),
            F.CU_FUNC_ATTRIBUTE_PTX_VERSION: 90,
            F.CU_FUNC_ATTRIBUTE_BINARY_VERSION: 90,
        }
        return OK, values[attrib]

    def cuFuncSetAttribute(self, function: int, attrib: Any, value: int) -> tuple[Any]:
        self._log("cuFuncSetAttribute", attrib, value)
        if attrib == real.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if value + self.functions[function].static_shared_bytes > 232448:
                return (real.CUresult.CUDA_ERROR_INVALID_VALUE,)
            self.max_dynamic[function] = value
        return (OK,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        self, function: int, block: int, dyn: int, flags: Any
    ) -> tuple[Any, int]:
        from canary.catalog import lookup
        from canary.occupancy import cuda_occupancy

        self._log("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", block, dyn)
        kernel = self.functions[function]
        result = cuda_occupancy(
            lookup("h200"),
            registers_per_thread=kernel.registers_per_thread,
            threads_per_block=block,
            static_shared_bytes=kernel.static_shared_bytes,
            dynamic_shared_bytes=dyn,
        )
        return OK, result.active_blocks_per_sm

    def cuMemsetD32(self, ptr: int, value: int, count: int) -> tuple[Any]:
        self._log("cuMemsetD32", value, count)
        return (OK,)


class FakeGreenContexts(FakeCudaDriver):
    """Green-context SM resources as real ``CUdevResource`` structs: an H200's 132 SMs, minimum
    partition 8 and co-scheduling alignment 8 (cc 9.0, gpu-facts §1); ``cuDevSmResourceSplitByCount``
    returns ``(CUresult, [CUdevResource…], nbGroups, remaining)``."""

    @staticmethod
    def _sm(count: int) -> Any:
        resource = real.CUdevResource()
        resource.type = real.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        resource.sm.smCount = count
        resource.sm.minSmPartitionSize = 8
        resource.sm.smCoscheduledAlignment = 8
        return resource

    def cuDeviceGetDevResource(self, dev: Any, kind: Any) -> tuple[Any, Any]:
        self._log("cuDeviceGetDevResource", kind)
        return OK, self._sm(132)

    def cuDevSmResourceSplitByCount(
        self, groups: int, resource: Any, flags: int, min_count: int
    ) -> tuple[Any, list[Any], int, Any]:
        self._log("cuDevSmResourceSplitByCount", groups, min_count)
        size = -(-min_count // 8) * 8  # rounded up to the alignment
        n = min(groups, resource.sm.smCount // size)
        return OK, [self._sm(size) for _ in range(n)], n, self._sm(resource.sm.smCount - n * size)
