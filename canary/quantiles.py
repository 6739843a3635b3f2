"""The one quantile definition canary uses: the nearest rank (an order statistic, Hyndman & Fan type 1,
numpy's ``method="inverted_cdf"``).

``quantile(values, q)`` is the smallest observed value ``x`` with at least ``q`` of the values ``<= x``,
i.e. ``sorted(values)[ceil(q * n) - 1]``. A p99 is therefore a latency that was actually observed, never
an interpolation between two; with fewer than 100 values the p99 is the maximum. ``None`` without values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def quantile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (``0 <= q <= 1``) of ``values``; ``None`` when there are none."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile is between 0 and 1, got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
