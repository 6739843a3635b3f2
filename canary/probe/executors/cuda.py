"""The ``cuda`` canary executor: the candidate's kernel from a cubin, on the lowest-priority stream.

The profile names the kernel (``canary.cubin``, ``canary.kernel``, ``canary.grid_blocks``); its
block size and dynamic shared memory come from the profile's kernel entry of that name. Kernels
follow the canary convention ``(void* scratch, unsigned long long scratch_bytes)``; the executor
allocates the scratch buffer (the profile's reserved memory, at least 1 MiB) so the canary also
occupies the memory it declared.

Launches are bounded (``drive(window_s, max_launches)``), timed with CUDA events, and issued on a
stream created at the *least* priority from ``cuCtxGetStreamPriorityRange`` (the larger number), so
the resident's kernels are preferred by the block scheduler. ``rollback`` waits for the launched
work, frees everything and releases the context; it is idempotent. ``verify_gone`` checks through
NVML that this process no longer holds device memory.

It implements ``canary.probe.interfaces.Executor`` (``prepare``, ``start``, ``drive`` with an
exposure gate — one launch is one unit of exposure —, ``rollback`` returning a ``RollbackReport``),
plus ``drive_launches(window_s, max_launches)`` for the GPU check. The blocking driver calls run in a
worker thread with the context made current there.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from canary.backends._vendor import CudaCallError
from canary.errors import CanaryError, DeviceUnavailable, ProbeError
from canary.probe.interfaces import CandidateProcess, ExposureGate, RollbackReport
from canary.profile import KernelSpec, WorkloadProfile

MIN_SCRATCH_BYTES = 1 << 20
MAX_LAUNCHES_IN_FLIGHT = 8  # keep the queue short so rollback waits for little


class CudaExecutor:
    """Runs one candidate kernel as a canary. ``module`` replaces ``cuda.bindings.driver`` (tests)."""

    name = "cuda"
    simulated = False

    def __init__(
        self,
        profile: WorkloadProfile,
        *,
        index: int = 0,
        base_dir: str | Path | None = None,
        module: Any = None,
        nvml_module: Any = None,
    ) -> None:
        spec = profile.canary
        if spec is None or spec.executor != "cuda" or not spec.cubin or not spec.kernel:
            raise ProbeError(f"profile {profile.name!r} has no cuda canary (canary.executor/cubin/kernel)")
        kernel = next((k for k in profile.kernels if k.name == spec.kernel), None)
        if kernel is None:
            raise ProbeError(
                f"profile {profile.name!r} lists no kernel {spec.kernel!r}; its block size is unknown"
            )
        self.profile = profile
        self.kernel: KernelSpec = kernel
        cubin = Path(spec.cubin)
        self.cubin = cubin if cubin.is_absolute() or base_dir is None else Path(base_dir) / cubin
        self.grid_blocks = spec.grid_blocks or kernel.grid_blocks
        if self.grid_blocks is None:
            raise ProbeError(f"profile {profile.name!r}: no grid size for {kernel.name} (canary.grid_blocks)")
        self.index = index
        self._module = module
        self._nvml_module = nvml_module
        self.scratch_bytes = max(int(profile.memory.reserved_bytes), MIN_SCRATCH_BYTES)
        self.launch_times_ms: list[float] = []
        self.launches = 0
        self.stream_priority: int | None = None
        self._backend: Any = None
        self._stream: Any = None
        self._scratch: Any = None
        self._module_handle: Any = None
        self._function: Any = None
        self._events: list[tuple[Any, Any]] = []
        self._rolled_back = False

    # ------------------------------------------------------------------ blocking halves (worker thread)
    def _call(self, name: str, *args: Any) -> Any:
        return self._backend.driver.call(name, *args)

    def _start_blocking(self) -> None:
        from canary.backends.cuda import CudaBackend

        try:
            self._backend = CudaBackend(self.index, self._module)
            self._backend.make_current()
            least, _greatest = self._backend.stream_priority_range()
            self.stream_priority = least
            flags = self._backend.lib.CUstream_flags.CU_STREAM_NON_BLOCKING
            self._stream = self._call("cuStreamCreateWithPriority", flags, least)
            try:
                image = self.cubin.read_bytes()
            except OSError as exc:
                raise ProbeError(f"cannot read the canary cubin {self.cubin}: {exc.strerror}") from None
            self._module_handle = self._call("cuModuleLoadData", image)
            self._function = self._call("cuModuleGetFunction", self._module_handle, self.kernel.name.encode())
            if self.kernel.dynamic_shared_bytes > 48 * 1024:
                self._backend.set_max_dynamic_shared(self._function, self.kernel.dynamic_shared_bytes)
            self._scratch = self._call("cuMemAlloc", self.scratch_bytes)
            self._call("cuMemsetD8", self._scratch, 0, self.scratch_bytes)
        except DeviceUnavailable:
            self._rollback_blocking()
            raise
        except CudaCallError as exc:  # a driver error code while setting up: the probe cannot start
            self._rollback_blocking()
            raise ProbeError(f"cuda canary could not start: {exc}") from exc
        except CanaryError:
            self._rollback_blocking()
            raise

    def _launch_one(self) -> None:
        start_event = self._call("cuEventCreate", 0)
        end_event = self._call("cuEventCreate", 0)
        self._call("cuEventRecord", start_event, self._stream)
        params = ((self._scratch, self.scratch_bytes), (None, ctypes.c_ulonglong))
        self._call(
            "cuLaunchKernel",
            self._function,
            self.grid_blocks,
            1,
            1,
            self.kernel.threads_per_block,
            1,
            1,
            self.kernel.dynamic_shared_bytes,
            self._stream,
            params,
            0,
        )
        self._call("cuEventRecord", end_event, self._stream)
        self._events.append((start_event, end_event))
        self.launches += 1

    def _collect(self, keep: int) -> None:
        """Wait for the oldest launches until at most ``keep`` are in flight; record their times."""
        while len(self._events) > keep:
            start_event, end_event = self._events.pop(0)
            self._call("cuEventSynchronize", end_event)
            self.launch_times_ms.append(float(self._call("cuEventElapsedTime", start_event, end_event)))
            self._call("cuEventDestroy", start_event)
            self._call("cuEventDestroy", end_event)

    def _drive_blocking(self, window_s: float, max_launches: int) -> int:
        if self._function is None or self._rolled_back:
            raise ProbeError(
                "the cuda canary is not running (start it first; it cannot restart after rollback)"
            )
        self._backend.make_current()
        deadline = time.monotonic() + window_s
        done = 0
        while done < max_launches and time.monotonic() < deadline:
            self._launch_one()
            done += 1
            self._collect(MAX_LAUNCHES_IN_FLIGHT)
        self._collect(0)
        return done

    def _rollback_blocking(self) -> None:
        if self._rolled_back or self._backend is None:
            self._rolled_back = True
            return
        errors: list[str] = []

        def attempt(name: str, *args: Any) -> None:
            try:
                self._call(name, *args)
            except Exception as exc:  # keep releasing the rest; report every failure at the end
                errors.append(f"{name}: {exc}")

        try:
            self._backend.make_current()
        except Exception as exc:
            errors.append(f"cuCtxSetCurrent: {exc}")
        if self._stream is not None:
            attempt("cuStreamSynchronize", self._stream)
        for start_event, end_event in self._events:
            attempt("cuEventDestroy", start_event)
            attempt("cuEventDestroy", end_event)
        self._events.clear()
        if self._scratch is not None:
            attempt("cuMemFree", self._scratch)
        if self._module_handle is not None:
            attempt("cuModuleUnload", self._module_handle)
        if self._stream is not None:
            attempt("cuStreamDestroy", self._stream)
        try:
            self._backend.close()
        except Exception as exc:
            errors.append(f"cuDevicePrimaryCtxRelease: {exc}")
        self._rolled_back = True
        self._scratch = self._module_handle = self._stream = self._function = None
        if errors:
            raise ProbeError("cuda canary rollback incomplete: " + "; ".join(errors))

    def _verify_gone_blocking(self) -> bool:
        from canary.backends._vendor import Nvml

        if not self._rolled_back:
            return False
        nvml = Nvml(self._nvml_module)
        nvml.init()
        try:
            procs = nvml.call("nvmlDeviceGetComputeRunningProcesses", nvml.handle(self.index))
        finally:
            nvml.shutdown()
        return all(int(p.pid) != os.getpid() for p in procs)

    # ------------------------------------------------------------------ the async protocol
    async def prepare(self, probe_id: str) -> CandidateProcess | None:
        """Load the kernel, create the least-priority stream, allocate scratch; nothing runs yet.

        The canary's kernels run inside this process, so there is no OS process of its own (``None``).
        Raises ``DeviceUnavailable`` without a driver, ``ProbeError`` for any other failure (cleaned up)."""
        self.probe_id = probe_id
        await anyio.to_thread.run_sync(self._start_blocking)
        return None

    async def start(self) -> None:
        """Ready once prepared; a rolled-back executor cannot start again."""
        if self._function is None:
            await self.prepare(getattr(self, "probe_id", "unnamed"))
        if self._rolled_back:
            raise ProbeError("the cuda canary was rolled back; build a new executor")

    async def drive(
        self, duration_s: float, gate: ExposureGate, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Launch kernels for ``duration_s``, each only after ``gate.try_acquire()`` (one launch = one
        unit of exposure). Signals ``task_status.started()`` after the first launch is queued."""
        started = False
        with anyio.move_on_after(duration_s):
            while gate.try_acquire():
                await anyio.to_thread.run_sync(self._launch_and_collect)
                if not started:
                    task_status.started()
                    started = True
        if not started:
            task_status.started()  # the gate was empty: nothing to send, but the window may proceed
        await anyio.to_thread.run_sync(self._finish_window)

    def _launch_and_collect(self) -> None:
        if self._function is None or self._rolled_back:
            raise ProbeError(
                "the cuda canary is not running (prepare it first; it cannot restart after rollback)"
            )
        self._backend.make_current()
        self._launch_one()
        self._collect(MAX_LAUNCHES_IN_FLIGHT)

    def _finish_window(self) -> None:
        if self._backend is not None and not self._rolled_back:
            self._backend.make_current()
            self._collect(0)

    async def drive_launches(self, window_s: float, max_launches: int) -> int:
        """Outside the orchestrator (the GPU check): up to ``max_launches`` within ``window_s``; returns
        how many ran."""
        if max_launches <= 0:
            return 0
        return await anyio.to_thread.run_sync(self._drive_blocking, window_s, max_launches)

    async def rollback(self) -> RollbackReport:
        """Wait for launched work, free everything, release the context, then check through NVML.
        Idempotent: a second call only verifies."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._rollback_blocking)
            try:
                gone = await anyio.to_thread.run_sync(self._verify_gone_blocking)
            except CanaryError as exc:
                return RollbackReport(
                    verified=False,
                    detail=f"released; could not verify through NVML: {exc}",
                    memory_checked=False,
                )
        detail = "stream, module, scratch and context released"
        if not gone:
            detail += "; NVML still lists this process on the device"
        return RollbackReport(verified=gone, detail=detail, memory_checked=True)

    async def verify_gone(self) -> bool:
        """True when NVML shows no device memory held by this process after rollback."""
        return await anyio.to_thread.run_sync(self._verify_gone_blocking)


def make_cuda_executor(profile: WorkloadProfile, *, policy: Any = None, index: int = 0) -> CudaExecutor:
    """The factory the probe engine calls (``policy`` is accepted for symmetry; the stream priority
    is the device's least, not a policy setting)."""
    return CudaExecutor(profile, index=index)
