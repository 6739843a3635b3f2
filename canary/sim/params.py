"""The calibrated contention parameters the simulator runs with by default.

Fitted on a seeded 70% training split of Gavel's measured V100 co-location throughputs under
``streams`` by ``canary.sim.calibration.fit`` (grid ``STREAMS_GRID``, objective: median absolute
error of the training pairs' slowdowns); reproduce with ``python benchmarks/sim_calibration.py``.
The held-out error is in docs/simulator.md.

The fit chose no kernel-granularity serialization and no interference term: on Gavel's pairs,
proportional SM sharing plus DRAM sharing at 75% of peak bandwidth explains the median pair best.
The time-slice parameters keep their documented defaults: Gavel space-shared its GPU, so its data
cannot calibrate a time slice (a time-sliced reading of it fits best with a 32 ms slice at the edge
of the grid, which no driver uses; see docs/simulator.md). ``priority_wait_fraction`` has no data.
"""

from __future__ import annotations

from canary.sim.model import ContentionParams

CALIBRATED = ContentionParams(
    serialization_weight=0.0,
    interference_per_share=0.0,
    dram_efficiency=0.75,
)
