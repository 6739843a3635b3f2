"""The simulator estimator: run the pair on the co-location simulator (``canary.sim``).

Resident alone, candidate alone and both together, ``RUNS`` times with different seeds for
``DURATION_S`` simulated seconds each (``canary.sim.true_pair_slowdown``); the point is the mean of
the runs' resident slowdowns, the interval their range widened by ``ABS_WIDTH_PCT`` points each side
(the simulator's model error is not in the spread of its own seeds: calibration measures it).
One resident at a time; an unprofiled resident or a regime the simulator cannot model has no estimate.

Where the benchmark's truth is itself simulated, this estimator is an oracle there, so
``canary bench --strategies`` does not let the hybrid use it (docs/estimators.md).
"""

from __future__ import annotations

import math

from canary.errors import CanaryError
from canary.estimate.base import Estimate, EstimateQuery, NoEstimate

NAME = "simulator"
RUNS = 3
DURATION_S = 20.0
ABS_WIDTH_PCT = 2.0


class SimulatorEstimator:
    """The pair on the simulator (module docstring)."""

    name = NAME

    def __init__(self, runs: int = RUNS, duration_s: float = DURATION_S) -> None:
        if runs < 1 or not duration_s > 0:
            raise ValueError("runs must be >= 1 and duration_s > 0")
        self.runs = runs
        self.duration_s = duration_s

    def estimate(self, query: EstimateQuery) -> Estimate | NoEstimate:
        from canary.sim import simulable_regime, true_pair_slowdown

        resident = query.resident.profile
        if resident is None:
            return NoEstimate(NAME, f"resident {query.resident.name} has no profile")
        try:
            regime = simulable_regime(query.regime, query.spec)
        except CanaryError as exc:
            return NoEstimate(NAME, f"the simulator cannot model this placement: {exc}")
        values = []
        for i in range(self.runs):
            try:
                truth = true_pair_slowdown(query.spec, resident, query.candidate, regime=str(regime),
                                           seed=query.seed * 7919 + i, duration_s=self.duration_s)
            except CanaryError as exc:
                return NoEstimate(NAME, f"the simulator could not run the pair: {exc}")
            if truth.resident_slowdown_pct is None or not math.isfinite(truth.resident_slowdown_pct):
                return NoEstimate(NAME, "the simulated resident completed no work to compare")
            values.append(float(truth.resident_slowdown_pct))
        point = sum(values) / len(values)
        return Estimate(NAME, min(values) - ABS_WIDTH_PCT, max(values) + ABS_WIDTH_PCT, point,
                        (f"{self.runs} simulator run(s) of {self.duration_s:g} s", f"regime {regime}",
                         f"device {query.spec.name}"),
                        f"simulated {len(values)} run(s): {', '.join(f'{v:.1f}%' for v in values)}")
