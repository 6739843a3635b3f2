"""Scores: false admits, false rejects, unknowns, p99 violations, time to admission, exposure,
limiting-resource accuracy and confusion matrices, per policy and per family. Pure.

Definitions (also in docs/benchmark.md):

- false admit: the policy admits an unsafe pair; false reject: it rejects a safe pair. An unknown
  (or a policy error) is neither; the unknown rate is reported beside them.
- p99 violation: an admitted pair whose resident's true p99 latency slowdown (serving residents)
  or throughput slowdown (batch residents, measured pairs) exceeds the bound.
- limiting-resource accuracy: over the unsafe pairs the policy rejected, the share where it named
  the resource that really limits (the physical resource of a hard misfit, ``interference`` for a
  slowdown beyond the bound). ``None`` when there is no such rejection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from canary.quantiles import quantile


@dataclass(frozen=True)
class Outcome:
    """One policy's decision on one scenario next to the truth."""

    scenario_id: str
    family: str
    truth_safe: bool
    truth_resource: str | None
    bound_pct: float | None
    resident_slowdown_pct: float | None
    resident_p99_slowdown_pct: float | None
    verdict: str
    limiting_resource: str | None
    time_to_admission_s: float
    exposure: int
    error: str | None = None

    @property
    def false_admit(self) -> bool:
        return self.error is None and self.verdict == "admit" and not self.truth_safe

    @property
    def false_reject(self) -> bool:
        return self.error is None and self.verdict == "reject" and self.truth_safe

    @property
    def unknown(self) -> bool:
        return self.error is not None or self.verdict == "unknown"

    @property
    def p99_violation(self) -> bool:
        if self.error is not None or self.verdict != "admit" or self.bound_pct is None:
            return False
        tail = self.resident_p99_slowdown_pct
        if tail is None:
            tail = self.resident_slowdown_pct
        if tail is None:
            return not self.truth_safe  # a hard misfit never runs: admitting it is a violation
        return tail > self.bound_pct

    @property
    def resource_scored(self) -> bool:
        return self.error is None and self.verdict == "reject" and not self.truth_safe

    @property
    def resource_right(self) -> bool:
        return self.resource_scored and self.limiting_resource == self.truth_resource


def summarize(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """Counts and rates over ``outcomes``; rates are ``None`` over an empty set."""
    rows = list(outcomes)
    n = len(rows)
    fa = sum(o.false_admit for o in rows)
    fr = sum(o.false_reject for o in rows)
    unknown = sum(o.unknown for o in rows)
    scored = [o for o in rows if o.resource_scored]
    tta = [o.time_to_admission_s for o in rows if not o.unknown]
    confusion = {
        truth: {v: sum(1 for o in rows if o.truth_safe == (truth == "safe") and not o.error and o.verdict == v)
                for v in ("admit", "reject", "unknown")}
        for truth in ("safe", "unsafe")
    }
    return {
        "scenarios": n,
        "false_admits": fa,
        "false_rejects": fr,
        "errors_total": fa + fr,
        "unknowns": unknown,
        "unknown_rate": unknown / n if n else None,
        "policy_errors": sum(1 for o in rows if o.error is not None),
        "correct": sum(1 for o in rows if not o.unknown and not o.false_admit and not o.false_reject),
        "p99_violations": sum(o.p99_violation for o in rows),
        "time_to_admission_s": {
            "mean": sum(tta) / len(tta) if tta else None,
            "p50": quantile(tta, 0.5),
            "p95": quantile(tta, 0.95),
            "max": max(tta) if tta else None,
        },
        "exposure_total": sum(o.exposure for o in rows),
        "limiting_resource_scored": len(scored),
        "limiting_resource_right": sum(o.resource_right for o in scored),
        "limiting_resource_accuracy": (sum(o.resource_right for o in scored) / len(scored)) if scored else None,
        "confusion": confusion,
        "false_admit_ids": [o.scenario_id for o in rows if o.false_admit],
        "false_reject_ids": [o.scenario_id for o in rows if o.false_reject],
        "unknown_ids": [o.scenario_id for o in rows if o.unknown],
        "wrong_resource_ids": [o.scenario_id for o in scored if not o.resource_right],
    }


def by_family(outcomes: Iterable[Outcome], families: Sequence[str]) -> dict[str, dict[str, Any]]:
    rows = list(outcomes)
    return {f: summarize(o for o in rows if o.family == f) for f in families if any(o.family == f for o in rows)}


def tuning_key(outcomes: Iterable[Outcome]) -> tuple[int, int, int]:
    """What tuning minimises: false admits + false rejects, then unknowns, then false admits."""
    rows = list(outcomes)
    fa = sum(o.false_admit for o in rows)
    fr = sum(o.false_reject for o in rows)
    return (fa + fr, sum(o.unknown for o in rows), fa)
