"""``canary sim calibrate``: score the simulator's pair model on a Gavel-format file.

``canary sim calibrate --data FILE --gpu NAME [--no-fit] [--json]``

Predicts every measured pair of GPU ``NAME`` in ``FILE`` and prints the median absolute error of
the slowdowns (percentage points), the 90th percentile, Spearman's rank correlation, and the same
numbers for three constant baselines (no slowdown, the training median, 2×).

Which parameters: by default the model is fitted on the file's *other* GPUs (leave one device
out) when it has any, else the parameters shipped with canary (fitted on Gavel's V100 and P100)
are used; ``--no-fit`` always uses the shipped ones. The GPU being scored is never fitted on.

A GPU the catalog does not know is still scored: the model needs only the isolated step times the
file measures on that GPU (under time slicing a context has the whole device while it runs). The
output says so, and names every other assumption (job types with no profile).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from canary.errors import InputError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "sim",
        help="the co-location simulator: calibration against measured pairs",
        description="The co-location simulator.",
    )
    actions = parser.add_subparsers(dest="sim_command", metavar="ACTION", required=True)
    calibrate = actions.add_parser(
        "calibrate",
        help="score the pair model on a Gavel-format file for one GPU",
        description="Score the simulator's time-sliced pair model on every measured pair of one GPU in a "
        "Gavel-format file: median absolute error, 90th percentile, Spearman, and constant baselines. "
        "Exit 0 scored, 2 bad input.",
    )
    calibrate.add_argument("--data", required=True, metavar="FILE", help="Gavel-format JSON file")
    calibrate.add_argument("--gpu", required=True, metavar="NAME", help="a GPU section of FILE (e.g. v100, p100, k80)")
    calibrate.add_argument(
        "--no-fit",
        action="store_true",
        help="score with the parameters shipped with canary; do not fit on the file's other GPUs",
    )
    calibrate.add_argument("--json", action="store_true", help="print the result as JSON")
    calibrate.set_defaults(handler=run_calibrate)


def base_gpu_name(section: str) -> str:
    """``"k80_unconsolidated"`` → ``"k80"``."""
    return section.split("_", 1)[0].lower()


def calibrate(data: str, gpu: str, *, no_fit: bool = False) -> dict[str, Any]:
    """The result of ``canary sim calibrate`` as a JSON-ready dict. Raises ``InputError``."""
    import numpy as np

    from canary.catalog import UnknownDevice, lookup
    from canary.sim.gavel import gavel_gpus
    from canary.sim.gavel_fit import baselines, by_family, fit, load_device, score_values
    from canary.sim.params import GAVEL_FITTED_ON, GAVEL_PAIR_PARAMS, GAVEL_TRAINING_MEDIAN_PCT

    gpus = gavel_gpus(data)
    if gpu not in gpus:
        raise InputError(
            f"no '{gpu}' section (the file has: {', '.join(gpus) or 'none'})", file=data, field=gpu
        )
    device = load_device(data, gpu)
    if not device.pairs:
        raise InputError("no measured pair (every entry is [0, 0] or missing)", file=data, field=gpu)
    notes: list[str] = []
    # Never fit on the GPU being scored, nor on a variant of it (Gavel's full file has sections such
    # as ``k80_unconsolidated`` beside ``k80``).
    others = [g for g in gpus if base_gpu_name(g) != base_gpu_name(gpu)]
    trainable = []
    if not no_fit:
        for other in others:
            try:
                candidate = load_device(data, other)
            except InputError as exc:
                notes.append(f"not fitted on '{other}': {exc.problem}")
                continue
            if candidate.pairs:
                trainable.append(candidate)
    if trainable:
        params, _ = fit(trainable)
        fitted_on = tuple(d.gpu for d in trainable)
        training_median = float(np.median(np.concatenate([d.measured_pct for d in trainable])))
        source = f"fitted on this file's other GPUs ({', '.join(fitted_on)}); '{gpu}' held out"
    else:
        params, fitted_on, training_median = GAVEL_PAIR_PARAMS, GAVEL_FITTED_ON, GAVEL_TRAINING_MEDIAN_PCT
        why = "--no-fit" if no_fit else "the file has no other GPU to fit on"
        source = f"shipped with canary (fitted on Gavel {', '.join(GAVEL_FITTED_ON)}; {why})"
    if (no_fit or not trainable) and base_gpu_name(gpu) in {base_gpu_name(g) for g in GAVEL_FITTED_ON}:
        notes.append(
            f"the shipped parameters were fitted on Gavel's '{base_gpu_name(gpu)}' pairs: if this is the "
            "same data, this score is in-sample"
        )
    try:
        spec = lookup(base_gpu_name(gpu))
        catalog = spec.name
    except UnknownDevice:
        catalog = None
        notes.append(
            f"no catalog entry for '{gpu}': none needed, the model uses only the isolated step times "
            "the file measures on it"
        )
    predicted = device.predicted_pct(params)
    model = score_values("model", predicted, device.measured_pct)
    base = baselines(device.measured_pct, training_median)
    best = min(base, key=lambda s: s.median_abs_error_pct)
    improvement = (
        1.0 - model.median_abs_error_pct / best.median_abs_error_pct if best.median_abs_error_pct > 0 else math.nan
    )

    def score_dict(s: Any) -> dict[str, Any]:
        return {
            "label": s.label,
            "points": s.points,
            "median_abs_error_pct": round(s.median_abs_error_pct, 3),
            "p90_abs_error_pct": round(s.p90_abs_error_pct, 3),
            "spearman": None if math.isnan(s.spearman) else round(s.spearman, 4),
            "mean_abs_log_error": round(s.mean_abs_log_error, 4),
        }

    return {
        "file": data,
        "gpu": gpu,
        "catalog_device": catalog,
        "pairs": len(device.pairs),
        "points": model.points,
        "regime": "timeslice",
        "parameters": params.as_dict(),
        "parameters_source": source,
        "fitted_on": list(fitted_on),
        "training_median_pct": round(training_median, 3),
        "model": score_dict(model),
        "baselines": [score_dict(b) for b in base],
        "best_baseline": best.label,
        "improvement_over_best_baseline": None if math.isnan(improvement) else round(improvement, 4),
        "by_family": {
            f: {"points": n, "median_abs_error_pct": round(e, 3)} for f, (n, e) in by_family(device, predicted).items()
        },
        "assumptions": [*device.assumptions, *(a for d in trainable for a in d.assumptions), *notes],
    }


def _text(result: dict[str, Any]) -> str:
    lines = [
        f"{result['file']}: GPU '{result['gpu']}' "
        f"(catalog: {result['catalog_device'] or 'no entry'}), {result['pairs']} pairs, {result['points']} slowdowns",
        f"regime {result['regime']}; parameters {result['parameters_source']}:",
        "  " + ", ".join(f"{k}={v:g}" for k, v in result["parameters"].items()),
        "",
        f"{'predictor':<40} {'median |err| pp':>15} {'p90 |err| pp':>13} {'Spearman':>9}",
    ]
    for row in [result["model"], *result["baselines"]]:
        rho = "-" if row["spearman"] is None else f"{row['spearman']:.3f}"
        lines.append(
            f"{row['label']:<40} {row['median_abs_error_pct']:>15.1f} {row['p90_abs_error_pct']:>13.1f} {rho:>9}"
        )
    gain = result["improvement_over_best_baseline"]
    if gain is not None:
        lines.append("")
        lines.append(f"model vs best baseline ({result['best_baseline']}): {gain * 100:+.1f}% lower median error"
                     if gain >= 0 else
                     f"model vs best baseline ({result['best_baseline']}): {-gain * 100:.1f}% higher median error")
    for note in result["assumptions"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def run_calibrate(args: argparse.Namespace) -> int:
    result = calibrate(args.data, args.gpu, no_fit=args.no_fit)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_text(result) + "\n")
    return 0
