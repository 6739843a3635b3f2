"""How the regime is chosen when the caller does not say: from the device's sharing state and the
candidate's accepted modes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from canary.errors import InputError
from canary.regime import Regime, free_mig_placement

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot


def choose_regime(
    snapshot: DeviceSnapshot, spec: DeviceSpec, candidate: WorkloadProfile, policy: Policy
) -> tuple[Regime, str]:
    """The regime that follows from the device's sharing state and the candidate's accepted modes.

    Returns the regime and one sentence saying why it was chosen. MIG enabled → the first MIG
    profile the candidate accepts that has a free placement (else its first accepted profile, which
    stage 1 will then reject with the reason); MPS running → ``mps`` at the candidate's percentage
    (or the policy default); otherwise ``timeslice``."""
    sharing = candidate.sharing
    if snapshot.mig.enabled:
        if not sharing.mig_profiles:
            return Regime("mig", mig_profile="(none accepted)"), "MIG is enabled and the candidate accepts no MIG profile"
        for name in sharing.mig_profiles:
            try:
                profile = spec.mig_profile(name)
            except InputError:
                continue
            if free_mig_placement(profile, snapshot.mig.instances) is not None:
                return Regime("mig", mig_profile=profile.name), f"MIG is enabled; {profile.name} is the first accepted profile with a free placement"
        first = sharing.mig_profiles[0]
        return Regime("mig", mig_profile=first), f"MIG is enabled; no accepted profile has a free placement, checking {first}"
    if snapshot.mps.running:
        pct = sharing.mps_active_thread_pct or policy.mps_default_active_thread_pct
        why = "the candidate's" if sharing.mps_active_thread_pct else "the policy's default"
        return Regime("mps", mps_pct=pct), f"MPS is running; {why} active-thread percentage {pct}%"
    return Regime("timeslice"), "neither MIG nor MPS is active, so separate processes time-slice"
