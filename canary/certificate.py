"""The output contract: ``Certificate`` and its parts.

A certificate states the decision with every reason, number and piece of evidence behind it.
JSON (``to_json``) is the machine form; ``render_table`` is the terminal form, which puts each
measured value next to its threshold.
"""

import datetime as dt
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from canary._model import Model

Verdict = Literal["admit", "reject", "unknown"]
FitVerdict = Literal["yes", "no", "unknown"]
Shortfall = Literal["now", "never"]
DecidedBy = Literal["hard-fit", "cache", "canary", "policy", "predicted"]
Quantity = int | float | str


class EquationTerm(Model):
    """One term of a resource's balance (the HBM equation of ``docs/hardfit.md``), as computed.

    ``sign`` is how the term enters ``available``: ``+`` adds, ``-`` subtracts, ``=`` is the
    left-hand side (the candidate's demand). ``value`` is ``None`` when the term is unknown."""

    name: str
    sign: Literal["+", "-", "="]
    value: int | None
    unit: str = "bytes"
    source: str


class GpuInstancePlacement(Model):
    """Where a new MIG GPU instance of ``profile`` would sit: memory slices ``[start, start + size)``
    (a placement of ``nvidia-smi mig -lgipp``)."""

    profile: str
    start: int = Field(ge=0)
    size: int = Field(ge=1)

    @property
    def instance(self) -> str:
        """The instance's name, ``PROFILE@START`` (:func:`canary.regime.parse_mig_instance`)."""
        return f"{self.profile}@{self.start}"


class Finding(Model):
    """One resource's stage-1 result. ``demand``/``available`` are ``None`` when unknown.

    A *no* says how long it lasts in ``shortfall``: ``now`` — not with what the device holds now
    (it may fit once residents, bookings or settings change); ``never`` — not on this device in
    this regime whatever leaves (the demand exceeds what the empty device or the partition could
    ever give, or something no state change alters). ``None`` for *yes* and *unknown*."""

    resource: str
    demand: Quantity | None
    available: Quantity | None
    unit: str
    verdict: FitVerdict
    source: str
    detail: str = ""
    subject: str | None = Field(default=None, description="the kernel, resident or instance this is about")
    terms: tuple[EquationTerm, ...] = Field(
        default=(), description="the balance behind demand and available, term by term (HBM)"
    )
    shortfall: Shortfall | None = Field(
        default=None,
        description="for a 'no': 'now' (not with what the device holds now) or 'never' (not on this device "
        "in this regime whatever leaves)",
    )
    placement: GpuInstancePlacement | None = Field(
        default=None, description="mig_placement: the free placement a new instance would take"
    )

    @model_validator(mode="after")
    def _shortfall_only_for_no(self) -> "Finding":
        if self.shortfall is not None and self.verdict != "no":
            raise ValueError(f"shortfall {self.shortfall!r} on a finding whose verdict is {self.verdict!r}")
        return self


class HardFit(Model):
    regime: str
    verdict: FitVerdict
    findings: tuple[Finding, ...]
    limiting_resource: str | None
    caveats: tuple[str, ...] = ()
    shared_contention_dimensions: tuple[str, ...] = ()
    memory_demand_bytes: int | None = Field(
        default=None, description="the candidate's memory demand: declared peak + per-context cost (policy)"
    )
    bookable_memory_bytes: int | None = Field(
        default=None,
        description="memory that bookings on this device (or on the new MIG instance) share: the HBM balance "
        "before other admissions' bookings are subtracted; None when a term is unknown",
    )
    mig_placement: GpuInstancePlacement | None = Field(
        default=None, description="under a MIG regime, the free placement the new instance would take"
    )

    @property
    def limiting_finding(self) -> "Finding | None":
        for f in self.findings:
            if f.resource == self.limiting_resource and f.verdict != "yes":
                return f
        return None


class DeviceRef(Model):
    type: str
    uuid: str | None = None
    source: str
    driver_version: str | None = None


class ResidentRef(Model):
    name: str
    workload_version: str | None
    shape_family: str | None
    profiled: bool
    observed_memory_bytes: int | None = None


class EvidenceRef(Model):
    ids: tuple[str, ...]
    evidence_timestamp: dt.datetime | None
    sources: tuple[str, ...] = ()
    outcome: str | None = None
    cross_driver: bool = False
    reason: str = ""


class ProbeSummary(Model):
    probe_id: str
    state: str
    outcome: str
    time_used_s: float
    exposure_used: int
    windows: int
    rollback_reason: str | None
    slowdown_estimate_pct: float | None = None
    slowdown_interval_pct: tuple[float, float] | None = None
    confidence: float | None = None
    simulated: bool = False
    budget: dict[str, float | int | bool] = Field(default_factory=dict)
    # What decided the probe (judge, guard, slo, stall, futility, budget) and what the slowdown
    # numbers above measure (docs/canary.md "What is bounded").
    decided_by_rule: str | None = None
    slowdown_estimand: str | None = None
    window_s: float | None = Field(
        default=None, description="the probe's window length, sized from the resident's own rate (docs/canary.md)"
    )
    window_plan: str | None = Field(
        default=None,
        description="how the windows and the coverage horizon were chosen: what a safe verdict's guarantee covers",
    )
    safe_reachable: bool | None = Field(
        default=None,
        description="whether the time budget held the pairs a safe verdict needs (coverage horizon and burst "
        "rule), known before the candidate started; false: the probe could only have found the pair unsafe, "
        "and window_plan names the max_probe_time_s that would hold them",
    )
    abort_cause: str | None = Field(
        default=None,
        description="why the candidate never ran, when it did not: 'resident-over-slo' (the resident breaches "
        "its SLO alone: not now) or 'unmeasurable' (no window the budget allows holds a statistic)",
    )
    contrast_sd: float | None = Field(
        default=None,
        description="standard deviation of the judge's per-pair contrasts at the bound ((on − bound·off) / "
        "(bound·scale)): the noise per pair a verdict must overcome. A fixed-size test at this confidence "
        "needs about (z · contrast_sd / gap)² pairs for an even chance, gap being the true ratio's distance "
        "from the bound over the bound (docs/canary.md)",
    )
    attribution: str | None = Field(
        default=None,
        description="the attribution test behind an SLO or guard rollback: windows over the threshold with "
        "and without the candidate, its p-value and level",
    )


    @classmethod
    def from_result(cls, result: "_SummaryDict") -> "ProbeSummary":
        """The summary of a probe's result (``canary.probe.orchestrator.ProbeResult``)."""
        return cls(**result.to_summary_dict())


class _SummaryDict(Protocol):
    def to_summary_dict(self) -> dict[str, Any]: ...


PredictionUse = Literal["decision", "prior", "order-only"]


class PriorRef(Model):
    """The prior a probe's judge was given, and where it came from."""

    mean_pct: float
    sd_pct: float
    estimator: str = Field(description="the estimator whose calibrated interval the prior was made from")
    applied: bool = Field(description="whether the probe's judge took the prior (it shapes the judge's bets, "
                          "never its error bound: docs/judge-prior.md)")
    note: str = ""


class PredictionRef(Model):
    """An estimator's predicted slowdown of one resident next to the candidate (docs/estimators.md).

    ``lo_pct``/``hi_pct``/``point_pct``: the estimator's own interval; ``calibrated_interval_pct``: that
    interval widened by split-conformal calibration on this device type's recorded outcomes (``None``:
    uncalibrated — the prediction may order work, never decide). ``coverage``: the measured held-out
    coverage of the calibration; ``outcomes``: how many recorded outcomes it rests on. ``used_as``:
    ``decision`` (it decided, no probe ran), ``prior`` (the probe's judge got it as a prior) or
    ``order-only`` (shown, not used to decide)."""

    resident: str
    estimator: str
    group: str = Field(default="", description="the kind of prediction calibrated on its own (the transfer "
                       "estimator's neighbour kind: other-version, other-device …)")
    key_digest: str | None = None
    lo_pct: float
    hi_pct: float
    point_pct: float
    calibrated_interval_pct: tuple[float, float] | None = None
    calibrated: bool = False
    confidence_level: float | None = Field(default=None, description="the level the calibration was made at")
    coverage: float | None = None
    outcomes: int = 0
    checked: int = Field(default=0, description="of the outcomes, how many were checked in time order against "
                         "the interval calibrated on those before them: the measured coverage rests on these")
    calibration: str = Field(default="", description="what the calibration found, or why the estimator is uncalibrated")
    inputs: tuple[str, ...] = ()
    detail: str = ""
    used_as: PredictionUse = "order-only"
    prior: PriorRef | None = None


class ReservationRef(Model):
    id: str
    memory_bytes: int
    mps_pct: int | None = None
    mig_instance: str | None = None
    lease_expires_at: dt.datetime


class Expiry(Model):
    expires_at: dt.datetime | None
    ttl_s: float | None
    triggers: tuple[str, ...]


class Certificate(Model):
    certificate_version: int = 1
    workload_name: str
    workload_version: str
    shape_family: str
    device: DeviceRef
    residents: tuple[ResidentRef, ...]
    verdict: Verdict
    reason: str
    hard_fit: FitVerdict
    regime: str
    regime_chosen_by: str
    limiting_resource: str | None
    findings: tuple[Finding, ...]
    resource_reservations: tuple[ReservationRef, ...] = ()
    shared_contention_dimensions: tuple[str, ...] = ()
    evidence: EvidenceRef | None = None
    profile_coverage: float | None = None
    predicted_slowdown_range: tuple[float, float] | None = None
    confidence: float | None = None
    expiry_or_revalidation_trigger: Expiry
    decided_by: DecidedBy
    probe: ProbeSummary | None = None
    predictions: tuple[PredictionRef, ...] = Field(
        default=(), description="estimators' predictions per resident: what decided (decided_by 'predicted'), or "
        "the prior a probe was given and where it came from")
    caveats: tuple[str, ...] = ()
    policy: str
    issued_at: dt.datetime
    simulated: bool = False

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)
