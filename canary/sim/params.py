"""The simulator's calibrated parameters.

Two sets, for two regimes:

- ``CALIBRATED``: the concurrent-kernel parameters (``streams``/``mps``/``green``) the simulator runs
  with by default. Fitted by ``canary.sim.calibration.fit`` on a seeded 70% split of Gavel's V100
  pairs read as if they had run concurrently (grid ``STREAMS_GRID``, objective: median absolute
  error). Gavel did not run its pairs concurrently (below), so these numbers are a best effort
  for concurrent regimes, not a measurement of one; ``priority_wait_fraction`` has no data.
- ``GAVEL_PAIR_PARAMS`` / :func:`calibrated_regime`: the time-sliced regime Gavel's pairs actually
  ran under, fitted on every GPU of the shipped Gavel file; what bench and the judge benchmark
  should use to replay Gavel's pairs. Leave-one-device-out errors are in docs/simulator.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from canary.sim.model import ContentionParams
from canary.sim.pair_model import PairModelParams

CALIBRATED = ContentionParams(
    serialization_weight=0.0,
    interference_per_share=0.0,
    dram_efficiency=0.75,
)


# --- The time-sliced regime Gavel's pairs actually ran under (docs/simulator.md) -------------------
#
# Gavel launched both jobs of a pair as separate processes on one GPU with MPS off by default
# (scheduler/worker.py ``--use_mps`` defaults to False; the documented worker command omits it), so
# the driver time-sliced them. ``canary.sim.pair_model`` is that regime in closed form; these are its
# parameters fitted on every GPU of the shipped Gavel file (V100 and P100) by
# ``canary.sim.gavel_fit.fit_all``; reproduce with ``python benchmarks/sim_calibration.py``. How they
# do on a device they were not fitted on is in docs/simulator.md (leave-one-device-out).

GAVEL_PAIR_PARAMS = PairModelParams(
    timeslice_ms=32.0,
    context_switch_us=4500.0,
    host_contention=0.0,
    overlap=0.0,
)
GAVEL_FITTED_ON: tuple[str, ...] = ("p100", "v100")
# Median measured slowdown (%) over the fitted points: the "training median" constant baseline.
GAVEL_TRAINING_MEDIAN_PCT = 88.41036228625737


@dataclass(frozen=True)
class CalibratedRegime:
    """The regime and parameters the Gavel calibration chose, for the simulator's users.

    ``regime`` is a :class:`~canary.sim.device.SimDevice` regime string; ``contention`` carries the
    fitted time slice and switch cost in the event simulator's parameters; ``pair`` is the closed-form
    model's full parameter set; ``fitted_on`` names the GPUs of the fit."""

    regime: str
    contention: ContentionParams
    pair: PairModelParams
    fitted_on: tuple[str, ...]
    training_median_pct: float


def calibrated_regime() -> CalibratedRegime:
    """The regime (``timeslice``) and parameters fitted on Gavel's pairs.

    The fit chose no host contention and no overlap, so the event simulator's ``timeslice`` engine
    (one context at a time, ``timeslice_ms`` slices, ``context_switch_us`` dead time per switch)
    runs the same mechanisms as the closed-form model."""
    return CalibratedRegime(
        regime="timeslice",
        contention=replace(
            CALIBRATED,
            timeslice_ms=GAVEL_PAIR_PARAMS.timeslice_ms,
            context_switch_us=GAVEL_PAIR_PARAMS.context_switch_us,
        ),
        pair=GAVEL_PAIR_PARAMS,
        fitted_on=GAVEL_FITTED_ON,
        training_median_pct=GAVEL_TRAINING_MEDIAN_PCT,
    )
