"""Demand computed once, numbers on the fit result, and *no* split into short ``now`` / ``never``.

Expectations come from the policy file (``policies/default.yaml``: headroom max(1 GiB, 5% of
total), 512 MiB per context), the catalog (H100 SXM: 80 GiB, 132 SMs, green partitions in groups of
8; A100 80GB: 3g.40gb holds 39.25 GiB, placements {0,4}:4) and NVIDIA's MIG placement rules — never
from canary's own output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from canary.catalog import lookup
from canary.certificate import Finding, HardFit
from canary.hardfit import check, parse_regime
from canary.policy import load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.render import findings_table
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState, Resident

MiB, GiB = 1 << 20, 1 << 30
POLICY = load_policy("default")
CONTEXT = 512 * MiB
H100_TOTAL = 80 * GiB
H100_RESERVE = GiB  # stated by the snapshots below
H100_HEADROOM = 4 * GiB  # 5% of 80 GiB > 1 GiB
EMPTY_H100 = H100_TOTAL - H100_RESERVE - H100_HEADROOM  # 75 GiB for everything
SHARING = SharingModes(timeslice=True, streams=True, mps_active_thread_pct=100, mig_profiles=("3g.40gb", "1g.10gb"),
                       green_sms=8)


def cand(peak: int, *, sharing: SharingModes = SHARING, kernels: tuple[KernelSpec, ...] = ()) -> WorkloadProfile:
    return WorkloadProfile(name="cand", version="1", sharing=sharing, kernels=kernels,
                           memory=MemoryEnvelope(reserved_bytes=min(peak, GiB), peak_bytes=peak))


def snap(device: str = "h100-sxm", **kw: Any) -> DeviceSnapshot:
    base: dict[str, Any] = dict(device_type=device, compute_mode="DEFAULT", mig=MigState(enabled=False),
                                mps=MpsState(running=False, clients=0), memory_total_bytes=lookup(device).memory_bytes,
                                memory_used_bytes=0, memory_reserved_bytes=H100_RESERVE, green_partitions_sms=())
    base.update(kw)
    return DeviceSnapshot(**base)


def fit(s: DeviceSnapshot, c: WorkloadProfile, regime: str = "timeslice", reserved: int | None = 0) -> HardFit:
    return check(s, lookup(s.device_type), c, POLICY, parse_regime(regime), reserved_bytes_by_others=reserved)


def one(hard: HardFit, resource: str) -> Finding:
    return next(f for f in hard.findings if f.resource == resource)


def test_the_policy_numbers_these_tests_rely_on() -> None:
    assert POLICY.per_context_overhead_bytes == CONTEXT
    assert POLICY.headroom_bytes(H100_TOTAL) == H100_HEADROOM
    assert lookup("h100-sxm").memory_bytes == H100_TOTAL


def test_demand_is_peak_plus_one_context_everywhere() -> None:
    hard = fit(snap(), cand(10 * GiB))
    assert hard.memory_demand_bytes == 10 * GiB + CONTEXT
    assert one(hard, "hbm").demand == 10 * GiB + CONTEXT
    mig = fit(snap("a100-80gb", mig=MigState(enabled=True)), cand(10 * GiB), "mig:3g.40gb")
    assert mig.memory_demand_bytes == one(mig, "hbm").demand == 10 * GiB + CONTEXT


@pytest.mark.parametrize(("resident_gib", "reserved_gib"), [(0, 0), (40, 0), (40, 5)])
def test_bookable_memory_is_the_balance_before_other_bookings(resident_gib: int, reserved_gib: int) -> None:
    residents = (Resident(name="r", observed_memory_bytes=resident_gib * GiB),) if resident_gib else ()
    hard = fit(snap(residents=residents, memory_used_bytes=resident_gib * GiB), cand(GiB), reserved=reserved_gib * GiB)
    assert hard.bookable_memory_bytes == EMPTY_H100 - resident_gib * GiB
    assert one(hard, "hbm").available == EMPTY_H100 - resident_gib * GiB - reserved_gib * GiB


def test_bookable_memory_is_unknown_when_a_term_is() -> None:
    hard = fit(snap(residents=(Resident(name="ghost"),)), cand(GiB))
    assert hard.bookable_memory_bytes is None
    # Unknown bookings leave the capacity they share known (the fit itself is then unknown).
    unread = fit(snap(), cand(GiB), reserved=None)
    assert unread.bookable_memory_bytes == EMPTY_H100 and one(unread, "hbm").verdict == "unknown"


def test_mig_carries_the_placement_and_the_instance_memory_as_numbers() -> None:
    """3g.40gb at 0 is taken, so the new one starts at slice 4; its memory is 39.25 GiB less 1.9625 GiB (5%)."""
    s = snap("a100-80gb", mig=MigState(enabled=True, instances=(MigInstance(profile="3g.40gb", start=0, size=4),)))
    hard = fit(s, cand(10 * GiB), "mig:3g.40gb")
    assert hard.verdict == "yes"
    assert hard.mig_placement is not None
    assert (hard.mig_placement.profile, hard.mig_placement.start, hard.mig_placement.size) == ("3g.40gb", 4, 4)
    assert hard.mig_placement.instance == "3g.40gb@4"
    instance = int(39.25 * GiB)
    assert hard.bookable_memory_bytes == instance - int(instance * 0.05)
    assert one(hard, "mig_placement").placement == hard.mig_placement


def test_no_placement_means_no_placement_on_the_result() -> None:
    s = snap("a100-80gb", mig=MigState(enabled=True, instances=(MigInstance(profile="1g.10gb", start=1, size=1),
                                                                MigInstance(profile="1g.10gb", start=5, size=1))))
    hard = fit(s, cand(GiB), "mig:3g.40gb")
    assert hard.mig_placement is None
    assert one(hard, "mig_placement").shortfall == "now"


# 1024 threads × 255 registers = 261,120 registers: over the 64 Ki registers a block may hold on every
# compute capability from 5.0 on (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
BIG_BLOCK = KernelSpec(name="huge", threads_per_block=1024, registers_per_thread=255)


@pytest.mark.parametrize(("case", "resource", "shortfall"), [
    # HBM: the empty device offers 75 GiB − 0.5 GiB context to the candidate's peak.
    pytest.param(dict(c=cand(EMPTY_H100 - CONTEXT)), "hbm", None, id="hbm-exactly-the-empty-device"),
    pytest.param(dict(c=cand(EMPTY_H100 - CONTEXT + 1)), "hbm", "never", id="hbm-one-byte-over-the-empty-device"),
    pytest.param(dict(c=cand(40 * GiB), s=snap(residents=(Resident(name="r", observed_memory_bytes=40 * GiB),),
                                             memory_used_bytes=40 * GiB)), "hbm", "now", id="hbm-short-while-a-resident-holds-40"),
    pytest.param(dict(c=cand(40 * GiB), reserved=40 * GiB), "hbm", "now", id="hbm-short-while-booked"),
    pytest.param(dict(c=cand(100 * GiB), s=snap(residents=(Resident(name="ghost"),))), "hbm", "never",
                 id="hbm-unknown-resident-but-over-the-empty-device"),
    # MIG: a new instance holds only itself.
    pytest.param(dict(c=cand(39 * GiB), s=snap("a100-80gb", mig=MigState(enabled=True)), regime="mig:3g.40gb"),
                 "hbm", "never", id="mig-instance-too-small"),
    pytest.param(dict(c=cand(GiB), s=snap("a100-80gb", mig=MigState(enabled=False)), regime="mig:3g.40gb"),
                 "mig_placement", "now", id="mig-disabled"),
    pytest.param(dict(c=cand(GiB), s=snap("a100-80gb", mig=MigState(enabled=True)), regime="mig:9g.1tb"),
                 "mig_placement", "never", id="mig-profile-not-on-this-device"),
    pytest.param(dict(c=cand(GiB), s=snap("v100-sxm2-16gb", mig=MigState(enabled=True)), regime="mig:1g.10gb"),
                 "mig_placement", "never", id="device-without-mig"),
    # Green contexts: 132 SMs in groups of 8 → at most 128 in one partition.
    pytest.param(dict(c=cand(GiB), regime="green:128"), "green_sms", None, id="green-whole-device"),
    pytest.param(dict(c=cand(GiB), regime="green:129"), "green_sms", "never", id="green-over-the-device"),
    pytest.param(dict(c=cand(GiB), regime="green:64", s=snap(green_partitions_sms=(72,))), "green_sms", "now",
                 id="green-others-hold-72"),
    # Modes and declarations.
    pytest.param(dict(c=cand(GiB, sharing=SharingModes(timeslice=False))), "sharing_mode", "never",
                 id="candidate-refuses-the-regime"),
    pytest.param(dict(c=cand(GiB), s=snap(compute_mode="PROHIBITED")), "compute_mode", "now", id="compute-prohibited"),
    pytest.param(dict(c=cand(GiB), regime="mps:50"), "mps_server", "now", id="mps-not-running"),
    pytest.param(dict(c=cand(GiB, kernels=(BIG_BLOCK,))), "registers", "never", id="kernel-cannot-launch"),
])
def test_shortfall(case: dict[str, Any], resource: str, shortfall: str | None) -> None:
    hard = fit(case.get("s", snap()), case["c"], case.get("regime", "timeslice"), case.get("reserved", 0))
    f = one(hard, resource)
    assert f.shortfall == shortfall
    assert (f.verdict == "no") == (shortfall is not None)


def test_every_no_says_now_or_never() -> None:
    with pytest.raises(ValueError, match="now or never"):
        from canary.hardfit._context import finding

        finding("hbm", 1, 0, "bytes", "no", "test")


def test_a_shortfall_on_a_yes_is_refused() -> None:
    with pytest.raises(ValueError, match="shortfall"):
        Finding(resource="hbm", demand=1, available=2, unit="bytes", verdict="yes", source="t", shortfall="now")


def test_shortfall_in_the_table_and_the_json() -> None:
    hard = fit(snap(), cand(100 * GiB))
    table = findings_table(hard.findings, hard.limiting_resource)
    assert "NO (never)" in next(line for line in table.splitlines() if "hbm" in line)
    doc = json.loads(hard.model_dump_json())
    assert next(f for f in doc["findings"] if f["resource"] == "hbm")["shortfall"] == "never"
    assert doc["memory_demand_bytes"] == 100 * GiB + CONTEXT


def test_figures_that_round_alike_show_their_bytes_in_the_table() -> None:
    """9,395,240,961 B against 9,395,240,960 B both print as 8.8 GiB; beside NO the table must show
    the byte that is missing, and figures that differ visibly stay short."""
    short = Finding(resource="hbm", demand=9_395_240_961, available=9_395_240_960, unit="bytes", verdict="no",
                    source="t", shortfall="never")
    line = next(x for x in findings_table([short], "hbm").splitlines() if "hbm" in x)
    assert "(9,395,240,961 B)" in line and "(9,395,240,960 B)" in line
    clear = Finding(resource="hbm", demand=10 * GiB, available=8 * GiB, unit="bytes", verdict="no", source="t",
                    shortfall="never")
    assert " B)" not in findings_table([clear], "hbm")
