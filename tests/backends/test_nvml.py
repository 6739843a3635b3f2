"""NVML backend: mapping, unknown handling and error mapping on recorded pynvml values.

Shapes: nvidia-ml-py 13.615 structs (see tests/support/fake_nvml.py for each one's origin).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pynvml
import pytest

from canary.backends import nvml
from canary.backends._vendor import NVML_LIBRARY_MISSING
from canary.errors import DeviceUnavailable
from canary.snapshot import DeviceSnapshot
from tests.support.fake_nvml import FREE, H200_UUID, MIB, RESERVED, TOTAL, FakeNvml


def read(fake: FakeNvml, index: int = 0) -> DeviceSnapshot:
    slept: list[float] = []
    snap = nvml.read_snapshot(index, module=fake, sleep=slept.append)
    if "nvmlGpmSampleGet" in fake.calls and "nvmlGpmMetricsGet" in fake.calls:
        assert slept == [nvml.GPM_INTERVAL_S], "two GPM samples must be ≥ 100 ms apart"
    return snap


def test_h200_snapshot_maps_every_field() -> None:
    fake = FakeNvml()
    snap = read(fake)
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"
    assert snap.device_type == "h200"
    assert snap.source == "nvml"
    assert snap.uuid == H200_UUID
    assert snap.driver_version == "580.82.07"
    assert snap.cuda_driver_version == "13.0"
    assert snap.compute_mode == "DEFAULT"
    assert snap.memory_total_bytes == TOTAL
    assert snap.memory_reserved_bytes == RESERVED
    # compute allocations = total − free − reserved (gpu-facts §5), not NVML's "used"
    assert snap.memory_used_bytes == TOTAL - FREE - RESERVED
    assert snap.mig.enabled is False
    assert [r.name for r in snap.residents] == ["pid:4242", "pid:5151", "pid:6161"]
    assert snap.residents[0].observed_memory_bytes == 81 * 1024 * MIB
    assert all(r.profile is None for r in snap.residents)
    t = snap.telemetry
    assert t.utilization_gpu_pct is not None and t.utilization_gpu_pct.value == 97
    assert t.sm_occupancy_pct is not None and t.sm_occupancy_pct.value == pytest.approx(11.26)
    assert t.dram_active_pct is not None and t.dram_active_pct.value == pytest.approx(28.44)
    assert t.power_w is not None and t.power_w.value == pytest.approx(412.734)
    assert t.power_limit_w is not None and t.power_limit_w.value == 700
    assert t.temperature_c is not None and t.temperature_c.value == 61
    assert t.clock_event_reasons == ("gpu_idle", "sw_power_cap")


def test_unreported_process_memory_is_unknown_not_zero() -> None:
    snap = read(FakeNvml())
    bare = snap.residents[2]
    assert bare.pid == 6161 and bare.observed_memory_bytes is None
    assert "pid:6161" in " ".join(snap.unknown_reasons)


@pytest.mark.parametrize(
    ("failing_call", "field"),
    [
        ("nvmlDeviceGetComputeMode", "compute_mode"),
        ("nvmlDeviceGetUUID", "uuid"),
        ("nvmlDeviceGetMigMode", "mig"),
        ("nvmlDeviceGetComputeRunningProcesses", "residents"),
        ("nvmlDeviceGetPowerUsage", "telemetry.power_w"),
        ("nvmlDeviceGetCurrentClocksEventReasons", "telemetry.clock_event_reasons"),
        ("nvmlGpmQueryDeviceSupport", "telemetry.sm_occupancy_pct"),
    ],
)
@pytest.mark.parametrize(
    ("code", "words"),
    [(pynvml.NVML_ERROR_NOT_SUPPORTED, "not supported"), (pynvml.NVML_ERROR_NO_PERMISSION, "permission")],
)
def test_not_supported_or_no_permission_make_the_field_unknown(
    failing_call: str, field: str, code: int, words: str
) -> None:
    snap = read(FakeNvml(errors={failing_call: code}))
    assert field in snap.unknown_reasons
    assert words in snap.unknown_reasons[field]
    assert failing_call in snap.unknown_reasons[field]


def test_memory_v1_fallback_says_used_includes_reserve() -> None:
    snap = read(FakeNvml(errors={"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}))
    assert snap.memory_reserved_bytes is None
    assert snap.memory_used_bytes == TOTAL - FREE
    assert "includes the driver reserve" in snap.unknown_reasons["memory_reserved_bytes"]


def test_gpm_unsupported_device_leaves_occupancy_unknown() -> None:
    fake = FakeNvml(gpm_supported=0)
    snap = read(fake)
    assert snap.telemetry.sm_occupancy_pct is None and snap.telemetry.dram_active_pct is None
    assert "Hopper" in snap.unknown_reasons["telemetry.dram_active_pct"]
    assert "nvmlGpmSampleGet" not in fake.calls


def test_mig_instances_with_placements() -> None:
    # H200 with 3g.71gb at slices 0–3 and two 1g.18gb at 4 and 5 (lgip ids 9 and 19)
    fake = FakeNvml(mig_mode=[1, 1], mig_instances={9: [(2, 0, 4)], 19: [(9, 4, 1), (10, 5, 1)]})
    snap = read(fake)
    assert snap.mig.enabled is True
    assert [(m.profile, m.start, m.size, m.gpu_instance_id) for m in snap.mig.instances] == [
        ("3g.71gb", 0, 4, 2),
        ("1g.18gb", 4, 1, 9),
        ("1g.18gb", 5, 1, 10),
    ]


def test_unknown_model_keeps_nvml_name_and_says_so() -> None:
    snap = read(FakeNvml(name="NVIDIA Z9000 Prototype"))
    assert snap.device_type == "NVIDIA Z9000 Prototype"
    assert "not in the catalog" in snap.unknown_reasons["device_type"]


def test_transient_timeout_is_retried() -> None:
    fake = FakeNvml(errors={"nvmlDeviceGetUtilizationRates": [pynvml.NVML_ERROR_TIMEOUT] * 2})
    snap = read(fake)
    assert fake.calls.count("nvmlDeviceGetUtilizationRates") == 3
    assert snap.telemetry.utilization_gpu_pct is not None


def test_persistent_timeout_becomes_unknown_after_retries() -> None:
    fake = FakeNvml(errors={"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_TIMEOUT})
    snap = read(fake)
    assert fake.calls.count("nvmlDeviceGetUtilizationRates") == 3
    assert "Timeout" in snap.unknown_reasons["telemetry.utilization_gpu_pct"]


@pytest.mark.parametrize(
    ("call", "code", "message"),
    [
        ("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NVML_LIBRARY_MISSING),
        ("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        ("nvmlDeviceGetName", pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost"),
        ("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost"),
    ],
)
def test_fatal_errors_are_device_unavailable(call: str, code: int, message: str) -> None:
    fake = FakeNvml(errors={call: code})
    with pytest.raises(DeviceUnavailable, match=re.escape(message)):
        read(fake)
    if call != "nvmlInit":
        assert fake.calls[-1] == "nvmlShutdown", "NVML is shut down even when a read fails"


def test_missing_index_names_the_count() -> None:
    with pytest.raises(DeviceUnavailable, match=r"no NVIDIA GPU with index 3 \(this machine has 1\)"):
        read(FakeNvml(), index=3)


def test_real_pynvml_without_driver_is_device_unavailable() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:  # pragma: no cover - only on a GPU machine
        pynvml.nvmlShutdown()
        pytest.skip("this machine has the NVIDIA driver")
    with pytest.raises(DeviceUnavailable) as caught:
        nvml.read_snapshot(0)
    assert str(caught.value) == NVML_LIBRARY_MISSING


def test_cli_snapshot_nvml_exits_4_without_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "canary.cli", "snapshot", "nvml:0"], capture_output=True, text=True, timeout=60
    )
    if done.returncode == 0:  # pragma: no cover - only on a GPU machine
        pytest.skip("this machine has an NVIDIA GPU")
    assert done.returncode == 4
    assert done.stderr.strip() == f"canary: {NVML_LIBRARY_MISSING}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, ()),
        (0x1, ("gpu_idle",)),
        (0x48, ("hw_slowdown", "hw_thermal_slowdown")),
        (0x1000, ("bit_0x1000",)),
    ],
)
def test_clock_event_names(mask: int, names: tuple[str, ...]) -> None:
    assert nvml.clock_event_names(mask) == names


@pytest.mark.parametrize(("encoded", "text"), [(13000, "13.0"), (12040, "12.4"), (13040, "13.4")])
def test_cuda_version_text(encoded: int, text: str) -> None:
    assert nvml.cuda_version_text(encoded) == text


def test_live_gpu_the_catalog_lacks_resolves_to_an_uncatalogued_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvml:N on a model the catalog does not have is a fact, not bad input (only the driver is faked)."""
    from canary.backends import resolve_device

    real = nvml.read_snapshot
    fake = FakeNvml(name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    monkeypatch.setattr(nvml, "read_snapshot", lambda index: real(index, module=fake, sleep=lambda _s: None))
    device = resolve_device("nvml:0")
    assert device.kind == "nvml" and not device.spec.catalogued
    assert device.spec.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert device.spec.memory_bytes == TOTAL  # what NVML itself reported
    assert "not in the catalog" in device.snapshot.unknown_reasons["device_type"]
