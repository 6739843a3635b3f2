"""What stage 1 claims must be what its inputs show.

Each case's expectation comes from the documents, not from canary's output: bookings are workloads
about to run (docs/hardfit.md, "Bookings are workloads about to run"); a device the occupancy rules
do not model is a fact about the world, answered *unknown* ("A device the catalog lacks"); no MIG
instance holds more memory than the whole device ("The HBM equation": missing even on the most
favourable reading is *no*); a profile's ``max_instances`` bounds how many instances of it exist
(NVIDIA MIG user guide; catalog); a number's source is what produced it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.admission import load_request
from canary.admission.decisions import hard_fit, hard_fit_decision
from canary.admission.flow import fit
from canary.backends import resolve_device
from canary.catalog import lookup
from canary.errors import InputError
from canary.hardfit import check, parse_regime
from canary.occupancy import MAX_BARRIERS_PER_BLOCK, UnmodelledDevice, check_cuda_launch, cuda_occupancy
from canary.policy import load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

GiB = 1 << 30
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
POLICY = load_policy("default")
PREFILL = str(EXAMPLES / "profiles" / "llm-prefill.yaml")
EMBEDDING = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def _profile(peak: int, *, mig: tuple[str, ...] = ()) -> WorkloadProfile:
    return WorkloadProfile(name="cand", version="1",
                           kernels=(KernelSpec(name="k", registers_per_thread=32, threads_per_block=128),),
                           sharing=SharingModes(mig_profiles=mig),
                           memory=MemoryEnvelope(reserved_bytes=min(peak, GiB), peak_bytes=peak))


# ----------------------------------------------------------------- 1, 6: "nothing else runs"

def test_a_fit_without_the_store_does_not_call_the_device_empty() -> None:
    # --no-store: the bookings were never read, so nothing says no booked workload is about to run.
    req = load_request("h100", PREFILL)
    cert = fit(req, None, NOW)
    assert cert.verdict == "admit"
    assert "nothing else runs" not in cert.reason
    assert "not read" in cert.reason and "--no-store" in cert.reason


def test_a_fit_that_read_no_bookings_may_call_the_device_empty() -> None:
    req = load_request("h100", PREFILL)
    decision = hard_fit_decision(req, hard_fit(req), booked_bytes=0)
    assert decision is not None and decision.reason == "fits, and nothing else runs on the device"


def test_unlisted_mps_clients_are_workloads_that_run() -> None:
    # The MPS server reports a client the snapshot does not list: something runs beside the candidate.
    req = load_request("h100", PREFILL)
    snap = req.snapshot.model_copy(update={"mps": MpsState(running=True, clients=1), "residents": ()})
    req = dataclasses.replace(req, device=dataclasses.replace(req.device, snapshot=snap))
    decision = hard_fit_decision(req, hard_fit(req), booked_bytes=0)
    assert decision is not None and "nothing else runs" not in decision.reason
    assert decision.verdict == "unknown" and "1 client" in decision.reason


def test_a_new_mig_instance_beside_others_is_not_an_empty_device() -> None:
    req = load_request("h100", EMBEDDING, regime="mig:1g.10gb")
    snap = req.snapshot.model_copy(update={"mig": MigState(enabled=True, instances=(
        MigInstance(profile="3g.40gb", start=4, size=4),)), "residents": ()})
    req = dataclasses.replace(req, device=dataclasses.replace(req.device, snapshot=snap))
    hard = hard_fit(req)
    assert hard.verdict == "yes", hard.findings
    decision = hard_fit_decision(req, hard, booked_bytes=0)
    assert decision is not None and decision.verdict == "admit"
    assert "nothing else runs" not in decision.reason and "1 other instance" in decision.reason


# ----------------------------------------------------------------- 2: a device the rules do not model

@pytest.mark.parametrize("device", ["k80", "p100"])
def test_a_catalogued_device_the_occupancy_rules_lack_is_unknown_in_stage_1(device: str) -> None:
    # cuda_occupancy.h 13.0 has tables for cc >= 7.0 only (docs/occupancy.md); K80 is 3.7, P100 6.0.
    req = load_request(device, EMBEDDING)
    hard = hard_fit(req)
    kernels = next(f for f in hard.findings if f.resource == "candidate_kernels")
    assert kernels.verdict == "unknown" and "not modelled" in kernels.detail
    assert hard.verdict == "unknown" and hard.limiting_resource == "candidate_kernels"


def test_occupancy_of_an_unmodelled_device_names_the_device_option() -> None:
    with pytest.raises(UnmodelledDevice) as info:
        check_cuda_launch(lookup("k80"), registers_per_thread=32, threads_per_block=128)
    assert info.value.field == "device" and "3.7" in info.value.problem


@pytest.mark.slow
def test_cli_unmodelled_device(tmp_path: Path) -> None:
    fit_proc = subprocess.run([*canary_cmd(), "fit", "k80", EMBEDDING, "--no-store"], capture_output=True,
                              text=True, env=cli_env(tmp_path), timeout=120)
    assert fit_proc.returncode == 3, fit_proc.stderr
    occ = subprocess.run([*canary_cmd(), "occupancy", "--device", "k80", "--regs", "32", "--threads", "128"],
                         capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert occ.returncode == 2 and "'--device'" in occ.stderr and "compute_capability" not in occ.stderr


# ----------------------------------------------------------------- 7: barriers are bounded on every device

def test_more_than_16_barriers_per_block_is_bad_input() -> None:
    # PTX bar.sync takes barrier ids 0..15: 16 named barriers per block on every architecture.
    assert MAX_BARRIERS_PER_BLOCK == 16
    h100 = lookup("h100")
    assert cuda_occupancy(h100, registers_per_thread=32, threads_per_block=128, barriers=16).active_blocks_per_sm == 4
    with pytest.raises(InputError) as info:
        cuda_occupancy(h100, registers_per_thread=32, threads_per_block=128, barriers=17)
    assert info.value.field == "barriers"


@pytest.mark.slow
def test_cli_refuses_65_barriers_naming_the_option(tmp_path: Path) -> None:
    proc = subprocess.run([*canary_cmd(), "occupancy", "--device", "h100", "--regs", "32", "--threads", "128",
                           "--barriers", "65"], capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 2 and "'--barriers'" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------- 3, 8: MIG memory

H100_PCIE_MIG = DeviceSnapshot(device_type="h100-pcie", compute_mode="DEFAULT", mig=MigState(enabled=True),
                               memory_total_bytes=80 * GiB, memory_used_bytes=0, source="file")


def test_a_mig_candidate_larger_than_the_whole_card_never_fits() -> None:
    # The catalog does not know 1g.10gb's memory on the H100 PCIe, but no instance holds more than 80 GiB.
    spec = lookup("h100-pcie")
    assert spec.mig_profile("1g.10gb").memory_bytes is None
    hard = check(H100_PCIE_MIG, spec, _profile(90 * GiB, mig=("1g.10gb",)), POLICY, parse_regime("mig:1g.10gb"))
    hbm = next(f for f in hard.findings if f.resource == "hbm")
    assert (hbm.verdict, hbm.shortfall) == ("no", "never")
    assert hard.verdict == "no"
    # below the total it stays unknown: the instance may hold that much or not
    small = check(H100_PCIE_MIG, spec, _profile(5 * GiB, mig=("1g.10gb",)), POLICY, parse_regime("mig:1g.10gb"))
    assert next(f for f in small.findings if f.resource == "hbm").verdict == "unknown"


def test_a_one_byte_mig_shortfall_shows_the_bytes() -> None:
    # H100 SXM 1g.10gb: 9.75 GiB (catalog), headroom max(1 GiB, 5 %) = 1 GiB: 8.75 GiB available.
    spec = lookup("h100")
    instance = spec.mig_profile("1g.10gb").memory_bytes
    assert instance is not None
    available = instance - POLICY.headroom_bytes(instance)
    peak = available - POLICY.per_context_overhead_bytes + 1
    snap = H100_PCIE_MIG.model_copy(update={"device_type": "h100-sxm"})
    hard = check(snap, spec, _profile(peak, mig=("1g.10gb",)), POLICY, parse_regime("mig:1g.10gb"))
    hbm = next(f for f in hard.findings if f.resource == "hbm")
    assert hbm.verdict == "no"
    assert f"({available} B)" in hbm.detail and f"({available + 1} B)" in hbm.detail


# ----------------------------------------------------------------- 4: instance-count limit

def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("instances", "field"), [
    pytest.param([("1g.10gb+me", 0), ("1g.10gb+me", 1)], "mig.instances[1].profile", id="two-plus-me"),
    pytest.param([("4g.40gb", 0), ("1g.10gb+me", 4), ("1g.10gb+me", 6)], "mig.instances[2].profile",
                 id="plus-me-after-another-profile"),
])
def test_more_instances_of_a_profile_than_it_allows_is_bad_input(
    tmp_path: Path, instances: list[tuple[str, int]], field: str,
) -> None:
    spec = lookup("h100")
    assert spec.mig_profile("1g.10gb+me").max_instances == 1
    path = _write(tmp_path, {"device_type": "h100-sxm", "memory_total_bytes": 80 * GiB, "memory_used_bytes": 0,
                             "source": "file", "mig": {"enabled": True, "instances": [
                                 {"profile": p, "start": s, "size": spec.mig_profile(p).memory_slices}
                                 for p, s in instances]}})
    with pytest.raises(InputError) as info:
        resolve_device(str(path))
    assert info.value.field == field and info.value.file == str(path) and "at most 1" in info.value.problem


def test_seven_1g_instances_are_still_valid(tmp_path: Path) -> None:
    path = _write(tmp_path, {"device_type": "h100-sxm", "memory_total_bytes": 80 * GiB, "memory_used_bytes": 0,
                             "source": "file", "mig": {"enabled": True, "instances": [
                                 {"profile": "1g.10gb", "start": s, "size": 1} for s in range(7)]}})
    assert len(resolve_device(str(path)).snapshot.mig.instances) == 7


# ----------------------------------------------------------------- 5: the memory's source

def test_a_simulated_device_cites_the_catalog_not_nvml() -> None:
    req = load_request("h100", PREFILL)
    total = next(t for t in next(f for f in hard_fit(req).findings if f.resource == "hbm").terms
                 if t.name == "total")
    assert total.value == lookup("h100").memory_bytes
    assert "NVML" not in total.source and "memory_bytes" in total.source and "nominal" in total.source


def test_a_snapshot_file_cites_the_file() -> None:
    hard = check(H100_PCIE_MIG.model_copy(update={"mig": MigState(enabled=False)}), lookup("h100-pcie"),
                 _profile(GiB), POLICY, parse_regime("timeslice"))
    hbm = next(f for f in hard.findings if f.resource == "hbm")
    total = next(t for t in hbm.terms if t.name == "total")
    assert "NVML" not in total.source and "snapshot file" in total.source
    assert "NVML" not in json.dumps([t.source for t in hbm.terms if t.name in ("total", "unlisted")])


def test_an_absent_static_shared_memory_is_said_to_be_assumed_zero(tmp_path: Path) -> None:
    """ptxas prints no 'bytes smem' for a kernel without static shared memory, so a profile that omits
    static_shared_bytes means 0 — and the finding says it was assumed, not declared."""
    from canary.admission import hard_fit

    doc = yaml.safe_load((EXAMPLES / "profiles" / "embedding-service.yaml").read_text())
    for k in doc["kernels"]:
        k.pop("static_shared_bytes", None)
    path = tmp_path / "noshm.yaml"
    path.write_text(yaml.safe_dump(doc))
    snap = str(EXAMPLES / "snapshots" / "a-persistent-35pct.yaml")
    shm = next(f for f in hard_fit(load_request(snap, str(path))).findings if f.resource == "shared_memory")
    assert "static smem not given, 0 assumed as ptxas omits zero" in shm.source
    declared = hard_fit(load_request(snap, str(EXAMPLES / "profiles" / "embedding-service.yaml")))
    assert all("not given" not in f.source for f in declared.findings)
