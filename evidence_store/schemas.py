"""Pydantic models: what goes into the store and what comes out.

These never import the ORM models (``evidence_store.models``); the stored shapes (``EvidenceOut``,
``ProbeRow``, ``ReservationOut``) read an ORM row directly with ``Model.model_validate(row)``
(``from_attributes``).
Every timestamp is timezone-aware and normalised to UTC; a naive timestamp is rejected, because a
clock without a zone cannot be compared with a lease or a TTL.

Slowdowns are percent of the resident's solo latency (or throughput loss): ``5.0`` means 5% slower — the unit
the probe, the judge and the certificate use (columns and fields end in ``_pct``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, Self

from pydantic import (
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from canary._model import PairKey

Source = Literal["canary", "production", "import"]
Outcome = Literal["safe", "unsafe", "inconclusive", "aborted"]
Status = Literal["current", "stale", "revoked"]
ProbeState = Literal["running", "decided", "aborted", "rolled_back", "recorded", "failed"]
PooledOutcome = Literal["safe", "unsafe"]

SOURCES: tuple[Source, ...] = ("canary", "production", "import")
OUTCOMES: tuple[Outcome, ...] = ("safe", "unsafe", "inconclusive", "aborted")
STATUSES: tuple[Status, ...] = ("current", "stale", "revoked")
PROBE_STATES: tuple[ProbeState, ...] = ("running", "decided", "aborted", "rolled_back", "recorded", "failed")

EXPORT_FORMAT = "canary-evidence"  # its versions and header: evidence_store.export_file
# Version 1 files kept slowdowns as fractions under these names; version 2 keeps percent under ``*_pct``.
V1_FRACTION_FIELDS = ("resident_slowdown", "resident_slowdown_low", "resident_slowdown_high", "candidate_slowdown")


def record_from_v1(data: object) -> object:
    """A version-1 export record (slowdowns as fractions) in today's shape (percent, ``*_pct``).

    The one place a fraction becomes percent. A value that is not a number is carried over unchanged,
    so validation reports it under its new name; anything that is not an object is left to validation.
    """
    if not isinstance(data, dict):
        return data
    out = {k: v for k, v in data.items() if k not in V1_FRACTION_FIELDS}
    for name in V1_FRACTION_FIELDS:
        if name in data:
            value = data[name]
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            out[f"{name}_pct"] = value * 100 if is_number else value
    return out


def to_utc(value: datetime) -> datetime:
    """The same instant in UTC; a naive datetime is a programming error (``ValueError``)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp has no time zone; give an aware UTC timestamp")
    return value.astimezone(UTC)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceIn(_Frozen):
    """One probe's (or production's, or an import's) observation of a pair.

    ``resident_slowdown_pct`` and its interval are ``None`` when the probe could not estimate them (an
    aborted probe, a production SLO breach reported without a measurement); ``confidence`` is ``None``
    when the source gives none. ``None`` is never read as zero.
    """

    probe_id: str = Field(min_length=1, max_length=200)
    key: PairKey
    driver_version: str | None = Field(default=None, min_length=1, max_length=100)
    cuda_version: str | None = Field(default=None, min_length=1, max_length=100)
    device_uuid: str | None = Field(default=None, min_length=1, max_length=200)
    source: Source
    outcome: Outcome
    resident_slowdown_pct: float | None = None
    resident_slowdown_low_pct: float | None = None
    resident_slowdown_high_pct: float | None = None
    candidate_slowdown_pct: float | None = None
    samples: int = Field(ge=0)
    exposure_used: int = Field(ge=0, description="requests (or kernel launches) the canary served")
    time_used_s: float = Field(ge=0.0)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    created_at: AwareDatetime
    expires_at: AwareDatetime

    @field_validator("created_at", "expires_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return to_utc(value)

    @field_validator(
        "resident_slowdown_pct",
        "resident_slowdown_low_pct",
        "resident_slowdown_high_pct",
        "candidate_slowdown_pct",
        "time_used_s",
    )
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.expires_at <= self.created_at:
            raise ValueError("expires_at must be later than created_at")
        low, est, high = self.resident_slowdown_low_pct, self.resident_slowdown_pct, self.resident_slowdown_high_pct
        if (low is None) != (high is None):
            raise ValueError("resident_slowdown_low_pct and resident_slowdown_high_pct come together or not at all")
        if low is not None and high is not None:
            if est is None:
                raise ValueError("an interval needs its estimate: resident_slowdown_pct is missing")
            if not low <= est <= high:
                raise ValueError(
                    f"resident_slowdown_low_pct <= resident_slowdown_pct <= resident_slowdown_high_pct is violated "
                    f"({low} <= {est} <= {high})"
                )
        return self

    def content(self) -> dict[str, Any]:
        """The fields that make a record what it is, as JSON-ready values (used to compare retries)."""
        return self.model_dump(mode="json")


class EvidenceOut(EvidenceIn):
    """A stored record: the observation plus its identity and lifecycle.

    ``superseded_by`` is the id of the next newer record of the same key (``None`` while it is the
    newest); ``revoked_reason`` / ``stale_reason`` are ``None`` unless the status says so, and
    ``status_changed_at`` is when it did.
    Validates from an ORM ``Evidence`` row too (its ``key`` property assembles the pair key).
    """

    model_config = ConfigDict(from_attributes=True)

    id: str
    key_digest: str
    status: Status
    superseded_by: str | None = None
    revoked_reason: str | None = None
    stale_reason: str | None = None
    origin: str | None = Field(default=None, max_length=1000)
    """Imported records: where they came from (file, the exporting store's source, import time)."""
    status_changed_at: AwareDatetime | None = None
    """When the record became stale or revoked (UTC); ``None`` while it is current, and for a record whose
    status changed before the store kept this time (unknown, never guessed)."""

    @field_validator("status_changed_at")
    @classmethod
    def _utc_or_none(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)

    @model_validator(mode="after")
    def _changed_only_when_not_current(self) -> Self:
        if self.status == "current" and self.status_changed_at is not None:
            raise ValueError("status_changed_at is for stale or revoked records; this one is current")
        return self

    def as_input(self) -> EvidenceIn:
        """The observation alone, without identity and lifecycle."""
        return EvidenceIn.model_validate({name: getattr(self, name) for name in EvidenceIn.model_fields})


class LookupResult(_Frozen):
    """Pooled current evidence for one pair key.

    ``outcome`` is ``None`` when there is no usable evidence (then every number is ``None`` or empty and
    ``reason`` says why). ``confidence`` is ``None`` when no record of the deciding outcome carried one.
    ``slowdown_estimate_pct`` / ``slowdown_interval_pct`` are ``None`` when no pooled record measured them.
    """

    outcome: PooledOutcome | None
    evidence_ids: tuple[str, ...] = ()
    evidence_timestamp: AwareDatetime | None = None
    #: When the answer runs out: the last instant a deciding record is still usable (its expiry, or
    #: its creation plus the TTL, whichever is first).
    evidence_expires_at: AwareDatetime | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    slowdown_estimate_pct: float | None = None
    slowdown_interval_pct: tuple[float, float] | None = None
    samples: int = 0
    sources: tuple[Source, ...] = ()
    cross_driver: bool = False
    reason: str


class CertificateOut(_Frozen):
    """A stored certificate. ``recorded_at`` is ``None`` when the caller did not give a time."""

    id: str
    digest: str
    certificate_json: dict[str, Any]
    evidence_ids: tuple[str, ...]
    recorded_at: AwareDatetime | None


class ProbeRow(_Frozen):
    """One probe in the journal. ``result_json`` is ``None`` until the probe reports a result.
    Validates from an ORM ``ProbeJournal`` row too (``key`` is read from its ``key_json``)."""

    model_config = ConfigDict(from_attributes=True)

    probe_id: str
    key: PairKey = Field(validation_alias=AliasChoices("key", "key_json"))
    key_digest: str
    owner: str
    pid: int
    pgid: int
    budget_json: dict[str, Any]
    state: ProbeState
    result_json: dict[str, Any] | None
    started_at: AwareDatetime
    updated_at: AwareDatetime
    lease_expires_at: AwareDatetime

    @field_validator("key", mode="before")
    @classmethod
    def _key_from_json(cls, value: Any) -> Any:
        return PairKey.from_dict(value) if isinstance(value, Mapping) else value


class ReservationOut(_Frozen):
    """One booking. ``mps_pct`` / ``mig_instance`` are ``None`` when the booking holds none;
    ``released_at`` is ``None`` while it was never released (it may still have expired)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    device_id: str
    holder: str
    memory_bytes: int
    mps_pct: float | None
    mig_instance: str | None
    created_at: AwareDatetime
    expires_at: AwareDatetime
    released_at: AwareDatetime | None

    def active_at(self, now: datetime) -> bool:
        """Counts against the device at ``now``: not released, lease not yet expired — on a row already
        read, the rule the queries apply as ``evidence_store.conditions.active_booking``."""
        return self.released_at is None and self.expires_at > to_utc(now)


