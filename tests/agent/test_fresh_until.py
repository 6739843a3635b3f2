"""A queued request's ``evidence_fresh_until`` (the warm job's window, read by the agent's probe runner)
is read as ``canary evidence expire --before`` reads a time: a date with a zone is midnight in that zone."""

from __future__ import annotations

import datetime as dt

import pytest

from canary.admission import fresh_until_from_json
from canary.errors import InputError

UTC = dt.UTC


@pytest.mark.parametrize(("text", "want"), [
    pytest.param("2026-12-03+02:00", dt.datetime(2026, 12, 2, 22, 0, tzinfo=UTC), id="date-with-offset"),
    pytest.param("2026-12-03Z", dt.datetime(2026, 12, 3, 0, 0, tzinfo=UTC), id="date-with-Z"),
    pytest.param("2026-12-03T06:30:00-01:00", dt.datetime(2026, 12, 3, 7, 30, tzinfo=UTC), id="time-with-offset"),
    pytest.param("2026-12-03T06:30:00Z", dt.datetime(2026, 12, 3, 6, 30, tzinfo=UTC), id="time-with-Z"),
])
def test_a_time_or_date_with_its_zone_is_that_instant(text: str, want: dt.datetime) -> None:
    assert fresh_until_from_json({"evidence_fresh_until": text}) == want


@pytest.mark.parametrize("text", [
    pytest.param("2026-12-03", id="date-without-zone"),
    pytest.param("2026-12-03T06:30:00", id="time-without-zone"),
    pytest.param("tomorrow", id="not-a-time"),
])
def test_no_zone_or_no_time_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InputError) as caught:
        fresh_until_from_json({"evidence_fresh_until": text})
    assert caught.value.field == "evidence_fresh_until"


def test_absent_is_none() -> None:
    assert fresh_until_from_json({}) is None
