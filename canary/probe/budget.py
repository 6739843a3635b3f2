"""The risk budget: bounds a probe may never exceed. The orchestrator enforces each one itself."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from canary._model import Model


class RiskBudget(Model):
    """Bounds for one probe.

    ``max_resident_slowdown_pct``: the largest slowdown that still counts as safe, in percent
    (10 = 10% slower), of the ratio of the resident's mean latency with the candidate to its mean
    latency without (for a throughput resident: mean time per step, i.e. the inverse throughput
    ratio), over the probe. ``required_confidence``: the probability
    that a *safe* verdict is right (1 − false-admit rate the judge guarantees)."""

    max_probe_time_s: float = Field(gt=0, le=3600)
    max_requests_exposed: int = Field(ge=1)
    max_resident_slowdown_pct: float = Field(gt=0, le=1000)
    required_confidence: float = Field(gt=0.5, lt=1)
    rollback_on_slo_violation: bool = True
    baseline_window_s: float = Field(default=2.0, gt=0)
    sampling_window_s: float = Field(default=1.0, gt=0)
    min_windows: int = Field(default=2, ge=1)
    # Judge and guard knobs (policy, not code): see docs/canary.md "Judge".
    window_statistic: Literal["mean", "median"] = "mean"
    min_samples_per_window: int = Field(default=3, ge=1)
    outlier_factor: float | None = Field(
        default=None,
        gt=1,
        description="drop samples above this multiple of their window's median; None keeps all",
    )
    judge_burst_rate: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="the rarest fraction of slowed windows a safe verdict must have had the chance to see: "
        "it needs ceil(log(1 - confidence) / log(1 - rate)) effective pairs, i.e. usable pairs over their "
        "estimated autocorrelation time (0.2 at 0.95: 14 pairs; 0.05: 59)",
    )
    judge_range_pct: float | None = Field(
        default=None,
        gt=0,
        description="the judge's range: a pair whose on-window is more than this slower than the scale is out of "
        "range, and no safe verdict follows it. Wider ranges cover larger bursts but need more pairs. "
        "None: 4 × max_resident_slowdown_pct",
    )
    slowdown_guard_min_samples: int = Field(
        default=10,
        ge=1,
        description="the per-window guard compares two windows only when each has this many samples "
        "(fewer is noise, not evidence)",
    )
    slowdown_guard_pct: float | None = Field(
        default=None,
        gt=0,
        description="one on-window slower than its off-window by more than this rolls back at once; "
        "None: 3 × max_resident_slowdown_pct. It is also the judge's range (see docs/canary.md)",
    )

    @model_validator(mode="after")
    def _windows_fit(self) -> RiskBudget:
        if self.sampling_window_s > self.max_probe_time_s:
            raise ValueError("sampling_window_s is longer than max_probe_time_s; no window could complete")
        return self

    @model_validator(mode="after")
    def _guard_above_bound(self) -> RiskBudget:
        if self.slowdown_guard_pct is not None and self.slowdown_guard_pct <= self.max_resident_slowdown_pct:
            raise ValueError("slowdown_guard_pct must exceed max_resident_slowdown_pct")
        return self

    @model_validator(mode="after")
    def _range_above_bound(self) -> RiskBudget:
        if self.judge_range_pct is not None and self.judge_range_pct <= self.max_resident_slowdown_pct:
            raise ValueError("judge_range_pct must exceed max_resident_slowdown_pct")
        return self

    @property
    def effective_slowdown_guard_pct(self) -> float:
        """The per-window guard: the configured one, else three times the slowdown bound."""
        return (
            self.slowdown_guard_pct
            if self.slowdown_guard_pct is not None
            else 3 * self.max_resident_slowdown_pct
        )

    def override(self, **changes: Any) -> RiskBudget:
        """A copy with some bounds changed (per-call overrides), validated again."""
        merged = {**self.model_dump(), **{k: v for k, v in changes.items() if v is not None}}
        return RiskBudget.model_validate(merged)
