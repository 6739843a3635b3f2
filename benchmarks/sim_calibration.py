"""Calibrate the simulator against Gavel's measured V100 co-location throughputs and report the
held-out error.

    .venv/bin/python benchmarks/sim_calibration.py [--quick]

Fits the concurrent-kernel parameters under ``streams`` and the time-slice parameters under
``timeslice`` on a seeded 70% split of the unordered pairs, then prints, on the held-out 30%:
median and p90 absolute error of predicted vs measured slowdown (percentage points), Spearman rank
correlation, and a per-family breakdown. The baseline measured in the same run is the "no
contention model" predictor (every slowdown 0%), so each error is also shown as a ratio to it.
All predicted numbers come from the simulator; all measured numbers from Gavel.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary.sim.calibration import (
    STREAMS_GRID,
    TIMESLICE_GRID,
    CalibrationReport,
    PairPrediction,
    fit,
    predict,
    report,
    split_pairs,
)
from canary.sim.gavel import GavelDataMissing, load_gavel_pairs
from canary.sim.params import CALIBRATED


def _show(label: str, rep: CalibrationReport, baseline: CalibrationReport | None = None) -> None:
    ratio = ""
    if baseline is not None and baseline.median_abs_error_pct > 0:
        ratio = (
            f"  (vs no-contention baseline: median x{rep.median_abs_error_pct / baseline.median_abs_error_pct:.2f}, "
            f"p90 x{rep.p90_abs_error_pct / baseline.p90_abs_error_pct:.2f})"
        )
    print(
        f"{label:<44} points={rep.points:>3}  median|err|={rep.median_abs_error_pct:7.1f} pp  "
        f"p90|err|={rep.p90_abs_error_pct:8.1f} pp  spearman={rep.spearman:5.2f}  "
        f"mean|log err|={rep.mean_abs_log_error:.3f}{ratio}"
    )


def _families(rep: CalibrationReport) -> None:
    for family, (points, median) in rep.by_family.items():
        print(f"    {family:<16} points={points:>3}  median|err|={median:8.1f} pp")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="evaluate the stored parameters only (no fit)")
    args = parser.parse_args()
    try:
        pairs = load_gavel_pairs()
    except GavelDataMissing as exc:
        print(f"skipped: {exc}")
        return 0
    train, held = split_pairs(pairs)
    print(
        f"Gavel V100 pairs: {len(pairs)} feasible unordered pairs; train {len(train)}, held-out {len(held)}"
    )
    zero = report([PairPrediction(p, 0.0, 0.0) for p in held])
    _show("baseline: no contention (0% everywhere)", zero)
    started = time.perf_counter()
    if args.quick:
        streams_params, timeslice_params = CALIBRATED, CALIBRATED
    else:
        streams_params, streams_train = fit(train, regime="streams", grid=STREAMS_GRID)
        _show("fit under streams (training split)", streams_train)
        timeslice_params, timeslice_train = fit(train, regime="timeslice", grid=TIMESLICE_GRID)
        _show("fit under timeslice (training split)", timeslice_train)
    print(
        f"streams parameters: serialization_weight={streams_params.serialization_weight} "
        f"interference_per_share={streams_params.interference_per_share} "
        f"dram_efficiency={streams_params.dram_efficiency}"
    )
    print(
        f"timeslice parameters (diagnostic): timeslice_ms={timeslice_params.timeslice_ms} "
        f"context_switch_us={timeslice_params.context_switch_us}"
    )
    stored = (CALIBRATED.serialization_weight, CALIBRATED.interference_per_share, CALIBRATED.dram_efficiency)
    fitted = (
        streams_params.serialization_weight,
        streams_params.interference_per_share,
        streams_params.dram_efficiency,
    )
    if stored != fitted:
        print(f"note: the fitted streams parameters differ from canary.sim.params.CALIBRATED = {CALIBRATED}")
    for label, regime, params in (
        (
            "headline",
            "streams",
            replace(
                CALIBRATED,
                **dict(
                    zip(
                        ("serialization_weight", "interference_per_share", "dram_efficiency"),
                        fitted,
                        strict=True,
                    )
                ),
            ),
        ),
        ("diagnostic", "timeslice", timeslice_params),
    ):
        predictions = predict(held, params, regime=regime)
        rep = report(predictions)
        _show(f"{label}: held-out, simulated as {regime}", rep, zero)
        _families(rep)
        kept = [p for p in predictions if "Recommendation" not in p.pair.job_a + p.pair.job_b]
        dropped = [p for p in held if "Recommendation" not in p.job_a + p.job_b]
        _show(
            f"{label}: held-out without Recommendation",
            report(kept),
            report([PairPrediction(p, 0.0, 0.0) for p in dropped]),
        )
    print(f"elapsed {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
