"""The MIG profile a candidate gets, and the placements other admissions' bookings hold.

Expected answers from the catalog's H200 table (``nvidia-smi mig -lgip`` / ``-lgipp``, the 8-slice
layout): 1g.18gb = 1 memory slice, 16 GiB, starts 0‥6; 2g.35gb = 2 slices, 32.25 GiB, starts 0/2/4;
3g.71gb = 4 slices, 69.5 GiB, starts 0/4. Policy ``default``: headroom max(1 GiB, 5 %) of the
instance's memory, 512 MiB per context. So a 1g.18gb instance gives 15 GiB, a 2g.35gb one 30.64 GiB.
``c-mig-95pct.yaml``: a 3g.71gb instance holds slices [0,4); slices 4‥7 are free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from canary.catalog import lookup
from canary.certificate import GpuInstancePlacement
from canary.hardfit import MigBooking, check, choose_regime, parse_regime
from canary.policy import load_policy
from canary.profile import MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, load_snapshot

GiB = 1 << 30
POLICY = load_policy("default")
H200 = lookup("h200")
SNAPSHOT = Path(__file__).resolve().parents[2] / "examples" / "snapshots" / "c-mig-95pct.yaml"


def candidate(peak_gib: float, profiles: Sequence[str]) -> WorkloadProfile:
    peak = int(peak_gib * GiB)
    return WorkloadProfile(name="cand", version="v1", memory=MemoryEnvelope(reserved_bytes=peak, peak_bytes=peak),
                           sharing=SharingModes(mig_profiles=tuple(profiles)))


def h200(*instances: tuple[str, int]) -> DeviceSnapshot:
    """An H200 with MIG on and these (profile, start) instances."""
    made = tuple(MigInstance(profile=p, start=s, size=H200.mig_profile(p).memory_slices) for p, s in instances)
    return DeviceSnapshot(device_type="h200", compute_mode="DEFAULT", mig=MigState(enabled=True, instances=made))


def booked(*instances: tuple[str, int], holder: str = "other@1") -> tuple[MigBooking, ...]:
    return tuple(MigBooking(instance=f"{p}@{s}", holder=holder,
                            placement=GpuInstancePlacement(profile=p, start=s,
                                                           size=H200.mig_profile(p).memory_slices))
                 for p, s in instances)


def snap_c() -> DeviceSnapshot:
    return load_snapshot(SNAPSHOT)


# ------------------------------------------------------------------ the choice does not follow list order


def _row(id_: str, peak_gib: float, profiles: Sequence[str], want: str, verdict: str, snap: str = "c",
         bookings: tuple[MigBooking, ...] = ()) -> list[object]:
    """One case, in both orders of the profile list (the answer must not change)."""
    return [pytest.param(peak_gib, tuple(order), want, verdict, snap, bookings, id=f"{id_}-{name}")
            for name, order in (("listed", profiles), ("reversed", tuple(reversed(profiles))))]


CHOICE_CASES = [
    # The case: 20.5 GiB does not fit 1g.18gb's 15 GiB (never), fits 2g.35gb's 30.6 GiB at start 4.
    *_row("20GiB-skips-the-1g-it-cannot-fit", 20, ["1g.18gb", "2g.35gb"], "2g.35gb", "yes"),
    # Both fit: the smaller instance, whatever the order.
    *_row("6GiB-takes-the-smallest", 6, ["1g.18gb", "2g.35gb"], "1g.18gb", "yes"),
    *_row("6GiB-smallest-of-three", 6, ["3g.71gb", "2g.35gb", "1g.18gb"], "1g.18gb", "yes"),
    # 1g.35gb and 2g.35gb both take 2 memory slices; 1g.35gb has fewer compute slices.
    *_row("same-memory-fewer-compute", 20, ["2g.35gb", "1g.35gb"], "1g.35gb", "yes"),
    # 40 GiB fits neither: the smallest is checked, and stage 1 rejects it.
    *_row("40GiB-fits-none", 40, ["1g.18gb", "2g.35gb"], "1g.18gb", "no"),
    # 40 GiB fits 3g.71gb (69.5 GiB) at start 4.
    *_row("40GiB-takes-the-3g", 40, ["1g.18gb", "3g.71gb", "2g.35gb"], "3g.71gb", "yes"),
    # Profiles the H200 does not have are skipped, wherever they stand in the list.
    *_row("unknown-names-skipped", 6, ["1g.10gb", "2g.35gb", "1g.20gb"], "2g.35gb", "yes"),
    # Aliases the catalog resolves (the lgip id 19 is 1g.18gb) are accepted as that profile.
    *_row("alias-by-profile-id", 6, ["19", "2g.35gb"], "1g.18gb", "yes"),
    # 1g.18gb booked full at 4, 5 and 6 by others: the next size up has no start left either (4 is held).
    *_row("booked-full", 6, ["1g.18gb", "2g.35gb"], "1g.18gb", "no",
          bookings=booked(("1g.18gb", 4), ("1g.18gb", 5), ("1g.18gb", 6))),
    # One 1g booking at 5: 2g.35gb's start 4 is blocked (now: the booking may go); 1g.18gb still has 4
    # and 6 but 20.5 GiB never fits its 15 GiB. The profile refused only for now is the one checked,
    # so the certificate does not say "never" while a larger accepted profile may open up.
    *_row("booking-moves-the-2g-out", 20, ["1g.18gb", "2g.35gb"], "2g.35gb", "no",
          bookings=booked(("1g.18gb", 5))),
]


@pytest.mark.parametrize(("peak_gib", "profiles", "want", "verdict", "snap", "bookings"), CHOICE_CASES)
def test_the_choice_is_the_smallest_profile_that_fits_in_any_order(
    peak_gib: float, profiles: tuple[str, ...], want: str, verdict: str, snap: str,
    bookings: tuple[MigBooking, ...],
) -> None:
    snapshot = snap_c()
    cand = candidate(peak_gib, profiles)
    choice = choose_regime(snapshot, H200, cand, POLICY, mig_booked=bookings)
    assert str(choice.regime) == f"mig:{want}", choice.why
    hard = check(snapshot, H200, cand, POLICY, choice.regime, mig_booked=bookings)
    assert hard.verdict == verdict, hard.findings
    # A rejected choice names a reason for every accepted profile; a fitting one names none.
    refused = {f.subject for f in choice.mig_refused}
    assert refused == (set(profiles) if verdict == "no" else set()), choice.mig_refused
    for f in choice.mig_refused:
        assert f.verdict == "no" and f.shortfall in ("now", "never") and f.detail


def test_a_rejected_choice_says_why_for_each_profile() -> None:
    choice = choose_regime(snap_c(), H200, candidate(40, ["2g.35gb", "1g.10gb", "1g.18gb"]), POLICY)
    by_profile = {f.subject: f for f in choice.mig_refused}
    assert [f.subject for f in choice.mig_refused] == ["1g.18gb", "2g.35gb", "1g.10gb"]  # by size; unknown names last
    assert (by_profile["1g.18gb"].resource, by_profile["1g.18gb"].shortfall) == ("hbm", "never")
    assert by_profile["1g.18gb"].available == 15 * GiB and by_profile["1g.18gb"].demand == 40 * GiB + (512 << 20)
    assert (by_profile["2g.35gb"].resource, by_profile["2g.35gb"].shortfall) == ("hbm", "never")
    assert (by_profile["1g.10gb"].resource, by_profile["1g.10gb"].shortfall) == ("mig_placement", "never")
    assert "h200 has no MIG profile '1g.10gb'" in by_profile["1g.10gb"].detail
    for name in ("1g.18gb: hbm (never)", "2g.35gb: hbm (never)", "1g.10gb: mig_placement (never)"):
        assert name in choice.why


def test_a_fitting_choice_says_which_smaller_profiles_it_passed_over() -> None:
    choice = choose_regime(snap_c(), H200, candidate(20, ["2g.35gb", "1g.18gb"]), POLICY)
    assert "2g.35gb is the smallest profile the candidate accepts and fits in" in choice.why
    assert "not 1g.18gb: hbm (never)" in choice.why


def test_no_accepted_profile_and_mig_off_keep_their_regimes() -> None:
    none = choose_regime(snap_c(), H200, candidate(6, []), POLICY)
    assert none.regime.mig_profile == "(none accepted)"
    off = DeviceSnapshot(device_type="h200", compute_mode="DEFAULT", mig=MigState(enabled=False))
    assert str(choose_regime(off, H200, candidate(6, ["1g.18gb"]), POLICY).regime) == "timeslice"


# ------------------------------------------------------------------ bookings hold their placements


def _finding(hard, resource):  # type: ignore[no-untyped-def]
    return next(f for f in hard.findings if f.resource == resource)


@pytest.mark.parametrize(("instances", "bookings", "profile", "verdict", "start", "limiting"), [
    pytest.param((("3g.71gb", 0),), (), "1g.18gb", "yes", 4, None, id="no-bookings-first-free-start"),
    pytest.param((("3g.71gb", 0),), (("1g.18gb", 4),), "1g.18gb", "yes", 5, None, id="a-booking-takes-its-start"),
    pytest.param((("3g.71gb", 0),), (("1g.18gb", 4), ("1g.18gb", 5)), "1g.18gb", "yes", 6, None,
                 id="two-bookings"),
    pytest.param((("3g.71gb", 0),), (("1g.18gb", 4), ("1g.18gb", 5), ("1g.18gb", 6)), "1g.18gb", "no", None,
                 "mig_placement", id="card-full-slice-7-takes-no-1g"),
    pytest.param((("3g.71gb", 0),), (("1g.18gb", 6),), "2g.35gb", "yes", 4, None, id="2g-fits-beside-a-1g-at-6"),
    pytest.param((("3g.71gb", 0),), (("1g.18gb", 5),), "2g.35gb", "no", None, "mig_placement",
                 id="2g-blocked-by-a-booked-1g-at-5"),
    pytest.param((("3g.71gb", 0),), (("2g.35gb", 4), ("1g.18gb", 6)), "1g.18gb", "no", None, "mig_placement",
                 id="only-slice-7-free-where-no-1g-starts"),
    # A booking whose instance the device now lists is counted once (its admission created it).
    pytest.param((("3g.71gb", 0), ("1g.18gb", 4)), (("1g.18gb", 4),), "1g.18gb", "yes", 5, None,
                 id="created-instance-counted-once"),
    pytest.param((("3g.71gb", 0),), (("3g.71gb", 4),), "1g.18gb", "no", None, "mig_slices",
                 id="a-booked-3g-fills-the-card"),
])
def test_bookings_hold_their_placements(
    instances: tuple[tuple[str, int], ...], bookings: tuple[tuple[str, int], ...], profile: str, verdict: str,
    start: int | None, limiting: str | None,
) -> None:
    hard = check(h200(*instances), H200, candidate(6, [profile]), POLICY, parse_regime(f"mig:{profile}"),
                 mig_booked=booked(*bookings))
    assert (hard.verdict, hard.limiting_resource) == (verdict, limiting), hard.findings
    placement = _finding(hard, "mig_placement")
    if start is None:
        assert hard.mig_placement is None
    else:
        assert hard.mig_placement == placement.placement
        assert hard.mig_placement is not None and hard.mig_placement.start == start
    if bookings:
        assert "evidence-store bookings" in placement.source
    if verdict == "no" and limiting == "mig_placement":
        for p, s in bookings:  # the reject names the placements held, and by whom
            assert f"{p}@{s}" in placement.detail and "other@1" in placement.detail


def test_booked_instances_count_against_the_profiles_instance_limit() -> None:
    # 1g.18gb+me allows one instance on the device: a booked one is that one.
    hard = check(h200(), H200, candidate(6, ["1g.18gb+me"]), POLICY, parse_regime("mig:1g.18gb+me"),
                 mig_booked=booked(("1g.18gb+me", 0)))
    assert hard.verdict == "no" and hard.limiting_resource == "mig_instances"


def test_a_booking_whose_place_is_unknown_makes_the_placement_unknown() -> None:
    ghost = (MigBooking(instance="9g.999gb@2", holder="old@0", placement=None),)
    hard = check(h200(), H200, candidate(6, ["1g.18gb"]), POLICY, parse_regime("mig:1g.18gb"), mig_booked=ghost)
    assert hard.verdict == "unknown" and hard.limiting_resource == "mig_placement"
    assert "9g.999gb@2" in _finding(hard, "mig_placement").detail
