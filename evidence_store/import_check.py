"""Checks an evidence import must pass before anything is stored.

An export file is data from another store, or from anyone who can write a file: it may cause a
decision only through records that are consistent with themselves and with this store's policy.
Each record is refused (``InputError`` naming the file, the line and the field) when:

* its ``id`` is not a UUID, or its ``probe_id`` holds characters outside ``[A-Za-z0-9._:@/+-]``;
* its key's ``device_type`` is not a device of this canary's catalog, by the catalog's own name (the name
  every local key carries), or its ``regime`` is not one ``parse_regime`` reads, in its canonical
  spelling (``mps:50``, not ``MPS:50``), with a MIG profile the device has;
* a reason does not belong to its status: a ``current`` record with a ``revoked_reason`` or
  ``stale_reason``, a ``stale`` one with a ``revoked_reason`` (a revoked record may keep the
  ``stale_reason`` it had before it was revoked);
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

Before a line becomes a record (``check_json_numbers``), every number field must hold a JSON number
(an integer where the field counts): ``"0.9"`` (a string) and ``true`` (a boolean) are refused, not
converted. Duplicate keys in one mapping are refused where the line is parsed
(``evidence_store.export_file``).

The file as a whole (``check_repeats``) is refused when a line repeats an earlier one (the same record
twice), when one probe id has two different records, or when one record id is given to two probes;
each such conflict is reported with both line numbers.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import ConfigDict, TypeAdapter, ValidationError

from canary.catalog import lookup
from canary.errors import InputError
from canary.regime import parse_regime
from evidence_store.schemas import EvidenceOut

MAX_COUNT = 10**9
MAX_TIME_USED_S = 24 * 3600.0
MAX_SLOWDOWN_PCT = 10000.0
MIN_SLOWDOWN_PCT = -100.0
CLOCK_SKEW = timedelta(minutes=5)
_PROBE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}")


def _is_number_type(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, UnionType):
        args = tuple(a for a in get_args(annotation) if a is not NoneType)
        return len(args) == 1 and _is_number_type(args[0])
    return annotation in (int, float)


#: The record's number fields, each validated strictly: a JSON number (an integer where the field is
#: one); never a string or a boolean read as one. Derived from the record model, so a new number field
#: is covered without a list to update.
_NUMBER_FIELDS: dict[str, tuple[TypeAdapter[Any], bool]] = {
    name: (TypeAdapter(info.annotation, config=ConfigDict(strict=True)), int in (info.annotation, *get_args(info.annotation)))
    for name, info in EvidenceOut.model_fields.items()
    if info.annotation is not None and _is_number_type(info.annotation)
}


def check_json_numbers(data: object, *, line: int, file: str) -> None:
    """Raise ``InputError`` naming the field when a number field of the parsed line ``data`` holds
    something else than a JSON number (``"0.9"``, ``true``) or a fraction where a count is due."""
    if not isinstance(data, dict):
        return  # not a record at all: the model's validation says so
    for name, (adapter, whole) in _NUMBER_FIELDS.items():
        if name not in data:
            continue
        value = data[name]
        try:
            adapter.validate_python(value)
        except ValidationError:
            shown = json.dumps(value)[:60] if isinstance(value, str | bool | int | float) else type(value).__name__
            if isinstance(value, bool):
                kind = "a boolean"
            elif isinstance(value, str):
                kind = "a string"
            elif isinstance(value, float):
                kind = "a fraction"
            else:
                kind = f"a JSON {type(value).__name__}"
            wanted = "a whole JSON number" if whole else "a JSON number"
            raise InputError(f"line {line}: {shown} is {kind}; expected {wanted}", file=file, field=name) from None


def _key_problem(rec: EvidenceOut) -> tuple[str, str] | None:
    """The key's field and what is wrong with its device type or regime, or ``None``."""
    key = rec.key
    try:
        spec = lookup(key.device_type)
    except InputError as err:
        return "key.device_type", f"{key.device_type[:60]!r} is not a device of this catalog ({err.problem[:300]})"
    if spec.name != key.device_type:
        return "key.device_type", f"{key.device_type!r} is not the catalog's name for {spec.name}: a key names {spec.name}"
    try:
        regime = parse_regime(key.regime, field="key.regime")
    except InputError as err:
        return "key.regime", err.problem[:300]
    if str(regime) != key.regime:
        return "key.regime", f"{key.regime!r} is not written as a key writes it ({str(regime)!r})"
    if regime.mig_profile is not None:
        try:
            spec.mig_profile(regime.mig_profile)
        except InputError as err:
            return "key.regime", err.problem[:300]
    return None


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
    key_problem = _key_problem(rec)
    if key_problem is not None:
        raise bad(*key_problem)
    if rec.key_digest != rec.key.digest():
        raise bad("key_digest", "is not the digest of the record's key (edited key?)")
    if rec.revoked_reason is not None and rec.status != "revoked":
        raise bad("revoked_reason", f"a {rec.status} record has no revocation reason (status is {rec.status!r})")
    if rec.stale_reason is not None and rec.status == "current":
        raise bad("stale_reason", "a current record has no staleness reason (status is 'current')")
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


def _first_difference(earlier: EvidenceOut, later: EvidenceOut) -> str | None:
    first, second = earlier.model_dump(mode="json"), later.model_dump(mode="json")
    return next((name for name in second if first.get(name) != second[name]), None)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def check_repeats(numbered: Sequence[tuple[int, EvidenceOut]], *, file: str) -> None:
    """Raise ``InputError`` naming the file and, for each conflict, both lines (at most five shown)
    when the file holds the same record twice, two different records of one probe id, or one record id
    for two probes. Nothing in the file can be imported then: which of the two to keep is not canary's
    guess to make."""
    by_probe: dict[str, tuple[int, EvidenceOut]] = {}
    by_id: dict[str, tuple[int, EvidenceOut]] = {}
    problems: list[str] = []
    for line, rec in numbered:
        earlier = by_probe.get(rec.probe_id)
        if earlier is not None:
            first_line, first = earlier
            differing = _first_difference(first, rec)
            if differing is None:
                problems.append(f"line {line} repeats line {first_line} (probe id {rec.probe_id!r}): remove one")
            else:
                problems.append(
                    f"line {line}: probe id {rec.probe_id!r} is also at line {first_line}, with another "
                    f"'{differing}' (line {first_line}: {_shown(getattr(first, differing))}, "
                    f"line {line}: {_shown(getattr(rec, differing))})"
                )
            continue
        by_probe[rec.probe_id] = (line, rec)
        other = by_id.get(rec.id)
        if other is not None:
            problems.append(
                f"line {line}: id {rec.id!r} is also at line {other[0]}, for another probe "
                f"(line {other[0]}: probe id {other[1].probe_id!r}, line {line}: probe id {rec.probe_id!r})"
            )
            continue
        by_id[rec.id] = (line, rec)
    if problems:
        shown = problems[:5]
        if len(problems) > len(shown):
            shown.append(f"… and {len(problems) - len(shown)} more")
        raise InputError(
            f"{len(problems)} conflict(s) within the file; nothing imported:\n  " + "\n  ".join(shown), file=file
        )
