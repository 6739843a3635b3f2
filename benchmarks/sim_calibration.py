"""Calibrate the simulator against Gavel's measured co-location throughputs (V100 and P100) and
report how it does on a device it was not fitted on.

    .venv/bin/python benchmarks/sim_calibration.py [--event-sim [--quick]]

Headline: the time-sliced pair model (``canary.sim.pair_model``; Gavel ran its pairs time-sliced,
see docs/simulator.md), fitted with a log-error + rank loss (``canary.sim.gavel_fit``) and scored
**leave one device out**: fit on V100, score P100, and the reverse. Beside it, in the same run and
on the same points, the constant baselines: no slowdown (0), the training median, and 2x (100%).
Then the fit on every GPU (the parameters canary ships, checked against
``canary.sim.params.GAVEL_PAIR_PARAMS``) and the figures behind docs/simulator.md's account of the
pairs no GPU-contention model explains.

``--event-sim`` adds the older calibration of the event simulator's concurrent-kernel parameters
on a 70/30 split of the V100 pairs under ``streams`` (slow: minutes; ``--quick`` skips its fit).
All predicted numbers come from canary; all measured numbers from Gavel.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

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
from canary.sim.gavel import GavelDataMissing, default_gavel_path, gavel_gpus, load_gavel_pairs
from canary.sim.gavel_fit import (
    DIAGNOSTIC_GRID,
    DeviceData,
    Score,
    baselines,
    fit_all,
    leave_one_device_out,
    load_device,
    score_values,
)
from canary.sim.gavel_fit import (
    fit as fit_pair_model,
)
from canary.sim.params import CALIBRATED, GAVEL_PAIR_PARAMS


def _row(s: Score, best: Score | None = None) -> str:
    rho = "     -" if s.spearman != s.spearman else f"{s.spearman:6.3f}"
    ratio = ""
    if best is not None and best.median_abs_error_pct > 0:
        ratio = f"  x{s.median_abs_error_pct / best.median_abs_error_pct:.2f} of best baseline"
    return (
        f"  {s.label:<42} points={s.points:>4}  median|err|={s.median_abs_error_pct:7.1f} pp  "
        f"p90|err|={s.p90_abs_error_pct:8.1f} pp  spearman={rho}{ratio}"
    )


def _sums(dev: DeviceData) -> np.ndarray:
    """Per pair: normalised throughput of A + of B (1.0 = together they do one machine's work)."""
    return np.array([p.colocated_a / p.isolated_a + p.colocated_b / p.isolated_b for p in dev.pairs])


def account(dev: DeviceData, predicted: np.ndarray) -> None:
    """The figures behind docs/simulator.md's "what no GPU model explains"."""
    sums = _sums(dev)
    measured = dev.measured_pct
    victims = np.array([p.job_a for p in dev.pairs] + [p.job_b for p in dev.pairs])
    fams = np.array(dev.families)
    gpu_bound = np.array(
        [dev.jobs[p.job_a].host_ms / dev.jobs[p.job_a].step_ms < 0.15
         and dev.jobs[p.job_b].host_ms / dev.jobs[p.job_b].step_ms < 0.15 for p in dev.pairs]
    )
    print(
        f"  {dev.gpu}: pairs {len(sums)}; throughput sum: median {np.median(sums):.2f}, "
        f"p10 {np.percentile(sums, 10):.2f}, p90 {np.percentile(sums, 90):.2f}; "
        f"< 1.0: {np.mean(sums < 1.0) * 100:.0f}%; < 0.5: {np.mean(sums < 0.5) * 100:.0f}%; "
        f"> 1.2 with both jobs GPU-bound (host < 15% of step): {int(np.sum((sums > 1.2) & gpu_bound))} "
        f"of {int(gpu_bound.sum())} such pairs"
    )
    rec = fams == "Recommendation"
    print(
        f"    Recommendation as the slowed job: {rec.sum()} of {len(rec)} points, median measured "
        f"{np.median(measured[rec]):.0f}%, model median |err| {np.median(np.abs(predicted - measured)[rec]):.0f} pp; "
        f"all other points: model median |err| {np.median(np.abs(predicted - measured)[~rec]):.1f} pp"
    )
    oracle = np.array([np.median(measured[victims == v]) for v in victims])
    print(
        f"    in-sample oracle that knows each job's median slowdown on {dev.gpu} itself: "
        f"median |err| {np.median(np.abs(oracle - measured)):.1f} pp (a floor for any per-job model)"
    )


def pair_model_section() -> int:
    path = default_gavel_path()
    gpus = gavel_gpus(path)
    devices = {g: load_device(path, g) for g in gpus}
    print(f"Gavel file {path.name}: " + ", ".join(f"{g} {len(d.pairs)} pairs" for g, d in devices.items()))
    print("regime: timeslice (Gavel ran each pair as two processes on one GPU, MPS off)")
    print()
    print("== Leave one device out: fit on the other GPU(s), score the held-out one ==")
    rounds = leave_one_device_out(path)
    for r in rounds:
        best = min(r.baselines, key=lambda s: s.median_abs_error_pct)
        print(f"held out {r.held_out}, fitted on {', '.join(r.trained_on)}: {r.params}")
        print(_row(r.model, best))
        for b in r.baselines:
            print(_row(b, best))
        gain = 1.0 - r.model.median_abs_error_pct / best.median_abs_error_pct
        verdict = f"{gain * 100:.1f}% lower" if gain >= 0 else f"{-gain * 100:.1f}% higher"
        print(f"  model vs best baseline: {verdict} median error (target: >= 20% lower, <= 25 pp, rho >= 0.6)")
        for fam, (points, err) in r.by_family.items():
            print(f"    {fam:<16} points={points:>4}  median|err|={err:7.1f} pp")
    print()
    print("== Fitted on every GPU (the parameters canary ships) ==")
    params, training_median, fitted_on = fit_all(path)
    print(f"fitted on {', '.join(fitted_on)}: {params}; training median {training_median:.2f}%")
    if params != GAVEL_PAIR_PARAMS:
        print(f"note: differs from canary.sim.params.GAVEL_PAIR_PARAMS = {GAVEL_PAIR_PARAMS}")
    else:
        print("same as canary.sim.params.GAVEL_PAIR_PARAMS")
    for g, dev in devices.items():
        predicted = dev.predicted_pct(params)
        print(f" {g} (in-sample):")
        print(_row(score_values("model", predicted, dev.measured_pct)))
        for b in baselines(dev.measured_pct, training_median):
            print(_row(b))
    print()
    print("== What no GPU-contention model explains (figures for docs/simulator.md) ==")
    for r in rounds:
        dev = devices[r.held_out]
        account(dev, dev.predicted_pct(r.params))
    print()
    print("== Diagnostic: each device fitted alone, host_serialization free (in-sample) ==")
    for g, dev in devices.items():
        alone, _ = fit_pair_model([dev], grid=DIAGNOSTIC_GRID)
        print(f"  {g}: {alone}")
        print(_row(score_values("model (in-sample)", dev.predicted_pct(alone), dev.measured_pct)))
    return 0


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
    for fam, (points, median) in rep.by_family.items():
        print(f"    {fam:<16} points={points:>3}  median|err|={median:8.1f} pp")


def event_simulator_section(quick: bool) -> int:
    """The concurrent-regime (``streams``) calibration of the event simulator on V100 (slow)."""
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
    if quick:
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



def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--event-sim", action="store_true", help="also calibrate the event simulator under streams (slow)"
    )
    parser.add_argument("--quick", action="store_true", help="with --event-sim: evaluate the stored parameters only")
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        pair_model_section()
    except GavelDataMissing as exc:
        print(f"skipped: {exc}")
        return 0
    print(f"elapsed {time.perf_counter() - started:.1f} s")
    if args.event_sim:
        print()
        print("== Event simulator, concurrent-kernel parameters (V100, streams, 70/30 split) ==")
        return event_simulator_section(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
