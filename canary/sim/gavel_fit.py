"""Fitting and scoring the time-sliced pair model (``canary.sim.pair_model``) on Gavel-format data.

- **Loss**: mean |log error| of the predicted throughput ratio (``pair_model.log_error``) plus
  ``RANK_WEIGHT × (1 − Spearman)``: the log error weighs a 10% miss at 20% slowdown like one at
  2000%, so the 10–60× pairs cannot dominate; the rank term rewards ordering pairs right, which is
  what an admission decision uses.
- **Fit**: a grid over ``GRID`` then coordinate refinement around the best point (``fit``); about a
  second per device on one core.
- **Validation**: leave one device out (``leave_one_device_out``): fit on every other GPU in the
  file, score the one left out, beside constant baselines — no slowdown (0), the training median,
  and 2× (100%) — scored on the same points.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from canary.sim.calibration import spearman
from canary.sim.gavel import GavelPair, gavel_gpus, jobs_never_alone, load_gavel_pairs, load_isolated
from canary.sim.pair_model import DeviceJob, PairModelParams, device_jobs, family, log_error, predict_pairs

RANK_WEIGHT = 0.5
GRID: dict[str, tuple[float, ...]] = {
    "timeslice_ms": (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0),
    "context_switch_us": (0.0, 100.0, 300.0, 1000.0, 3000.0),
    "host_contention": (0.0, 0.5, 1.0, 2.0, 4.0),
    "overlap": (0.0, 0.25, 0.5),
}
# ``host_serialization`` stays at 1 in the fit: Gavel's dispatcher pins both processes of a pair to
# the same CPU list, so their host phases share CPUs. The diagnostic grid below lets a device pick
# it (docs/simulator.md: V100's pairs prefer 0, P100's 0.9 — a property of the host machines).
DIAGNOSTIC_GRID: dict[str, tuple[float, ...]] = {**GRID, "host_serialization": (0.0, 0.5, 1.0)}
BOUNDS: dict[str, tuple[float, float]] = {
    "timeslice_ms": (0.5, 500.0),
    "context_switch_us": (0.0, 20000.0),
    "host_contention": (0.0, 10.0),
    "overlap": (0.0, 0.9),
    "host_serialization": (0.0, 1.0),
}


@dataclass(frozen=True)
class DeviceData:
    """One GPU's pairs and jobs, ready to score."""

    gpu: str
    pairs: tuple[GavelPair, ...]
    jobs: dict[str, DeviceJob]
    assumptions: tuple[str, ...]

    @property
    def measured_pct(self) -> np.ndarray:
        # A clamped entry (colocated ≥ isolated) means "no measurable slowdown": compared as 0.
        out: np.ndarray = np.maximum(
            0.0, np.array([p.slowdown_a_pct for p in self.pairs] + [p.slowdown_b_pct for p in self.pairs])
        )
        return out

    @property
    def families(self) -> list[str]:
        return [family(p.job_a) for p in self.pairs] + [family(p.job_b) for p in self.pairs]

    def predicted_pct(self, params: PairModelParams) -> np.ndarray:
        pa, pb = predict_pairs(params, self.jobs, [(p.job_a, p.job_b) for p in self.pairs])
        return np.concatenate([pa, pb])


@dataclass(frozen=True)
class Score:
    """How one predictor does on one device's slowdowns (two points per pair)."""

    label: str
    points: int
    median_abs_error_pct: float
    p90_abs_error_pct: float
    spearman: float  # nan for a constant predictor
    mean_abs_log_error: float


def load_device(path: str | Path | None, gpu: str) -> DeviceData:
    pairs = load_gavel_pairs(path, gpu=gpu)
    jobs, assumptions = device_jobs(load_isolated(path, gpu=gpu))
    assumptions += [f"{name}: isolated throughput 0 on {gpu}; its pairs skipped" for name in jobs_never_alone(path, gpu=gpu)]
    return DeviceData(gpu, tuple(pairs), jobs, tuple(f"{gpu}: {a}" for a in assumptions))


def score_values(label: str, predicted: np.ndarray, measured: np.ndarray) -> Score:
    err = np.abs(predicted - measured)
    return Score(
        label=label,
        points=len(measured),
        median_abs_error_pct=float(np.median(err)),
        p90_abs_error_pct=float(np.percentile(err, 90)),
        spearman=spearman(list(predicted), list(measured)),
        mean_abs_log_error=float(log_error(predicted, measured).mean()),
    )


def loss(params: PairModelParams, devices: Sequence[DeviceData]) -> float:
    """The fit objective over one or more devices (each device weighs the same)."""
    total = 0.0
    for dev in devices:
        predicted, measured = dev.predicted_pct(params), dev.measured_pct
        rho = spearman(list(predicted), list(measured))
        total += float(log_error(predicted, measured).mean()) + RANK_WEIGHT * (1.0 - (0.0 if rho != rho else rho))
    return total / len(devices)


def fit(
    devices: Sequence[DeviceData],
    *,
    grid: dict[str, tuple[float, ...]] | None = None,
    refine_rounds: int = 3,
) -> tuple[PairModelParams, float]:
    """The parameters minimising :func:`loss` on ``devices``: ``grid`` (default ``GRID``), then
    coordinate refinement of the grid's parameters (each tried at ×/÷ a shrinking step, inside
    ``BOUNDS``). Deterministic."""
    if not devices or not any(d.pairs for d in devices):
        raise ValueError("no pairs to fit on")
    grid = GRID if grid is None else grid
    names = list(grid)
    best: tuple[float, PairModelParams] | None = None
    for values in itertools.product(*(grid[n] for n in names)):
        params = PairModelParams(**dict(zip(names, values, strict=True)))
        value = loss(params, devices)
        if best is None or value < best[0] - 1e-12:
            best = (value, params)
    assert best is not None
    for step in (0.5, 0.25, 0.1)[:refine_rounds]:
        improved = True
        while improved:
            improved = False
            for name in names:
                current = best[1].as_dict()
                x = current[name]
                lo, hi = BOUNDS[name]
                candidates: tuple[float, ...]
                if name in ("overlap", "host_serialization"):
                    candidates = (x - step / 2, x + step / 2)
                else:
                    candidates = (x * (1 - step), x * (1 + step)) if x > 0 else (step * (hi - lo) / 100,)
                for candidate in candidates:
                    if not lo <= candidate <= hi or (name == "timeslice_ms" and candidate <= 0):
                        continue
                    trial = PairModelParams(**{**current, name: float(round(candidate, 6))})
                    value = loss(trial, devices)
                    if value < best[0] - 1e-9:
                        best = (value, trial)
                        improved = True
    return best[1], best[0]


def baselines(measured: np.ndarray, training_median_pct: float) -> list[Score]:
    """The constant predictors: no slowdown, the training median, and 2× (100%)."""
    out = []
    for label, value in (
        ("constant 0 (no slowdown)", 0.0),
        (f"constant training median ({training_median_pct:.0f}%)", training_median_pct),
        ("constant 2x (100%)", 100.0),
    ):
        out.append(score_values(label, np.full(len(measured), value), measured))
    return out


@dataclass(frozen=True)
class HeldOut:
    """One leave-one-device-out round."""

    held_out: str
    trained_on: tuple[str, ...]
    params: PairModelParams
    model: Score
    baselines: tuple[Score, ...]
    training_median_pct: float
    by_family: dict[str, tuple[int, float]]


def by_family(dev: DeviceData, predicted: np.ndarray) -> dict[str, tuple[int, float]]:
    err = np.abs(predicted - dev.measured_pct)
    fams = np.array(dev.families)
    return {f: (int((fams == f).sum()), float(np.median(err[fams == f]))) for f in sorted(set(dev.families))}


def leave_one_device_out(path: str | Path | None = None) -> list[HeldOut]:
    """For each GPU in the file: fit on the others, score it. Needs at least two GPUs."""
    gpus = gavel_gpus(path)
    if len(gpus) < 2:
        raise ValueError("leave-one-device-out needs a file with at least two GPUs")
    devices = {g: load_device(path, g) for g in gpus}
    rounds = []
    for held in gpus:
        train = [devices[g] for g in gpus if g != held]
        params, _ = fit(train)
        training_median = float(np.median(np.concatenate([d.measured_pct for d in train])))
        dev = devices[held]
        predicted = dev.predicted_pct(params)
        rounds.append(
            HeldOut(
                held_out=held,
                trained_on=tuple(d.gpu for d in train),
                params=params,
                model=score_values("model", predicted, dev.measured_pct),
                baselines=tuple(baselines(dev.measured_pct, training_median)),
                training_median_pct=training_median,
                by_family=by_family(dev, predicted),
            )
        )
    return rounds


def fit_all(path: str | Path | None = None) -> tuple[PairModelParams, float, tuple[str, ...]]:
    """The parameters fitted on every GPU of the file, the training median slowdown (%) and the GPUs."""
    gpus = tuple(gavel_gpus(path))
    devices = [load_device(path, g) for g in gpus]
    params, _ = fit(devices)
    return params, float(np.median(np.concatenate([d.measured_pct for d in devices]))), gpus

