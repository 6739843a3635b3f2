"""Warm plans: the pairs a nightly job should have fresh evidence for.

::

    name: nightly-h100
    budget_s: 3600        # the whole job's wall-clock budget
    concurrency: 2        # probes at once (a CapacityLimiter)
    pairs:
      - device: ../snapshots/g-nccl-mps-room.yaml   # paths are relative to the plan file
        candidate: ../profiles/embedding-service.yaml
        residents: []     # extra resident profiles, as `--resident`
        regime: null      # as `--regime`; null follows the device
        policy: null      # a policy name from policies/ (as `--policy NAME`)

Pairs are probed in order of value of information, not in plan order: a pair whose predicted
slowdown interval straddles its resident's bound first, a pair no estimator can predict with them,
then pairs predicted clear of the bound, the nearer first (``probe_order``; docs/estimators.md).
A job that runs out of budget has then spent it where a probe tells most.

A plan is data (docs/security.md): it names a policy from the operator's ``policies/`` folder, never
a policy file of its own, since a policy decides what a probe may contact and run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, field_validator

from canary._model import Model, load_document


class PlannedPair(Model):
    device: str = Field(min_length=1)
    candidate: str = Field(min_length=1)
    residents: tuple[str, ...] = ()
    regime: str | None = None
    policy: str | None = None

    @field_validator("policy")
    @classmethod
    def _policy_by_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", value):
            raise ValueError("a plan names a policy from policies/ (e.g. 'batch'), not a file")
        return value


class WarmPlan(Model):
    name: str = Field(min_length=1)
    budget_s: float = Field(default=3600.0, gt=0, le=7 * 24 * 3600)
    concurrency: int = Field(default=1, ge=1, le=64)
    pairs: tuple[PlannedPair, ...] = Field(min_length=1)


def _resolve(base: Path, ref: str) -> str:
    path = Path(ref)
    if path.is_absolute() or ":" in ref or not path.suffix:
        return ref  # a catalog name or a live device (nvml:0) stays as written
    return str((base / path).resolve())


def load_plan(path: str | Path) -> WarmPlan:
    """Load a plan; file references are resolved relative to the plan file."""
    plan = load_document(WarmPlan, path)
    base = Path(path).resolve().parent
    pairs = tuple(
        p.model_copy(update={
            "device": _resolve(base, p.device),
            "candidate": _resolve(base, p.candidate),
            "residents": tuple(_resolve(base, r) for r in p.residents),
        })
        for p in plan.pairs
    )
    return plan.model_copy(update={"pairs": pairs})


def probe_order(values: Sequence[float]) -> list[int]:
    """Plan indices ordered by value of information (``canary.estimate.value_of_information`` of
    each pair), highest first; equal values keep plan order."""
    return sorted(range(len(values)), key=lambda i: (-values[i], i))
