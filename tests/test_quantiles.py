"""The nearest-rank quantile, checked against numpy's ``inverted_cdf`` (an independent implementation
of Hyndman & Fan's type 1) and against hand-derived order statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.quantiles import quantile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([], 0.5, None, id="no-values-is-unknown"),
        pytest.param([7.0], 0.99, 7.0, id="one-value"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 0.5, 2.0, id="median-of-even-count-is-the-lower-middle"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 0.51, 3.0, id="just-past-the-middle"),
        pytest.param(list(range(1, 101)), 0.99, 99, id="p99-of-100-is-the-99th"),
        pytest.param(list(range(1, 51)), 0.99, 50, id="p99-of-50-is-the-maximum"),
        pytest.param([5.0, 1.0, 3.0], 0.0, 1.0, id="q0-is-the-minimum"),
        pytest.param([5.0, 1.0, 3.0], 1.0, 5.0, id="q1-is-the-maximum"),
    ],
)
def test_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert quantile(values, q) == expected


@settings(derandomize=True)  # the same examples every run: a property test must not flake either
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=200), st.integers(0, 100))
def test_agrees_with_numpy_inverted_cdf(values: list[float], pct: int) -> None:
    assert quantile(values, pct / 100) == float(np.percentile(np.asarray(values), pct, method="inverted_cdf"))


def test_out_of_range_q_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        quantile([1.0], 1.5)
