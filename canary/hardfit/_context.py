"""What every stage-1 check receives: one frozen view of device, candidate, policy and regime, with
what is computed once before any check runs (as kube-scheduler's PreFilter writes its cycle state):
the candidate's demand and the HBM balance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.certificate import Finding, FitVerdict, GpuInstancePlacement, Quantity, Shortfall
from canary.hardfit.balance import HbmBalance, hbm_balance
from canary.regime import Regime

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class Demand:
    """What the candidate asks of the device's memory: its declared peak plus the memory one more
    CUDA context costs (policy ``per_context_overhead_bytes``)."""

    peak_bytes: int
    context_bytes: int

    @property
    def memory_bytes(self) -> int:
        return self.peak_bytes + self.context_bytes


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class MigBooking:
    """A MIG GPU instance another admission booked on this device (an evidence-store reservation) and
    the device may not show yet: it holds its placement until its lease ends or it is released.

    ``placement`` is ``None`` when the booking names a profile the catalog does not list for this
    device, so where it sits is unknown (and no placement can be called free)."""

    instance: str
    """``PROFILE@START``, as booked."""
    holder: str
    placement: GpuInstancePlacement | None


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class FitContext:
    snapshot: DeviceSnapshot
    spec: DeviceSpec
    candidate: WorkloadProfile
    policy: Policy
    regime: Regime
    demand: Demand
    hbm: HbmBalance
    """The HBM equation's terms, computed once and read by every check that needs them."""
    caveats: list[str] = field(default_factory=list)
    """Checks append what the certificate must say without it deciding the fit."""
    mig_booked: tuple[MigBooking, ...] = ()
    """MIG instances other admissions booked on this device (``MigBooking``)."""

    @classmethod
    def prepare(
        cls,
        snapshot: DeviceSnapshot,
        spec: DeviceSpec,
        candidate: WorkloadProfile,
        policy: Policy,
        regime: Regime,
        *,
        reserved_bytes_by_others: int | None = 0,
        reservations_source: str | None = None,
        mig_booked: tuple[MigBooking, ...] = (),
    ) -> FitContext:
        """Compute the demand and the HBM balance once. ``reserved_bytes_by_others``: memory booked
        by other admissions (evidence-store reservations) not yet visible on the device; ``None``
        when the store could not say. ``mig_booked``: MIG instances other admissions booked there."""
        demand = Demand(candidate.memory.peak_bytes, policy.per_context_overhead_bytes)
        balance = hbm_balance(snapshot, spec, policy, acquire_deadline_ms=candidate.memory.acquire_deadline_ms,
                              reserved_bytes_by_others=reserved_bytes_by_others,
                              reservations_source=reservations_source)
        return cls(snapshot, spec, candidate, policy, regime, demand, balance, mig_booked=tuple(mig_booked))


Check = Callable[[FitContext], list[Finding]]


def finding(
    resource: str,
    demand: Quantity | None,
    available: Quantity | None,
    unit: str,
    verdict: FitVerdict,
    source: str,
    detail: str = "",
    subject: str | None = None,
    *,
    shortfall: Shortfall | None = None,
    placement: GpuInstancePlacement | None = None,
) -> Finding:
    """A finding; ``shortfall`` (``now`` or ``never``) is what a *no* means and is dropped otherwise,
    so a check states it once for a computed verdict. Every *no* must state it."""
    if verdict == "no" and shortfall is None:
        raise ValueError(f"a 'no' finding for {resource} must say whether it is short now or never")
    return Finding(
        resource=resource,
        demand=demand,
        available=available,
        unit=unit,
        verdict=verdict,
        source=source,
        detail=detail,
        subject=subject,
        shortfall=shortfall if verdict == "no" else None,
        placement=placement,
    )


def compare(demand: int | None, available: int | None) -> FitVerdict:
    """yes / no / unknown for demand ≤ available; an unknown side never passes."""
    if demand is None or available is None:
        return "unknown"
    return "yes" if demand <= available else "no"
