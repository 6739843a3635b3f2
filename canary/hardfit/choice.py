"""How the regime is chosen when the caller does not say: from the device's sharing state and the
candidate's accepted modes.

Under MIG the candidate lists the GPU-instance profiles it accepts, in any order. The choice is the
smallest of them, by NVIDIA's profile sizes (memory slices, then compute slices, then memory), in
which stage 1 says the candidate fits: the instance's memory, the profile's instance limit, a
placement free of the device's instances and of the instances other admissions booked, and its
kernels. The order of the list never changes the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.errors import InputError
from canary.hardfit._context import MigBooking, finding
from canary.regime import Regime

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec, MigProfile
    from canary.certificate import Finding
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class RegimeChoice:
    """The regime chosen for a request, and one sentence saying why (the certificate's
    ``regime_chosen_by``)."""

    regime: Regime
    why: str
    mig_refused: tuple[Finding, ...] = ()
    """Under MIG, when the candidate fits none of the profiles it accepts: for each of them, smallest
    first, the finding that rules it out (``subject`` names the profile). Empty otherwise."""


def mig_profile_size(profile: MigProfile) -> tuple[int, int, int, str]:
    """NVIDIA's size order of GPU-instance profiles: memory slices, compute slices, memory (an unknown
    memory last), then the name (``1g.18gb`` before ``1g.18gb+me``)."""
    memory = profile.memory_bytes if profile.memory_bytes is not None else 1 << 62
    return profile.memory_slices, profile.compute_slices, memory, profile.name


def _ruling(hard_findings: tuple[Finding, ...], profile: str) -> Finding:
    """The finding that decides a profile's trial (stage 1's limiting finding: a ``never`` shortfall
    before a ``now`` one), about that profile."""
    from canary.hardfit import limiting_finding  # the package imports this module

    hit = limiting_finding(hard_findings)
    assert hit is not None, "a profile that does not fit has a finding that says why"
    return hit if hit.subject == profile else hit.model_copy(update={"subject": profile})


def _short(f: Finding) -> str:
    return f"{f.subject}: {f.resource}" + (f" ({f.shortfall})" if f.shortfall else f" {f.verdict}")


def choose_mig(
    snapshot: DeviceSnapshot,
    spec: DeviceSpec,
    candidate: WorkloadProfile,
    policy: Policy,
    *,
    mig_booked: tuple[MigBooking, ...] = (),
) -> RegimeChoice:
    """The MIG profile a candidate gets on a MIG-enabled device (see the module doc): each profile it
    accepts is tried with stage 1; the smallest that fits wins; without one, the smallest that may
    fit (an *unknown*); without that, the smallest profile refused only for now (short ``now``: it
    may fit once the device changes), else the smallest profile the device has — with every
    profile's reason, its limiting finding (a ``never`` shortfall first), in ``mig_refused``."""
    from canary.hardfit import check  # the package imports this module: stage 1 is looked up when called

    accepted = candidate.sharing.mig_profiles
    if not accepted:
        return RegimeChoice(Regime("mig", mig_profile="(none accepted)"),
                            "MIG is enabled and the candidate accepts no MIG profile")
    profiles: dict[str, MigProfile] = {}
    refused: list[Finding] = []
    for name in accepted:
        try:
            profile = spec.mig_profile(name)
        except InputError:
            if spec.catalogued and all(f.subject != name for f in refused):
                refused.append(finding("mig_placement", name, None, "placement", "no",
                                       f"catalog ({spec.source('mig_profiles')})",
                                       f"{spec.name} has no MIG profile {name!r}", subject=name, shortfall="never"))
            continue
        profiles.setdefault(profile.name, profile)
    if not profiles:
        first = accepted[0]
        return RegimeChoice(Regime("mig", mig_profile=first),
                            f"MIG is enabled; {spec.name} has none of the MIG profiles the candidate accepts "
                            f"({', '.join(accepted)}), checking {first}", tuple(refused))
    unsure: list[tuple[MigProfile, Finding]] = []
    for profile in sorted(profiles.values(), key=mig_profile_size):
        regime = Regime("mig", mig_profile=profile.name)
        hard = check(snapshot, spec, candidate, policy, regime, mig_booked=mig_booked)
        if hard.verdict == "yes":
            passed = [_short(f) for f in refused if f.subject in profiles] + [_short(f) for _, f in unsure]
            why = f"MIG is enabled; {profile.name} is the smallest profile the candidate accepts and fits in"
            return RegimeChoice(regime, why + (f" (not {'; '.join(passed)})" if passed else ""))
        ruling = _ruling(hard.findings, profile.name)
        if hard.verdict == "unknown":
            unsure.append((profile, ruling))
        else:
            refused.append(ruling)
    if unsure:
        profile, ruling = unsure[0]
        return RegimeChoice(Regime("mig", mig_profile=profile.name),
                            f"MIG is enabled; no profile the candidate accepts surely fits: {profile.name}, the "
                            f"smallest that may, is checked ({ruling.resource} unknown)")
    order = {p.name: i for i, p in enumerate(sorted(profiles.values(), key=mig_profile_size))}
    refused.sort(key=lambda f: order.get(f.subject or "", len(order)))  # by size; names the catalog lacks last
    # The profile checked is the one whose refusal the certificate reports: the smallest that is short
    # only for now (it may fit once instances, bookings or residents change), else the smallest. A
    # 'never' headline while a larger accepted profile is merely taken would tell a scheduler to give up.
    later = next((f.subject for f in refused if f.shortfall == "now" and f.subject in profiles), None)
    smallest = min(profiles.values(), key=mig_profile_size).name
    checked = later or smallest
    which = (f"the smallest that may fit later, {checked}" if checked != smallest
             else f"the smallest, {smallest}")
    return RegimeChoice(Regime("mig", mig_profile=checked),
                        f"MIG is enabled and the candidate fits none of the MIG profiles it accepts "
                        f"({'; '.join(_short(f) for f in refused)}); checking {which}",
                        tuple(refused))


def choose_regime(
    snapshot: DeviceSnapshot,
    spec: DeviceSpec,
    candidate: WorkloadProfile,
    policy: Policy,
    *,
    mig_booked: tuple[MigBooking, ...] = (),
) -> RegimeChoice:
    """The regime that follows from the device's sharing state and the candidate's accepted modes,
    and one sentence saying why.

    MIG enabled → the smallest accepted MIG profile the candidate fits in (``choose_mig``; the MIG
    instances other admissions booked, ``mig_booked``, hold their placements); MPS running → ``mps``
    at the candidate's percentage (or the policy default); otherwise ``timeslice``, whose sentence says
    when MIG or MPS state is unknown rather than off (stage 1 then answers *unknown* for MIG)."""
    from canary.hardfit.partitions import may_have_mig  # the package imports this module

    sharing = candidate.sharing
    if snapshot.mig.enabled:
        return choose_mig(snapshot, spec, candidate, policy, mig_booked=mig_booked)
    if snapshot.mps.running:
        pct = sharing.mps_active_thread_pct or policy.mps_default_active_thread_pct
        why = "the candidate's" if sharing.mps_active_thread_pct else "the policy's default"
        return RegimeChoice(Regime("mps", mps_pct=pct), f"MPS is running; {why} active-thread percentage {pct}%")
    # An unknown MIG mode is not "off": stage 1's mig_mode finding makes the fit unknown; the regime
    # checked is the one the device would have without MIG, and the sentence says what is not known.
    mig_unknown = snapshot.mig.enabled is None and may_have_mig(spec)
    mps_unknown = snapshot.mps.running is None and spec.vendor != "amd"
    if mig_unknown or mps_unknown:
        unknown = " and ".join(what for what, is_unknown in (("whether MIG is on (mig.enabled)", mig_unknown),
                                                              ("whether MPS runs (mps.running)", mps_unknown))
                               if is_unknown)
        are = "are" if mig_unknown and mps_unknown else "is"
        return RegimeChoice(Regime("timeslice"), f"{unknown} {are} not known; checking timeslice, the regime "
                                                 "of a device with neither on")
    return RegimeChoice(Regime("timeslice"), "neither MIG nor MPS is active, so separate processes time-slice")
