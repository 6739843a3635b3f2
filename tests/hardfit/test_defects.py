"""One test per stage-1 defect found on snapshots shaped like what NVML and amdsmi really return.

Each failed before its fix: the reserve was subtracted twice, an unlisted context was read as
nobody there, a kernel that cannot launch was admitted outside mps/streams, block barriers never
reached the occupancy rules, a live GPU the catalog lacks was bad input, every AMD fit stopped at
an unknown compute mode, and impossible snapshots were accepted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.backends import nvml, resolve_device
from canary.catalog import lookup
from canary.errors import InputError
from canary.hardfit import check, parse_regime
from canary.policy import load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigState, MpsState, Resident
from tests.support.fake_nvml import FREE, MIB, TOTAL, FakeNvml
from tests.support.paths import canary_cmd, cli_env

GiB = 1 << 30
POLICY = load_policy("default")
CTX = POLICY.per_context_overhead_bytes
ROOT = Path(__file__).resolve().parents[2]


def candidate(peak: int, *kernels: KernelSpec) -> WorkloadProfile:
    return WorkloadProfile(name="cand", version="1", kernels=kernels,
                           sharing=SharingModes(mps_active_thread_pct=100, streams=True, green_sms=8,
                                                mig_profiles=("3g.40gb",)),
                           memory=MemoryEnvelope(reserved_bytes=min(peak, GiB), peak_bytes=peak))


def hbm_verdict(snap: DeviceSnapshot, peak: int) -> str:
    hard = check(snap, lookup(snap.device_type), candidate(peak), POLICY, parse_regime("timeslice"))
    return next(f.verdict for f in hard.findings if f.resource == "hbm")


def test_driver_reserve_is_subtracted_once_on_an_nvml_v2_reading() -> None:
    # H200, NVML v2: total = reserved + used + free. One listed process holds 100000 MiB; the rest of
    # `used` belongs to nobody listed. Whatever is listed, the candidate gets at most FREE − headroom.
    snap = nvml.read_snapshot(0, module=FakeNvml(processes=[(4242, 100000 * MIB)]), sleep=lambda _s: None)
    headroom = int(TOTAL * 5 / 100)  # policy default: 5 % (> the 1 GiB floor)
    at_limit = FREE - headroom - CTX
    assert hbm_verdict(snap, at_limit) == "yes"
    assert hbm_verdict(snap, at_limit + 1) == "no"  # before: admitted up to the 549 MiB reserve more


def test_nvml_v1_used_includes_the_reserve_and_is_not_reduced_again() -> None:
    fake = FakeNvml(processes=[(4242, 100000 * MIB)], errors={"nvmlDeviceGetMemoryInfo_v2": 3})  # v2 NOT_SUPPORTED
    snap = nvml.read_snapshot(0, module=fake, sleep=lambda _s: None)
    assert snap.memory_used_includes_reserve and snap.memory_reserved_bytes is None
    at_limit = FREE - int(TOTAL * 5 / 100) - CTX  # v1: total − used = free, exactly
    assert hbm_verdict(snap, at_limit) == "yes"
    assert hbm_verdict(snap, at_limit + 1) == "no"


def _bare_device(mode: str, used: int) -> DeviceSnapshot:
    return DeviceSnapshot(device_type="h100-sxm", compute_mode=mode, mig=MigState(enabled=False),  # type: ignore[arg-type]
                          mps=MpsState(running=False, clients=0), memory_total_bytes=80 * GiB,
                          memory_used_bytes=used, memory_reserved_bytes=600 << 20, green_partitions_sms=(),
                          source="nvml")


@pytest.mark.parametrize(("mode", "verdict", "limiting"), [
    pytest.param("EXCLUSIVE_PROCESS", "no", "compute_mode", id="exclusive-unlisted-context-holds-the-device"),
    pytest.param("DEFAULT", "unknown", "unlisted_context", id="default-unlisted-context-is-an-unprofiled-resident"),
])
def test_memory_in_use_with_no_listed_process_is_a_context(mode: str, verdict: str, limiting: str) -> None:
    snap = _bare_device(mode, 12 * GiB)  # 12 GiB in use; NVML lists nobody (another container)
    hard = check(snap, lookup("h100-sxm"), candidate(GiB), POLICY, parse_regime("timeslice"))
    assert (hard.verdict, hard.limiting_resource) == (verdict, limiting)


@pytest.mark.parametrize("regime", ["timeslice", "green:16", "mig:3g.40gb", "mps:100", "streams"])
@pytest.mark.parametrize(("kernel", "limiting"), [
    pytest.param(KernelSpec(name="fat", registers_per_thread=65, threads_per_block=1024), "registers",
                 id="1024x65-registers"),
    pytest.param(KernelSpec(name="smem", registers_per_thread=32, threads_per_block=128,
                            static_shared_bytes=1 << 20), "shared_memory", id="1MiB-static-smem"),
])
def test_a_kernel_that_cannot_launch_is_rejected_in_every_regime(regime: str, kernel: KernelSpec, limiting: str) -> None:
    snap = _bare_device("DEFAULT", 0)
    if regime.startswith("mig"):
        snap = snap.model_copy(update={"mig": MigState(enabled=True)})
    if regime.startswith("mps"):
        snap = snap.model_copy(update={"mps": MpsState(running=True, clients=0, max_clients=48,
                                                       pinned_memory_limit_bytes=80 * GiB)})
    hard = check(snap, lookup("h100-sxm"), candidate(GiB, kernel), POLICY, parse_regime(regime))
    assert hard.verdict == "no"
    assert any(f.resource == limiting and f.verdict == "no" for f in hard.findings)


def test_block_barriers_reach_the_occupancy_rules() -> None:
    # 4 barriers per block on sm_90: 64 barrier slots / 4 = 16 blocks per SM (not the 32-block cap).
    spec = lookup("h100-sxm")
    k = KernelSpec(name="k", registers_per_thread=16, threads_per_block=32, barriers=4)
    res_kernel = k.model_copy(update={"persistent": True, "grid_blocks": 16 * spec.sm_count, "name": "r"})
    res = WorkloadProfile(name="res", version="1", kernels=(res_kernel,), sharing=SharingModes(mps_active_thread_pct=100),
                          memory=MemoryEnvelope(reserved_bytes=GiB, peak_bytes=GiB))
    snap = _bare_device("DEFAULT", GiB).model_copy(update={
        "mps": MpsState(running=True, clients=1, max_clients=48, pinned_memory_limit_bytes=80 * GiB),
        "residents": (Resident(name="res", profile=res, observed_memory_bytes=GiB, mps_active_thread_pct=100),)})
    hard = check(snap, spec, candidate(GiB, k), POLICY, parse_regime("mps:100"))
    assert hard.limiting_resource == "barriers" and hard.verdict == "no"


def test_the_simulator_and_stage_1_use_the_same_occupancy_call() -> None:
    from canary.occupancy import kernel_occupancy
    from canary.sim.model import derive_traits

    spec = lookup("h100-sxm")
    k = KernelSpec(name="k", registers_per_thread=16, threads_per_block=32, barriers=4, grid_blocks=10_000)
    prof = WorkloadProfile(name="w", version="1", kernels=(k,), memory=MemoryEnvelope(reserved_bytes=GiB, peak_bytes=GiB))
    traits = derive_traits(prof, spec, kernel_time_us=100.0)
    assert traits.residency[0].blocks_per_sm == kernel_occupancy(spec, k).active_blocks_per_sm == 16


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


LIVE_UNCATALOGUED = {
    "device_type": "NVIDIA H300 Engineering Sample", "uuid": "GPU-00000000-0000-4000-8000-000000000001",
    "compute_mode": "DEFAULT", "mig": {"enabled": False}, "mps": {"running": False, "clients": 0},
    "memory_total_bytes": 96 * GiB, "memory_used_bytes": 0, "memory_reserved_bytes": 600 << 20,
    "green_partitions_sms": [], "source": "nvml",
}


def test_a_live_gpu_the_catalog_lacks_is_unknown_not_bad_input(tmp_path: Path) -> None:
    path = _write(tmp_path, "live.yaml", LIVE_UNCATALOGUED)
    device = resolve_device(str(path))
    assert not device.spec.catalogued and device.spec.memory_bytes == 96 * GiB
    k = KernelSpec(name="k", registers_per_thread=32, threads_per_block=128)
    hard = check(device.snapshot, device.spec, candidate(GiB, k), POLICY, parse_regime("timeslice"))
    assert hard.verdict == "unknown" and hard.limiting_resource == "candidate_kernels"
    assert next(f for f in hard.findings if f.resource == "hbm").verdict == "yes"  # NVML's numbers settle HBM
    too_big = check(device.snapshot, device.spec, candidate(96 * GiB, k), POLICY, parse_regime("timeslice"))
    assert too_big.verdict == "no" and too_big.limiting_resource == "hbm"


@pytest.mark.slow
def test_cli_uncatalogued_live_snapshot_exits_3_and_a_typo_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, "live.yaml", LIVE_UNCATALOGUED)
    prof = ROOT / "examples" / "profiles" / "llm-decode.yaml"
    proc = subprocess.run([*canary_cmd(), "fit", str(path), str(prof), "--json"], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 3, proc.stderr
    cert = json.loads(proc.stdout)
    assert cert["hard_fit"] == "unknown" and "not in the catalog" in json.dumps(cert["findings"])
    typo = subprocess.run([*canary_cmd(), "fit", "h100-sxn", str(prof)], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120)
    assert typo.returncode == 2 and "h100-sxm" in typo.stderr and "Traceback" not in typo.stderr


def test_amd_has_no_compute_mode_to_be_unknown_about() -> None:
    snap = DeviceSnapshot(device_type="mi300x", mig=MigState(enabled=False), mps=MpsState(running=None),
                          memory_total_bytes=192 * GiB, memory_used_bytes=GiB, green_partitions_sms=(),
                          residents=(Resident(name="pid:1", observed_memory_bytes=GiB),), source="rocm",
                          unknown_reasons={"compute_mode": "AMD GPUs have no CUDA compute mode"})
    hard = check(snap, lookup("mi300x"), candidate(GiB), POLICY, parse_regime("timeslice"))
    assert next(f for f in hard.findings if f.resource == "compute_mode").verdict == "yes"
    assert hard.verdict == "yes"


H100 = {"device_type": "h100-sxm", "compute_mode": "DEFAULT", "memory_total_bytes": 80 * GiB,
        "memory_used_bytes": 0, "memory_reserved_bytes": 600 << 20, "source": "file"}
MIG_ON = {"enabled": True}


@pytest.mark.parametrize(("doc", "field", "words"), [
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "3g.40gb", "start": 0, "size": 4},
                                                  {"profile": "1g.10gb", "start": 3, "size": 1}]}},
                 "mig.instances[1]", "overlap", id="overlapping-instances"),
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "3g.40gb", "start": 2, "size": 4}]}},
                 "mig.instances[0].start", "valid starts", id="instance-not-at-a-valid-start"),
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "1g.20gb", "start": 7, "size": 2}]}},
                 "mig.instances[0]", "past the last", id="two-slice-instance-past-the-last-slice"),
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "1g.10gb", "start": 8, "size": 1}]}},
                 "mig.instances[0]", "slice", id="instance-past-the-last-slice"),
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "3g.71gb", "start": 0, "size": 4}]}},
                 "mig.instances[0].profile", "no MIG profile", id="profile-the-device-does-not-have"),
    pytest.param({"mig": {**MIG_ON, "instances": [{"profile": "3g.40gb", "start": 0, "size": 4}]},
                  "residents": [{"name": "a", "mig_instance": "3g.40gb@4", "observed_memory_bytes": GiB}]},
                 "residents[0].mig_instance", "does not list", id="resident-in-a-missing-instance"),
    pytest.param({"mig": {"enabled": False, "instances": [{"profile": "3g.40gb", "start": 0, "size": 4}]}},
                 "mig.instances", "mig.enabled is false", id="instances-while-mig-disabled"),
    pytest.param({"residents": [{"name": "a", "observed_memory_bytes": 81 * GiB}]},
                 "residents[0].observed_memory_bytes", "more than the device", id="resident-above-the-card"),
    pytest.param({"memory_total_bytes": None, "residents": [{"name": "a", "observed_memory_bytes": 81 * GiB}]},
                 "residents[0].observed_memory_bytes", "more than the device", id="resident-above-the-catalog-total"),
    pytest.param({"mps": {"running": True, "clients": 49, "max_clients": 48}}, "mps.clients", "above",
                 id="mps-clients-above-limit"),
    pytest.param({"green_partitions_sms": [128, 8]}, "green_partitions_sms", "has 132", id="green-sms-above-device"),
    pytest.param({"partition": {"compute": "CPX"}}, "partition.compute", "no compute partition mode",
                 id="amd-partition-on-an-nvidia-device"),
    pytest.param({"device_type": "mi300x", "compute_mode": None, "memory_reserved_bytes": None,
                  "memory_total_bytes": 64 * GiB, "partition": {"compute": "CPX", "memory": "NPS4"}},
                 "memory_total_bytes", "at most", id="nps4-partition-above-a-quarter"),
])
def test_inconsistent_snapshots_are_input_errors(tmp_path: Path, doc: dict[str, Any], field: str, words: str) -> None:
    path = _write(tmp_path, "bad.yaml", {**H100, **doc})
    with pytest.raises(InputError) as info:
        resolve_device(str(path))
    assert info.value.field == field and info.value.file == str(path)
    assert words in info.value.problem


@pytest.mark.slow
def test_cli_rejects_an_inconsistent_snapshot_with_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.yaml", {**H100, "mig": {**MIG_ON, "instances": [
        {"profile": "3g.40gb", "start": 0, "size": 4}, {"profile": "3g.40gb", "start": 0, "size": 4}]}})
    proc = subprocess.run([*canary_cmd(), "fit", str(path), str(ROOT / "examples" / "profiles" / "llm-decode.yaml")],
                          capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert str(path) in proc.stderr and "mig.instances[1]" in proc.stderr and "Traceback" not in proc.stderr
