"""What every stage-1 check receives: one frozen view of device, candidate, policy and regime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from canary.certificate import Finding, FitVerdict, Quantity
from canary.hardfit.regime import Regime

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.hardfit.memory import HbmBalance
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot


@dataclass(frozen=True)
class FitContext:
    snapshot: DeviceSnapshot
    spec: DeviceSpec
    candidate: WorkloadProfile
    policy: Policy
    regime: Regime
    reserved_bytes_by_others: int | None = 0
    """Memory booked by other admissions (evidence-store reservations) not yet visible on the
    device; ``None`` when the store could not say."""
    caveats: list[str] = field(default_factory=list)
    """Checks append what the certificate must say without it deciding the fit."""

    @cached_property
    def hbm(self) -> HbmBalance:
        """The HBM equation's terms, computed once and read by every check that needs them."""
        from canary.hardfit.memory import hbm_balance

        return hbm_balance(self)


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
) -> Finding:
    return Finding(
        resource=resource,
        demand=demand,
        available=available,
        unit=unit,
        verdict=verdict,
        source=source,
        detail=detail,
        subject=subject,
    )


def compare(demand: int | None, available: int | None) -> FitVerdict:
    """yes / no / unknown for demand ≤ available; an unknown side never passes."""
    if demand is None or available is None:
        return "unknown"
    return "yes" if demand <= available else "no"
