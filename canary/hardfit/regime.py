"""Resource regimes: how a pair shares a device (``timeslice``, ``streams``, ``mps:P``,
``mig:PROFILE``, ``green:N``), and how one is chosen when the caller does not say."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from canary.errors import InputError

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot

RegimeKind = Literal["timeslice", "streams", "mps", "mig", "green"]
_KINDS: tuple[RegimeKind, ...] = ("timeslice", "streams", "mps", "mig", "green")


@dataclass(frozen=True)
class Regime:
    kind: RegimeKind
    mps_pct: int | None = None
    mig_profile: str | None = None
    green_sms: int | None = None

    def __str__(self) -> str:
        if self.kind == "mps":
            return f"mps:{self.mps_pct}"
        if self.kind == "mig":
            return f"mig:{self.mig_profile}"
        if self.kind == "green":
            return f"green:{self.green_sms}"
        return self.kind

    @property
    def concurrent(self) -> bool:
        """Whether kernels of resident and candidate may run on the same SMs at the same time."""
        return self.kind in ("mps", "streams")


def parse_regime(text: str) -> Regime:
    """Parse ``timeslice``, ``streams``, ``mps:50``, ``mig:3g.71gb``, ``green:32``."""
    raw = text.strip()
    kind, _, arg = raw.partition(":")
    kind = kind.lower()
    if kind not in _KINDS:
        raise InputError(
            f"unknown regime '{raw}' (expected timeslice, streams, mps:PCT, mig:PROFILE or green:SMS)",
            field="--regime",
        )
    if kind in ("timeslice", "streams"):
        if arg:
            raise InputError(f"regime '{kind}' takes no argument, got '{raw}'", field="--regime")
        return Regime("streams" if kind == "streams" else "timeslice")
    if not arg:
        raise InputError(f"regime '{kind}' needs an argument, e.g. mps:50, mig:1g.18gb, green:32", field="--regime")
    if kind == "mig":
        return Regime("mig", mig_profile=arg)
    try:
        number = int(arg)
    except ValueError:
        raise InputError(f"'{arg}' in '{raw}' is not a whole number", field="--regime") from None
    if kind == "mps":
        if not 1 <= number <= 100:
            raise InputError(f"MPS active-thread percentage must be 1–100, got {number}", field="--regime")
        return Regime("mps", mps_pct=number)
    if number < 1:
        raise InputError(f"a green-context partition needs at least 1 SM, got {number}", field="--regime")
    return Regime("green", green_sms=number)


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
        from canary.hardfit.partitions import free_mig_placement

        for name in sharing.mig_profiles:
            try:
                profile = spec.mig_profile(name)
            except InputError:
                continue
            if free_mig_placement(snapshot, spec, profile) is not None:
                return Regime("mig", mig_profile=profile.name), f"MIG is enabled; {profile.name} is the first accepted profile with a free placement"
        first = sharing.mig_profiles[0]
        return Regime("mig", mig_profile=first), f"MIG is enabled; no accepted profile has a free placement, checking {first}"
    if snapshot.mps.running:
        pct = sharing.mps_active_thread_pct or policy.mps_default_active_thread_pct
        why = "the candidate's" if sharing.mps_active_thread_pct else "the policy's default"
        return Regime("mps", mps_pct=pct), f"MPS is running; {why} active-thread percentage {pct}%"
    return Regime("timeslice"), "neither MIG nor MPS is active, so separate processes time-slice"
