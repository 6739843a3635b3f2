"""The GPU co-location simulator: ground truth for tests, the ``sim`` executor/monitor and the benchmark.

A model, not a GPU (see docs/simulator.md): occupancy rules for SM residency, proportional DRAM
bandwidth sharing, kernel-granularity serialization when SMs are oversubscribed, time slices
between contexts, request queueing for serving workloads, seeded noise. Its global contention
parameters are calibrated on Gavel's measured co-location throughputs
(``calibrated_regime()`` returns the regime and parameters the calibration chose).

Names are loaded on first use so that ``import canary.sim`` stays light (numpy is imported only
when a device is built).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canary.sim.device import SimDevice, SimOutOfMemory, SimPlacementError, SimWindow, simulable_regime
    from canary.sim.model import ContentionParams, Traits, derive_traits
    from canary.sim.params import CALIBRATED, CalibratedRegime, calibrated_regime
    from canary.sim.truth import PairTruth, true_pair_slowdown

__all__ = [
    "CALIBRATED",
    "CalibratedRegime",
    "ContentionParams",
    "PairTruth",
    "SimDevice",
    "SimOutOfMemory",
    "SimPlacementError",
    "SimWindow",
    "Traits",
    "calibrated_regime",
    "derive_traits",
    "simulable_regime",
    "true_pair_slowdown",
]

_WHERE = {
    "CALIBRATED": "canary.sim.params",
    "CalibratedRegime": "canary.sim.params",
    "calibrated_regime": "canary.sim.params",
    "ContentionParams": "canary.sim.model",
    "Traits": "canary.sim.model",
    "derive_traits": "canary.sim.model",
    "PairTruth": "canary.sim.truth",
    "true_pair_slowdown": "canary.sim.truth",
    "SimDevice": "canary.sim.device",
    "SimOutOfMemory": "canary.sim.device",
    "SimPlacementError": "canary.sim.device",
    "SimWindow": "canary.sim.device",
    "simulable_regime": "canary.sim.device",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'canary.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
