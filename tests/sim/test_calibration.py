"""The calibrated simulator against Gavel's held-out pairs.

Thresholds, and why:

- the held-out median absolute error must be at most 90% of the "no contention" predictor's
  (every slowdown 0%) on the same pairs: a contention model that cannot beat predicting nothing is
  not calibrated;
- Spearman's rank correlation of predicted and measured slowdowns must be at least 0.3: with 198
  points, a correlation above ~0.23 has a two-sided p < 0.001 under no association, so 0.3 means
  the simulator orders pairs by harm, which is what a benchmark built on it needs;
- without the Recommendation pairs (a class the model misses, docs/simulator.md), the median error
  must stay under 50 percentage points.
"""

from __future__ import annotations

import pytest

from canary.sim import CALIBRATED
from canary.sim.calibration import GAVEL_REGIME, PairPrediction, predict, report, spearman, split_pairs
from canary.sim.gavel import GavelDataMissing, GavelPair, load_gavel_pairs


@pytest.fixture(scope="module")
def split() -> tuple[list[GavelPair], list[GavelPair]]:
    try:
        pairs = load_gavel_pairs()
    except GavelDataMissing as exc:
        pytest.skip(f"Gavel data absent: {exc}")
    return split_pairs(pairs)


def test_split_is_seeded_and_disjoint(split: tuple[list[GavelPair], list[GavelPair]]) -> None:
    train, held = split
    assert len(train) == 231 and len(held) == 99
    keys = {(p.job_a, p.job_b) for p in train}
    assert not keys & {(p.job_a, p.job_b) for p in held}
    assert split_pairs(load_gavel_pairs()) == (train, held)
    assert split_pairs(load_gavel_pairs(), seed=1) != (train, held)


def test_held_out_error_beats_no_contention(split: tuple[list[GavelPair], list[GavelPair]]) -> None:
    _, held = split
    predicted = predict(held, CALIBRATED, regime=GAVEL_REGIME)
    model = report(predicted)
    nothing = report([PairPrediction(p, 0.0, 0.0) for p in held])
    assert model.points == 198
    assert model.median_abs_error_pct <= 0.9 * nothing.median_abs_error_pct
    assert model.spearman >= 0.3
    without_recommendation = report(
        [p for p in predicted if "Recommendation" not in p.pair.job_a + p.pair.job_b]
    )
    assert without_recommendation.median_abs_error_pct < 50.0


def test_spearman_handles_ties_and_order() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([0, 0, 1, 2], [0, 0, 5, 9]) == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the whole grid: minutes idle, several times that on a loaded 2-core CI machine
def test_stored_parameters_are_what_the_fit_produces(split: tuple[list[GavelPair], list[GavelPair]]) -> None:
    """Refits the streams grid on the training split (a few minutes) and compares with CALIBRATED."""
    from canary.sim.calibration import fit

    train, _ = split
    params, _ = fit(train, regime="streams")
    assert (params.serialization_weight, params.interference_per_share, params.dram_efficiency) == (
        CALIBRATED.serialization_weight,
        CALIBRATED.interference_per_share,
        CALIBRATED.dram_efficiency,
    )
