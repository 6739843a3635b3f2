"""Stage 1 — hard fit: can the candidate physically run here, in this regime?

Pure arithmetic over declared and observed numbers (no IO, no clock). Every check returns every
finding (not just the first shortfall); the verdict is *no* if any finding is *no*, else *unknown*
if any is *unknown*, else *yes*. The limiting resource is the first *no* that is short ``never``
(the candidate cannot fit whatever leaves); without one, the first *no* short ``now``; without a
*no*, the first *unknown* — "first" in the stable order of ``RESOURCE_ORDER``::

    compute_mode, unlisted_context, amd_partition, sharing_mode, mig_mode, mig_slices, mig_instances,
    mig_placement, mps_server, mps_clients, mps_pinned_memory, green_sms, hbm, sm_coresidency, resident_kernels,
    candidate_kernels, registers, shared_memory, warps, blocks, barriers
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from canary.certificate import Finding, FitVerdict, HardFit
from canary.hardfit._context import Check, Demand, FitContext, MigBooking
from canary.hardfit.choice import RegimeChoice, choose_regime
from canary.hardfit.compute import check_launch, check_sm_coresidency
from canary.hardfit.memory import bookable_bytes, check_hbm, check_unlisted_context
from canary.hardfit.modes import check_compute_mode, check_sharing_mode
from canary.hardfit.partitions import GREEN_CAVEAT, check_amd_partition, check_green, check_mig, check_mps
from canary.regime import Regime, parse_regime

if TYPE_CHECKING:
    from collections.abc import Iterable

    from canary.catalog import DeviceSpec
    from canary.policy import Policy
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot

__all__ = ["CHECKS", "RESOURCE_ORDER", "Demand", "FitContext", "MigBooking", "Regime", "RegimeChoice", "check",
           "choose_regime", "limiting_finding", "parse_regime"]

# Registered in one place, in the order that decides the limiting resource.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("compute_mode", check_compute_mode),
    ("unlisted_context", check_unlisted_context),
    ("amd_partition", check_amd_partition),
    ("sharing_mode", check_sharing_mode),
    ("mig", check_mig),
    ("mps", check_mps),
    ("green", check_green),
    ("hbm", check_hbm),
    ("candidate_kernels", check_launch),
    ("sm_coresidency", check_sm_coresidency),
)

RESOURCE_ORDER: tuple[str, ...] = (
    "compute_mode", "unlisted_context", "amd_partition", "sharing_mode", "mig_mode", "mig_slices", "mig_instances", "mig_placement", "mps_server",
    "mps_clients", "mps_pinned_memory", "green_sms", "hbm", "sm_coresidency", "resident_kernels",
    "candidate_kernels", "registers", "shared_memory", "warps", "blocks", "barriers",
)  # fmt: skip

SHARED_CONTENTION: dict[str, tuple[str, ...]] = {
    "timeslice": ("time_slices", "memory_capacity_growth", "pcie", "power"),
    "streams": ("dram_bandwidth", "l2_cache", "sm_issue_slots", "time_overlap", "power", "pcie"),
    "mps": ("dram_bandwidth", "l2_cache", "sm_issue_slots", "time_overlap", "power", "pcie"),
    "mig": ("pcie", "power"),
    "green": ("dram_bandwidth", "l2_cache", "time_overlap", "power", "pcie"),
}


def _order(f: Finding) -> int:
    try:
        return RESOURCE_ORDER.index(f.resource)
    except ValueError:
        return len(RESOURCE_ORDER)


def _rank(f: Finding) -> int:
    """How strongly a finding limits: a permanent shortfall (``never``) before one that may go away
    (``now``), any *no* before an *unknown*, an *unknown* before a *yes*."""
    if f.verdict == "no":
        return 0 if f.shortfall == "never" else 1
    return 2 if f.verdict == "unknown" else 3


def limiting_finding(findings: Iterable[Finding]) -> Finding | None:
    """The finding that limits: the strongest (``_rank``), the first in ``findings``' order among
    equals; ``None`` when every finding is *yes*. A ``now`` shortfall is never named while a ``never``
    one exists: retrying after residents leave cannot help a candidate that can never fit."""
    best: Finding | None = None
    for f in findings:
        if f.verdict != "yes" and (best is None or _rank(f) < _rank(best)):
            best = f
    return best


def check(
    snapshot: DeviceSnapshot,
    spec: DeviceSpec,
    candidate: WorkloadProfile,
    policy: Policy,
    regime: Regime,
    *,
    reserved_bytes_by_others: int | None = 0,
    reservations_source: str | None = None,
    mig_booked: tuple[MigBooking, ...] = (),
) -> HardFit:
    """Run every stage-1 check; return all findings, the verdict and the limiting resource, with
    the demand, the memory bookings share and (MIG) the placement as numbers. ``mig_booked``: the
    MIG instances other admissions booked on the device, which hold their placements."""
    ctx = FitContext.prepare(snapshot, spec, candidate, policy, regime,
                             reserved_bytes_by_others=reserved_bytes_by_others,
                             reservations_source=reservations_source, mig_booked=mig_booked)
    findings: list[Finding] = []
    for _name, fn in CHECKS:
        findings.extend(fn(ctx))
    # Stable: ties keep check order. Within one resource, a shortfall comes before the rest so the
    # first non-yes finding of the limiting resource (HardFit.limiting_finding) is the one that limits.
    findings.sort(key=lambda f: (_order(f), min(_rank(f), 2)))
    hit = limiting_finding(findings)
    verdict: FitVerdict = hit.verdict if hit is not None else "yes"
    limiting = hit.resource if hit is not None else None
    caveats: list[str] = list(ctx.caveats)
    if regime.kind == "green":
        caveats.append(GREEN_CAVEAT)
    if regime.kind == "timeslice":
        caveats.append("under time-slicing the candidate's kernels wait for the residents' time slices; "
                       "the delay follows the residents' duty cycle and is judged in stage 2")
    placement = next((f.placement for f in findings if f.placement is not None), None)
    return HardFit(
        regime=str(regime),
        verdict=verdict,
        findings=tuple(findings),
        limiting_resource=limiting,
        caveats=tuple(caveats),
        shared_contention_dimensions=SHARED_CONTENTION[regime.kind],
        memory_demand_bytes=ctx.demand.memory_bytes,
        bookable_memory_bytes=bookable_bytes(ctx),
        mig_placement=placement,
    )
