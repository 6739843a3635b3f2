"""Fitting the pair model on the Gavel data shipped with canary (canary/sim/data/gavel)."""

from __future__ import annotations

import numpy as np
import pytest

from canary.sim.gavel_fit import baselines, fit, fit_all, load_device, loss, score_values
from canary.sim.params import GAVEL_PAIR_PARAMS, GAVEL_TRAINING_MEDIAN_PCT


@pytest.mark.slow
def test_shipped_parameters_are_what_the_fit_produces() -> None:
    params, training_median, gpus = fit_all()
    assert gpus == ("p100", "v100")
    assert params == GAVEL_PAIR_PARAMS
    assert training_median == pytest.approx(GAVEL_TRAINING_MEDIAN_PCT)


@pytest.mark.slow
def test_fitted_on_v100_ranks_p100_pairs() -> None:
    """Leave one device out, V100 → P100: what the model is for is ranking pairs it never saw.
    (Its median error does not beat the training median there; docs/simulator.md says why.)"""
    v100, p100 = load_device(None, "v100"), load_device(None, "p100")
    params, _ = fit([v100])
    held = score_values("model", p100.predicted_pct(params), p100.measured_pct)
    zero, _, double = baselines(p100.measured_pct, float(np.median(v100.measured_pct)))
    assert held.spearman >= 0.6
    assert held.median_abs_error_pct < zero.median_abs_error_pct
    assert held.median_abs_error_pct < double.median_abs_error_pct


def test_loss_prefers_the_fitted_parameters_to_a_neighbour() -> None:
    devices = [load_device(None, "p100"), load_device(None, "v100")]
    worse = GAVEL_PAIR_PARAMS.__class__(
        **{**GAVEL_PAIR_PARAMS.as_dict(), "timeslice_ms": GAVEL_PAIR_PARAMS.timeslice_ms * 4}
    )
    assert loss(GAVEL_PAIR_PARAMS, devices) < loss(worse, devices)
