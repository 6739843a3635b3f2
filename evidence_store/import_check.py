"""Checks an evidence import must pass before anything is stored.

An export file is data from another store, or from anyone who can write a file: it may cause a
decision only through records that are consistent with themselves and with this store's policy.
Each record is refused (``InputError`` naming the file, the line and the field) when:

* its ``id`` is not a UUID, or its ``probe_id`` holds characters outside ``[A-Za-z0-9._:@/+-]``;
* its ``key_digest`` is not the digest of its key;
* a count or duration is beyond any real probe (``samples``/``exposure_used`` over 10**9,
  ``time_used_s`` over a day), or a slowdown is outside -100% … +10000%;
* it says ``safe`` without a measured slowdown, or with a slowdown above the largest
  ``max_resident_slowdown_pct`` of the policy's risk budgets (the record does not name the resident's
  workload class, so the loosest bound is the one it could have been judged under);
* it says ``safe`` with an interval whose upper end exceeds that bound while its confidence is
  at least the policy's ``min_evidence_confidence`` (the judge cannot be that sure of that);
* it lives longer than the policy's ``evidence_ttl_s`` (``expires_at - created_at``), or was created
  more than five minutes in the future.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

from canary.errors import InputError
from evidence_store.schemas import EvidenceOut

MAX_COUNT = 10**9
MAX_TIME_USED_S = 24 * 3600.0
MAX_SLOWDOWN_PCT = 10000.0
MIN_SLOWDOWN_PCT = -100.0
CLOCK_SKEW = timedelta(minutes=5)
_PROBE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}")


def check_record(
    rec: EvidenceOut,
    *,
    line: int,
    file: str,
    max_slowdown_pct: float,
    min_confidence: float,
    ttl_s: float,
    now: datetime,
) -> None:
    """Raise ``InputError`` for the first rule ``rec`` breaks (see the module docstring)."""

    def bad(field: str, problem: str) -> InputError:
        return InputError(f"line {line}: {problem}", file=file, field=field)

    try:
        if str(uuid.UUID(rec.id)) != rec.id:
            raise ValueError
    except ValueError:
        raise bad("id", f"{rec.id[:60]!r} is not a UUID in canonical form") from None
    if not _PROBE_ID.fullmatch(rec.probe_id):
        raise bad("probe_id", f"{rec.probe_id[:60]!r} is not a probe id (letters, digits and ._:@/+- only)")
    if rec.key_digest != rec.key.digest():
        raise bad("key_digest", "is not the digest of the record's key (edited key?)")
    for name in ("samples", "exposure_used"):
        value = getattr(rec, name)
        if value > MAX_COUNT:
            raise bad(name, f"{value} is beyond any real probe (limit {MAX_COUNT})")
    if rec.time_used_s > MAX_TIME_USED_S:
        raise bad("time_used_s", f"{rec.time_used_s:g} s is beyond any real probe (limit {MAX_TIME_USED_S:g} s)")
    for name in ("resident_slowdown_pct", "resident_slowdown_low_pct", "resident_slowdown_high_pct", "candidate_slowdown_pct"):
        value = getattr(rec, name)
        if value is not None and not MIN_SLOWDOWN_PCT <= value <= MAX_SLOWDOWN_PCT:
            raise bad(name, f"{value:g} is outside {MIN_SLOWDOWN_PCT:g} … {MAX_SLOWDOWN_PCT:g} (percent: 5 is 5% slower)")
    bound = max_slowdown_pct
    if rec.outcome == "safe":
        if rec.resident_slowdown_pct is None:
            raise bad("outcome", "'safe' without a measured resident_slowdown_pct")
        if rec.resident_slowdown_pct > bound:
            raise bad(
                "outcome",
                f"'safe' with a resident slowdown of {rec.resident_slowdown_pct:.1f}%, above the policy's "
                f"largest bound of {max_slowdown_pct:g}%",
            )
        high = rec.resident_slowdown_high_pct
        if high is not None and high > bound and rec.confidence is not None and rec.confidence >= min_confidence:
            raise bad(
                "confidence",
                f"'safe' with confidence {rec.confidence:g} although its interval reaches {high:.1f}%, "
                f"above the bound of {max_slowdown_pct:g}%",
            )
    life = (rec.expires_at - rec.created_at).total_seconds()
    if life > ttl_s + 1:
        raise bad("expires_at", f"lives {life:g} s, longer than the policy's evidence_ttl_s of {ttl_s:g} s")
    if rec.created_at > now + CLOCK_SKEW:
        raise bad("created_at", f"{rec.created_at.isoformat()} is in the future")
