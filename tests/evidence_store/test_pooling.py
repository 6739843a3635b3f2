"""The pooling rule as a table: plain records in, one answer out; no database.

Each row names the records a lookup found, the lookup's driver settings, and what the answer must be.
The database tests (``test_store_repository.py``) check that ``lookup`` selects the right candidates
and hands them here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evidence_store.pooling import Record, pool
from evidence_store.schemas import LookupResult

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
DRIVER = "550.54.15"
OLD_DRIVER = "535.104.05"


def rec(
    rid: str,
    outcome: str = "safe",
    *,
    source: str = "canary",
    driver: str | None = DRIVER,
    minutes: int = 0,
    confidence: float | None = 0.95,
    slowdown: float | None = 4.0,
    interval: tuple[float, float] | None = (2.0, 6.0),
    samples: int = 200,
    expires_minutes: int = 7 * 24 * 60,
) -> Record:
    return Record(
        id=rid,
        driver_version=driver,
        source=source,  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        resident_slowdown_pct=slowdown,
        resident_slowdown_low_pct=interval[0] if interval else None,
        resident_slowdown_high_pct=interval[1] if interval else None,
        samples=samples,
        confidence=confidence,
        created_at=T0 + timedelta(minutes=minutes),
        expires_at=T0 + timedelta(minutes=minutes + expires_minutes),
    )


@dataclass(frozen=True)
class Case:
    name: str
    records: list[Record]
    expect: dict[str, Any]
    reason_has: tuple[str, ...] = ()
    driver: str | None = DRIVER
    cross: bool = False
    factor: float = 0.5


CASES = [
    Case("nothing found", [], {"outcome": None, "evidence_ids": ()}, ("no current evidence",)),
    Case(
        "inconclusive and aborted probes are not evidence",
        [rec("a", "inconclusive"), rec("b", "aborted", minutes=1)],
        {"outcome": None, "confidence": None, "samples": 0},
        ("2 current record(s)", "inconclusive or aborted"),
    ),
    Case(
        "passes pool: highest confidence, sample-weighted estimate, envelope, newest first",
        [
            rec("a", minutes=0, confidence=0.9, slowdown=2.0, interval=(1.0, 3.0), samples=100),
            rec("b", minutes=5, confidence=0.97, slowdown=5.0, interval=(4.0, 8.0), samples=300),
            rec("c", "inconclusive", minutes=9),
        ],
        {
            "outcome": "safe",
            "evidence_ids": ("b", "a"),
            "evidence_timestamp": T0 + timedelta(minutes=5),
            "confidence": 0.97,
            "slowdown_estimate_pct": pytest.approx((100 * 2.0 + 300 * 5.0) / 400),
            "slowdown_interval_pct": (1.0, 8.0),
            "samples": 400,
            "sources": ("canary",),
            "cross_driver": False,
        },
        ("2 current record(s) found this pair safe",),
    ),
    Case(
        "one unsafe record makes the pair unsafe; only unsafe records decide",
        [rec("a", minutes=0, confidence=0.99), rec("b", "unsafe", minutes=1, confidence=0.8, samples=50)],
        {"outcome": "unsafe", "evidence_ids": ("b",), "confidence": 0.8, "samples": 50},
        ("1 of 2 current record(s) found this pair unsafe",),
    ),
    Case(
        "a production violation outweighs every earlier pass",
        [
            rec("a", minutes=0),
            rec("b", minutes=1),
            rec("v", "unsafe", source="production", minutes=2, confidence=None, slowdown=None, interval=None),
            rec("c", minutes=3),
        ],
        {"outcome": "unsafe", "evidence_ids": ("v",), "confidence": None, "slowdown_estimate_pct": None},
        ("production SLO violation", "outweighs 2 earlier record(s)"),
    ),
    Case(
        "the newest violation decides: the records after it still count",
        [
            rec("v1", "unsafe", source="production", minutes=0),
            rec("a", minutes=1),
            rec("v2", "unsafe", source="production", minutes=2),
            rec("u", "unsafe", minutes=3),
        ],
        {"outcome": "unsafe", "evidence_ids": ("u", "v2")},
        ("outweighs 2 earlier record(s)",),
    ),
    Case(
        "a production pass is an ordinary pass",
        [rec("p", source="production", minutes=0), rec("a", minutes=1)],
        {"outcome": "safe", "evidence_ids": ("a", "p"), "sources": ("canary", "production")},
    ),
    Case(
        "imported evidence cannot outvote the store's own",
        [rec("i", "unsafe", source="import", minutes=5), rec("a", minutes=0)],
        {"outcome": "safe", "evidence_ids": ("a",), "sources": ("canary",)},
        ("1 imported record(s) set aside",),
    ),
    Case(
        "imported evidence alone is used",
        [rec("i", "unsafe", source="import", minutes=5), rec("j", source="import", minutes=0)],
        {"outcome": "unsafe", "evidence_ids": ("i",), "sources": ("import",)},
    ),
    Case(
        "other drivers only, across drivers not allowed: no answer",
        [rec("a", driver=OLD_DRIVER), rec("b", driver=None, minutes=1)],
        {"outcome": None, "evidence_ids": ()},
        (f"driver(s) {OLD_DRIVER}, unknown, not the current driver {DRIVER}", "does not allow"),
    ),
    Case(
        "other drivers only, across drivers allowed: confidence scaled",
        [rec("a", driver=OLD_DRIVER, confidence=0.9)],
        {"outcome": "safe", "evidence_ids": ("a",), "confidence": pytest.approx(0.45), "cross_driver": True},
        (f"recorded under driver(s) {OLD_DRIVER}", "scaled by 0.5"),
        cross=True,
    ),
    Case(
        "same-driver records exist: other drivers are not consulted",
        [rec("a", driver=DRIVER), rec("b", "unsafe", driver=OLD_DRIVER, minutes=1)],
        {"outcome": "safe", "evidence_ids": ("a",), "cross_driver": False},
        cross=True,
    ),
    Case(
        "unknown current driver: nothing is same-driver",
        [rec("a")],
        {"outcome": None},
        ("an unknown current driver",),
        driver=None,
    ),
    Case(
        "unknown current driver, across drivers allowed",
        [rec("a", confidence=0.8)],
        {"outcome": "safe", "confidence": pytest.approx(0.2), "cross_driver": True},
        ("the (unknown) current driver", "scaled by 0.25"),
        driver=None,
        cross=True,
        factor=0.25,
    ),
    Case(
        "no confidence and no measurement stay unknown, never zero",
        [rec("a", confidence=None, slowdown=None, interval=None, samples=0)],
        {"outcome": "safe", "confidence": None, "slowdown_estimate_pct": None, "slowdown_interval_pct": None},
    ),
    Case(
        "no samples: the estimate is the plain mean",
        [rec("a", slowdown=2.0, samples=0), rec("b", slowdown=6.0, samples=0, minutes=1)],
        {"outcome": "safe", "slowdown_estimate_pct": pytest.approx(4.0)},
    ),
    Case(
        "same time: the larger id is newer",
        [rec("a", minutes=1), rec("b", minutes=1)],
        {"evidence_ids": ("b", "a")},
    ),
]


def _pool(case: Case, records: list[Record]) -> LookupResult:
    return pool(
        records, driver_version=case.driver, allow_cross_driver=case.cross, cross_driver_confidence_factor=case.factor
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pooling(case: Case) -> None:
    result = _pool(case, case.records)
    for name, expected in case.expect.items():
        assert getattr(result, name) == expected, name
    for fragment in case.reason_has:
        assert fragment in result.reason
    if result.outcome is None:
        assert (result.evidence_ids, result.confidence, result.samples) == ((), None, 0)


@pytest.mark.parametrize("case", [c for c in CASES if len(c.records) > 1], ids=lambda c: c.name)
def test_the_order_of_the_records_does_not_matter(case: Case) -> None:
    expected = _pool(case, case.records)
    shuffled = list(case.records)
    random.Random(7).shuffle(shuffled)
    assert _pool(case, shuffled) == expected
    assert _pool(case, list(reversed(case.records))) == expected


def test_the_factor_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        pool([rec("a")], driver_version=DRIVER, allow_cross_driver=True, cross_driver_confidence_factor=1.5)


def test_a_stored_record_pools_like_its_plain_values() -> None:
    """``EvidenceOut`` (what the store returns) satisfies what pooling reads."""
    from evidence_store.schemas import EvidenceOut
    from tests.evidence_store.evidence_store_testkit import evidence

    stored = EvidenceOut.model_validate(
        {**evidence("p1").model_dump(), "id": "e1", "key_digest": "d", "status": "current"}
    )
    as_values = Record(
        id=stored.id,
        driver_version=stored.driver_version,
        source=stored.source,
        outcome=stored.outcome,
        resident_slowdown_pct=stored.resident_slowdown_pct,
        resident_slowdown_low_pct=stored.resident_slowdown_low_pct,
        resident_slowdown_high_pct=stored.resident_slowdown_high_pct,
        samples=stored.samples,
        confidence=stored.confidence,
        created_at=stored.created_at,
        expires_at=stored.expires_at,
    )
    for records in ([stored], [as_values]):
        result = pool(records, driver_version=stored.driver_version, allow_cross_driver=False,
                      cross_driver_confidence_factor=0.5)
        assert (result.outcome, result.evidence_ids, result.confidence) == ("safe", ("e1",), 0.95)


def test_the_answer_runs_out_when_its_last_deciding_record_does() -> None:
    """Each deciding record is usable until its own expiry or its creation plus the TTL, whichever is
    first; the pooled answer holds while any of them does. Record b (created at +10 min) expires 30 min
    after creation, before its TTL; record a (created at 0) runs to its TTL of 60 min: the answer runs
    out at 60 min. Unsafe records do not decide a safe answer and do not extend it."""
    a = rec("a", minutes=0)
    b = rec("b", minutes=10, expires_minutes=30)
    late_unsafe = rec("u", "unsafe", minutes=5, source="canary")
    result = pool([a, b], driver_version=DRIVER, allow_cross_driver=False, cross_driver_confidence_factor=0.5,
                  ttl_s=3600)
    assert result.evidence_expires_at == T0 + timedelta(minutes=60)
    only_b = pool([b], driver_version=DRIVER, allow_cross_driver=False, cross_driver_confidence_factor=0.5,
                  ttl_s=3600)
    assert only_b.evidence_expires_at == T0 + timedelta(minutes=40)
    unsafe = pool([a, late_unsafe], driver_version=DRIVER, allow_cross_driver=False,
                  cross_driver_confidence_factor=0.5, ttl_s=3600)
    assert unsafe.outcome == "unsafe" and unsafe.evidence_expires_at == T0 + timedelta(minutes=65)
