"""Table-driven stage-1 checks: compute mode, sharing modes, HBM terms and unknowns, MIG, MPS, green."""

from __future__ import annotations

from typing import Any

import pytest

from canary.catalog import lookup
from canary.hardfit import RESOURCE_ORDER, check, parse_regime
from canary.policy import load_policy
from canary.profile import MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState, Resident

GiB = 1 << 30
POLICY = load_policy("default")  # headroom max(1 GiB, 5%), context cost 512 MiB


def profile(name: str = "cand", peak_gib: float = 10, **kw: Any) -> WorkloadProfile:
    sharing = kw.pop("sharing", SharingModes(mps_active_thread_pct=50, mig_profiles=("3g.40gb", "1g.10gb")))
    mem = kw.pop("memory", MemoryEnvelope(reserved_bytes=int(peak_gib * GiB), peak_bytes=int(peak_gib * GiB)))
    return WorkloadProfile(name=name, version="v1", memory=mem, sharing=sharing, **kw)


def snapshot(**kw: Any) -> DeviceSnapshot:
    base: dict[str, Any] = dict(device_type="h100-sxm", compute_mode="DEFAULT", mig=MigState(enabled=False),
                                mps=MpsState(running=False, clients=0), memory_total_bytes=80 * GiB,
                                memory_used_bytes=0, memory_reserved_bytes=GiB)
    base.update(kw)
    return DeviceSnapshot(**base)


def run(snap: DeviceSnapshot, cand: WorkloadProfile, regime: str = "timeslice", reserved: int | None = 0):
    return check(snap, lookup(snap.device_type), cand, POLICY, parse_regime(regime), reserved_bytes_by_others=reserved)


def hbm(hard):  # type: ignore[no-untyped-def]
    return next(f for f in hard.findings if f.resource == "hbm")


# total 80 GiB − reserve 1 − headroom 4 (5%) = 75 GiB for residents + candidate (+0.5 context)
@pytest.mark.parametrize(("residents", "cand_gib", "reserved_gib", "verdict"), [
    ((), 74.0, 0, "yes"),
    ((), 74.6, 0, "no"),
    ((Resident(name="bare", observed_memory_bytes=40 * GiB),), 34, 0, "yes"),
    ((Resident(name="bare", observed_memory_bytes=40 * GiB),), 35, 0, "no"),
    ((Resident(name="bare", observed_memory_bytes=40 * GiB),), 30, 5, "no"),  # another admission's booking
    ((Resident(name="ghost"),), 10, 0, "unknown"),  # no profile, no observed memory
    ((Resident(name="ghost"),), 76, 0, "no"),  # cannot fit even if the unknown resident held nothing
])
def test_hbm_balance(residents, cand_gib, reserved_gib, verdict) -> None:  # type: ignore[no-untyped-def]
    hard = run(snapshot(residents=residents), profile(peak_gib=cand_gib), reserved=reserved_gib * GiB)
    assert hbm(hard).verdict == verdict


def test_declared_peak_counts_when_larger_than_observed() -> None:
    grows = profile("res", memory=MemoryEnvelope(reserved_bytes=10 * GiB, peak_bytes=60 * GiB))
    snap = snapshot(residents=(Resident(name="r", profile=grows, observed_memory_bytes=10 * GiB),))
    assert hbm(run(snap, profile(peak_gib=20))).verdict == "no"  # 60 + 20.5 > 75
    assert hbm(run(snap, profile(peak_gib=14))).verdict == "yes"


def test_reclaimable_memory_counts_only_within_the_candidates_deadline() -> None:
    res = profile("res", memory=MemoryEnvelope(reserved_bytes=60 * GiB, peak_bytes=60 * GiB,
                                               reclaimable_bytes=20 * GiB, reclaim_deadline_ms=500))
    snap = snapshot(residents=(Resident(name="r", profile=res),))
    hurried = profile(peak_gib=30, memory=MemoryEnvelope(reserved_bytes=30 * GiB, peak_bytes=30 * GiB))
    patient = profile(peak_gib=30, memory=MemoryEnvelope(reserved_bytes=30 * GiB, peak_bytes=30 * GiB,
                                                         acquire_deadline_ms=1000))
    assert hbm(run(snap, hurried)).verdict == "no"
    assert hbm(run(snap, patient)).verdict == "yes"


def test_unknown_reservations_and_reserve_are_unknown_not_zero() -> None:
    assert hbm(run(snapshot(), profile(peak_gib=10), reserved=None)).verdict == "unknown"
    no_reserve = snapshot(memory_reserved_bytes=None)
    bare_policy = POLICY.model_copy(update={"assumed_driver_reserve_bytes": None})
    spec = lookup("h100-sxm")
    hard = check(no_reserve, spec, profile(peak_gib=10), bare_policy, parse_regime("timeslice")) \
        if spec.driver_reserve_bytes is None else None
    if hard is not None:
        assert hbm(hard).verdict == "unknown"
        assert "driver_reserve" in hbm(hard).detail


def test_unattributed_used_memory_is_counted() -> None:
    # NVML v2: used (40 GiB) excludes the reserve (1 GiB); 80 − 1 − 40 − 4 = 35 GiB for 0.5 + peak.
    snap = snapshot(memory_used_bytes=40 * GiB)  # 40 GiB held by processes nobody listed
    assert hbm(run(snap, profile(peak_gib=34))).verdict == "yes"
    assert hbm(run(snap, profile(peak_gib=35))).verdict == "no"


@pytest.mark.parametrize(("mode", "residents", "regime", "verdict"), [
    ("DEFAULT", 1, "timeslice", "yes"),
    ("PROHIBITED", 0, "timeslice", "no"),
    ("EXCLUSIVE_PROCESS", 0, "timeslice", "yes"),
    ("EXCLUSIVE_PROCESS", 1, "timeslice", "no"),
    ("EXCLUSIVE_PROCESS", 1, "mps:50", "yes"),  # MPS clients share the server's context
    (None, 1, "timeslice", "unknown"),
])
def test_compute_mode(mode, residents, regime, verdict) -> None:  # type: ignore[no-untyped-def]
    res = tuple(Resident(name=f"r{i}", observed_memory_bytes=GiB) for i in range(residents))
    snap = snapshot(compute_mode=mode, residents=res,
                    mps=MpsState(running=True, clients=residents, pinned_memory_limit_bytes=80 * GiB))
    hard = run(snap, profile(), regime)
    assert next(f for f in hard.findings if f.resource == "compute_mode").verdict == verdict


def test_sharing_mode_must_be_accepted_by_candidate_and_residents() -> None:
    loner = profile("res", sharing=SharingModes(timeslice=False))
    snap = snapshot(residents=(Resident(name="loner", profile=loner),))
    hard = run(snap, profile())
    assert hard.verdict == "no" and hard.limiting_resource == "sharing_mode"
    assert "loner" in hard.limiting_finding.detail  # type: ignore[union-attr]
    assert run(snapshot(), profile(sharing=SharingModes()), "mps:50").limiting_resource == "sharing_mode"


@pytest.mark.parametrize(("instances", "profile_name", "verdict", "limiting"), [
    ((), "3g.40gb", "yes", None),
    (((0, 4, "3g.40gb"),), "3g.40gb", "yes", None),
    (((0, 4, "3g.40gb"), (4, 4, "3g.40gb")), "3g.40gb", "no", "mig_slices"),
    (((1, 1, "1g.10gb"), (5, 1, "1g.10gb")), "3g.40gb", "no", "mig_placement"),  # 6 free slices, no placement
    (((1, 1, "1g.10gb"), (5, 1, "1g.10gb")), "1g.10gb", "yes", None),
    (((0, 8, "7g.80gb"),), "1g.10gb", "no", "mig_slices"),
])
def test_mig_placement(instances, profile_name, verdict, limiting) -> None:  # type: ignore[no-untyped-def]
    snap = snapshot(mig=MigState(enabled=True, instances=tuple(
        MigInstance(start=s, size=z, profile=p) for s, z, p in instances)))
    hard = run(snap, profile(peak_gib=5), f"mig:{profile_name}")
    assert (hard.verdict, hard.limiting_resource) == (verdict, limiting)


def test_mig_disabled_or_unknown() -> None:
    assert run(snapshot(), profile(peak_gib=5), "mig:3g.40gb").limiting_resource == "mig_placement"
    unknown = run(snapshot(mig=MigState(enabled=None)), profile(peak_gib=5), "mig:3g.40gb")
    assert unknown.verdict == "unknown" and unknown.limiting_resource == "mig_placement"
    no_mig = check(snapshot(device_type="l4", memory_total_bytes=24 * GiB), lookup("l4"), profile(peak_gib=5),
                   POLICY, parse_regime("mig:1g.10gb"))
    assert no_mig.verdict == "no"


@pytest.mark.parametrize(("mps", "verdict", "limiting"), [
    (MpsState(running=True, clients=3, max_clients=48, pinned_memory_limit_bytes=40 * GiB), "yes", None),
    (MpsState(running=True, clients=48, max_clients=48, pinned_memory_limit_bytes=40 * GiB), "no", "mps_clients"),
    (MpsState(running=True, clients=3, max_clients=48, pinned_memory_limit_bytes=8 * GiB), "no", "mps_pinned_memory"),
    (MpsState(running=True, clients=None, pinned_memory_limit_bytes=40 * GiB), "unknown", "mps_clients"),
    (MpsState(running=True, clients=3), "unknown", "mps_pinned_memory"),
    (MpsState(running=False), "no", "mps_server"),
    (MpsState(running=None), "unknown", "mps_server"),
])
def test_mps(mps, verdict, limiting) -> None:  # type: ignore[no-untyped-def]
    hard = run(snapshot(mps=mps), profile(peak_gib=10), "mps:50")
    assert (hard.verdict, hard.limiting_resource) == (verdict, limiting)


@pytest.mark.parametrize(("held", "want", "verdict", "demand"), [
    ((), 32, "yes", 32),
    ((), 30, "yes", 32),  # rounds up to the 8-SM alignment on Hopper
    ((96,), 32, "yes", 32),  # 132 − 96 = 36 → 32 usable in whole groups
    ((104,), 32, "no", 32),  # 28 left → 24 usable
    (None, 16, "unknown", 16),
])
def test_green_partitions(held, want, verdict, demand) -> None:  # type: ignore[no-untyped-def]
    cand = profile(sharing=SharingModes(green_sms=want))
    hard = run(snapshot(green_partitions_sms=held), cand, f"green:{want}")
    green = next(f for f in hard.findings if f.resource == "green_sms")
    assert green.verdict == verdict and green.demand == demand
    assert any("do not guarantee concurrency" in c for c in hard.caveats)


def test_findings_follow_the_documented_order_and_all_are_kept() -> None:
    snap = snapshot(compute_mode="PROHIBITED", memory_used_bytes=79 * GiB)
    hard = run(snap, profile(peak_gib=50))
    assert [f.resource for f in hard.findings] == sorted((f.resource for f in hard.findings), key=RESOURCE_ORDER.index)
    assert {f.resource for f in hard.findings if f.verdict == "no"} == {"compute_mode", "hbm"}
    assert hard.limiting_resource == "compute_mode"


@pytest.mark.parametrize("text", ["bogus", "mps", "mps:0", "mps:101", "mps:x", "green:0", "timeslice:3", "mig:"])
def test_bad_regimes(text: str) -> None:
    from canary.errors import InputError

    with pytest.raises(InputError) as err:
        parse_regime(text)
    assert err.value.field == "--regime"


def test_unlisted_residents_make_memory_and_coresidency_unknown() -> None:
    snap = snapshot(unknown_reasons={"residents": "cuda:N cannot list other processes"},
                    mps=MpsState(running=True, clients=1, pinned_memory_limit_bytes=80 * GiB))
    hard = run(snap, profile(peak_gib=10), "mps:50")
    assert hbm(hard).verdict == "unknown"
    assert any(f.resource == "resident_kernels" and f.verdict == "unknown" for f in hard.findings)
    assert hard.verdict == "unknown"
