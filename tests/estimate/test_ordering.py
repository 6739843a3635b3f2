"""Warm plans spend their budget where a probe tells most: pairs start in order of value of
information (``canary.jobs.plan.probe_order`` over ``canary.jobs.warm.pair_value``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from canary.admission import open_store_for_writing
from canary.jobs.plan import load_plan, probe_order
from canary.jobs.warm import PairOutcome, pair_value, warm_async
from tests.support.paths import EXAMPLES

PLAN = EXAMPLES / "plans" / "nightly-h100.yaml"


@pytest.mark.parametrize(("values", "order"), [
    pytest.param([0.1, 1.0, 0.6], [1, 2, 0], id="highest-first"),
    pytest.param([0.5, 0.5, 0.9], [2, 0, 1], id="ties-keep-plan-order"),
    pytest.param([], [], id="empty"),
])
def test_probe_order(values: list[float], order: list[int]) -> None:
    assert probe_order(values) == order


def test_pair_values_rank_a_straddling_prediction_above_a_clear_one(tmp_path: Path) -> None:
    """Without calibration outcomes the raw intervals order the plan: the MPS room's quiet pairs are
    predicted clear under the bound, embedding beside ResNet-50 training straddles it, and the ETL
    job beside LLM prefill under MPS has no estimate at all (worth most)."""
    engine = open_store_for_writing(f"sqlite:///{tmp_path / 'e.sqlite3'}")
    plan = load_plan(PLAN)
    values = [pair_value(p, engine) for p in plan.pairs]
    assert values[0] < 0.5 and values[1] < 0.5  # clear of the bound
    assert 0.5 < values[2] < 1.0  # straddles
    assert values[3] == 1.0  # nothing predicts it
    assert probe_order(values)[:2] == [3, 2]


@pytest.mark.slow
def test_warm_starts_the_most_informative_pair_first(tmp_path: Path) -> None:
    plan = load_plan(PLAN)
    one_at_a_time = plan.model_copy(update={"concurrency": 1, "pairs": (plan.pairs[0], plan.pairs[2])})
    seen: list[int] = []

    def progress(outcome: PairOutcome, total: int) -> None:
        seen.append(outcome.index)

    report = anyio.run(lambda: warm_async(one_at_a_time, db_url=f"sqlite:///{tmp_path / 'e.sqlite3'}",
                                          progress=progress))
    assert seen == [1, 0]  # the straddling pair (plan position 1) ran before the quiet one
    assert [p.index for p in report.pairs] == [0, 1]  # the report keeps plan order
