"""The estimator interface: what an interference estimator is asked, and what it answers.

An estimator predicts the slowdown a candidate would cause one resident (percent of the resident's
solo latency, or its throughput loss: the unit the probe and the evidence use) as an interval with a
point, and says where the prediction came from. It never decides an admission by itself: its
intervals are calibrated against the store's probe outcomes first (:mod:`canary.estimate.calibration`),
and only a policy that trusts it may let a calibrated interval decide (docs/estimators.md).

No SQLAlchemy here: the store is reached through an ``EvidenceReader`` (:mod:`canary.estimate.store`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import WorkloadProfile
    from canary.regime import Regime
    from canary.snapshot import Resident
    from evidence_store.schemas import EvidenceOut


@dataclass(frozen=True)
class Estimate:
    """A predicted resident slowdown: ``lo_pct <= point_pct <= hi_pct`` (percent, 10 = 10% slower),
    with provenance: the estimator's ``estimator`` name, the ``inputs`` it used (profile fields,
    evidence ids, simulator runs) and a one-line ``detail``. ``group``: a kind of prediction the
    estimator's calibration keeps apart (the transfer estimator's neighbour kind: an earlier version's
    errors say nothing about another regime's); empty for one group."""

    estimator: str
    lo_pct: float
    hi_pct: float
    point_pct: float
    inputs: tuple[str, ...] = ()
    detail: str = ""
    group: str = ""

    def __post_init__(self) -> None:
        values = (self.lo_pct, self.point_pct, self.hi_pct)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"{self.estimator}: an estimate must be finite, got {values}")
        if not self.lo_pct <= self.point_pct <= self.hi_pct:
            raise ValueError(f"{self.estimator}: lo <= point <= hi does not hold for {values}")


@dataclass(frozen=True)
class NoEstimate:
    """The estimator cannot predict this pair, and why (an unprofiled resident, no neighbouring
    evidence, a regime the simulator cannot model). Unknown is an answer, never a zero."""

    estimator: str
    reason: str


@runtime_checkable
class EvidenceReader(Protocol):
    """Read-only access to the evidence store an estimator may use."""

    def records(self) -> Sequence[EvidenceOut]:
        """Every current and stale record (revoked ones never), newest first."""
        ...


@dataclass(frozen=True)
class NoEvidence:
    """A reader over no store (``--no-store``, or a store that does not exist yet)."""

    def records(self) -> Sequence[EvidenceOut]:
        return ()


@dataclass(frozen=True)
class EstimateQuery:
    """One pair to predict: ``resident`` (whose slowdown is predicted, with its profile) next to the
    candidate, on ``spec`` under ``regime``; ``residents`` are all the device's residents (context
    for estimators that model them together); ``reader`` the store's evidence; ``seed`` for
    estimators that draw random numbers."""

    candidate: WorkloadProfile
    resident: Resident
    spec: DeviceSpec
    regime: Regime
    residents: tuple[Resident, ...] = ()
    reader: EvidenceReader = field(default_factory=NoEvidence)
    seed: int = 0

    @property
    def device_type(self) -> str:
        return self.spec.name


@runtime_checkable
class Estimator(Protocol):
    """An interference estimator: a stable ``name`` and ``estimate(query)``."""

    name: str

    def estimate(self, query: EstimateQuery) -> Estimate | NoEstimate:
        ...
