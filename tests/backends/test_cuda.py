"""CUDA driver backend and the ``cuda`` canary executor, on recorded cuda-python returns.

Shapes: cuda-bindings 13.x tuples ``(CUresult, *outputs)`` (tests/support/fake_cuda.py). The real
library is also exercised: on this machine its first call raises ``DynamicLibNotFoundError``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cuda.bindings import driver as real

from canary.backends import cuda
from canary.backends._vendor import CUDA_LIBRARY_MISSING
from canary.catalog import lookup
from canary.errors import DeviceUnavailable, InputError, ProbeError
from canary.probe.executors.cuda import CudaExecutor
from canary.probe.interfaces import ExposureGate
from canary.profile import CanarySpec, KernelSpec, MemoryEnvelope, WorkloadProfile
from tests.support.fake_cuda import H200_TOTAL_MEM, FakeCudaDriver
from tests.support.fake_nvml import FakeNvml


def _no_driver() -> bool:
    try:
        real.cuInit(0)
    except RuntimeError:
        return True
    return False


def test_device_attributes_match_the_h200_catalog_entry() -> None:
    attrs = cuda.device_attributes(0, module=FakeCudaDriver())
    assert attrs["sm_count"] == 132 and attrs["compute_capability"] == (9, 0)
    assert attrs["memory_bytes"] == H200_TOTAL_MEM
    assert attrs["memory_bandwidth_bytes_per_s"] == pytest.approx(2 * 3201e6 * 6144 / 8)
    assert cuda.compare_with_catalog(lookup("h200"), attrs) == []


def test_compare_reports_disagreement_and_unknown() -> None:
    fake = FakeCudaDriver()
    fake.attributes[real.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 114
    del fake.attributes[real.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK]
    mismatches = {
        m.field: m for m in cuda.compare_with_catalog(lookup("h200"), cuda.device_attributes(0, module=fake))
    }
    assert set(mismatches) == {"sm_count", "reserved_shared_memory_per_block_bytes"}
    assert (mismatches["sm_count"].catalog, mismatches["sm_count"].device) == (132, 114)
    assert mismatches["reserved_shared_memory_per_block_bytes"].unknown


def test_snapshot_says_what_the_driver_api_cannot_see() -> None:
    snap = cuda.read_snapshot(0, module=FakeCudaDriver())
    assert (snap.device_type, snap.source, snap.compute_mode) == ("h200", "cuda", "DEFAULT")
    assert snap.uuid == "GPU-5e1a3c1e-8f0b-4d5e-9b9c-2f64d1e0a7b1"
    assert snap.cuda_driver_version == "13.0"
    assert snap.memory_total_bytes == H200_TOTAL_MEM and snap.memory_used_bytes is None
    for field in ("memory_used_bytes", "residents", "mig", "telemetry", "driver_version"):
        assert "nvml:N" in snap.unknown_reasons[field]


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (real.CUresult.CUDA_ERROR_NO_DEVICE, "no CUDA-capable GPU"),
        (real.CUresult.CUDA_ERROR_STUB_LIBRARY, "stub"),
        (real.CUresult.CUDA_ERROR_DEVICE_UNAVAILABLE, "GPU is unavailable"),
        (real.CUresult.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "differ in version"),
    ],
)
def test_init_error_codes_are_device_unavailable(code: object, words: str) -> None:
    with pytest.raises(DeviceUnavailable, match=words):
        cuda.read_snapshot(0, module=FakeCudaDriver(init_error=code))


def test_missing_index() -> None:
    with pytest.raises(DeviceUnavailable, match="no CUDA device with index 2"):
        cuda.read_snapshot(2, module=FakeCudaDriver())


@pytest.mark.skipif(not _no_driver(), reason="this machine has libcuda")
def test_real_cuda_python_without_libcuda() -> None:
    with pytest.raises(DeviceUnavailable) as caught:
        cuda.read_snapshot(0)
    assert str(caught.value).startswith(CUDA_LIBRARY_MISSING)
    with pytest.raises(DeviceUnavailable):
        cuda.load_kernels(Path(__file__))
    done = subprocess.run(
        [sys.executable, "-m", "canary.cli", "snapshot", "cuda:0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 4 and "libcuda" in done.stderr and "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- executor


def candidate(tmp_path: Path, **canary: object) -> WorkloadProfile:
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF recorded cubin bytes")
    spec = {
        "executor": "cuda",
        "cubin": str(cubin),
        "kernel": "tiled_candidate",
        "grid_blocks": 264,
        **canary,
    }
    return WorkloadProfile(
        name="tiled",
        version="sha256:" + "0" * 64,
        memory=MemoryEnvelope(reserved_bytes=64 << 20, peak_bytes=64 << 20),
        kernels=(
            KernelSpec(
                name="tiled_candidate",
                registers_per_thread=10,
                threads_per_block=256,
                static_shared_bytes=40960,
            ),
        ),
        canary=CanarySpec.model_validate(spec),
    )


@pytest.mark.anyio
async def test_executor_uses_least_priority_stream_and_respects_the_gate(tmp_path: Path) -> None:
    fake, nvml = FakeCudaDriver(), FakeNvml(processes=[(999999, 1 << 20)])
    executor = CudaExecutor(candidate(tmp_path), module=fake, nvml_module=nvml)
    assert await executor.prepare("probe-1") is None
    await executor.start()
    (priority,) = fake.streams.values()
    assert priority == 0, "least priority = the larger number of cuCtxGetStreamPriorityRange (0, -5)"
    gate = ExposureGate(5)
    await executor.drive(10.0, gate)
    assert gate.used == 5 and len(fake.launches) == 5
    launch = fake.launches[0]
    assert (launch["grid"], launch["block"], launch["smem"]) == (264, 256, 0)
    assert launch["params"][0][1] == 64 << 20, "scratch size = the profile's reserved memory"
    assert executor.launch_times_ms == [0.25] * 5
    report = await executor.rollback()
    assert report.verified and report.memory_checked
    assert fake.allocated == set() and fake.streams == {} and fake.primary_refs == 0
    again = await executor.rollback()
    assert again.verified, "rollback is idempotent"


@pytest.mark.anyio
async def test_rollback_not_verified_while_nvml_lists_us(tmp_path: Path) -> None:
    import os

    executor = CudaExecutor(
        candidate(tmp_path), module=FakeCudaDriver(), nvml_module=FakeNvml(processes=[(os.getpid(), 1 << 20)])
    )
    await executor.prepare("p")
    report = await executor.rollback()
    assert not report.verified and "still lists" in report.detail


@pytest.mark.anyio
async def test_executor_launch_failure_cleans_up(tmp_path: Path) -> None:
    fake = FakeCudaDriver(fail={"cuModuleLoadData": real.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU})
    executor = CudaExecutor(candidate(tmp_path), module=fake)
    with pytest.raises(ProbeError, match="CUDA_ERROR_NO_BINARY_FOR_GPU"):
        await executor.prepare("p")
    assert fake.streams == {} and fake.primary_refs == 0


@pytest.mark.anyio
@pytest.mark.skipif(not _no_driver(), reason="this machine has libcuda")
async def test_executor_without_driver_is_device_unavailable(tmp_path: Path) -> None:
    executor = CudaExecutor(candidate(tmp_path))
    with pytest.raises(DeviceUnavailable, match="libcuda"):
        await executor.prepare("p")


def test_executor_needs_the_kernel_in_the_profile(tmp_path: Path) -> None:
    profile = candidate(tmp_path, kernel="absent")
    with pytest.raises(ProbeError, match="lists no kernel 'absent'"):
        CudaExecutor(profile, module=FakeCudaDriver())


def test_green_context_split_rounds_to_the_alignment() -> None:
    from tests.support.fake_cuda import FakeGreenContexts

    split = cuda.green_context_split(0, 30, module=FakeGreenContexts())
    assert split.group_sm_count == (32, 32, 32, 32)
    assert (split.groups, split.remaining_sms, split.min_partition_sms, split.sm_alignment) == (4, 4, 8, 8)


def test_green_context_split_larger_than_the_device() -> None:
    from tests.support.fake_cuda import FakeGreenContexts

    with pytest.raises(InputError, match="132 SMs, fewer than 200"):
        cuda.green_context_split(0, 200, module=FakeGreenContexts())
