"""The pair key: what a piece of evidence is about.

Evidence never carries across workload versions, shape families, device types or resource regimes,
so all six parts form the key. A device with several residents yields one ``PairKey`` per resident;
the admission checks every pair.

This module must stay light: the fast ``gpu-fit`` path imports it, so it never imports SQLAlchemy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from canary.errors import InputError

KEY_FIELDS: tuple[str, ...] = (
    "resident_version",
    "resident_shape_family",
    "candidate_version",
    "candidate_shape_family",
    "device_type",
    "regime",
)


@dataclass(frozen=True, slots=True)
class PairKey:
    """Resident workload version and shape family, candidate version and shape family, device type, regime."""

    resident_version: str
    resident_shape_family: str
    candidate_version: str
    candidate_shape_family: str
    device_type: str
    regime: str

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str):
                raise InputError(f"must be a string, got {type(value).__name__}", field=f.name)
            if not value.strip():
                raise InputError("must not be empty", field=f.name)
            if value != value.strip():
                raise InputError(f"has leading or trailing whitespace: {value!r}", field=f.name)

    def as_dict(self) -> dict[str, str]:
        """The six parts by name."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> PairKey:
        """Build a key from exactly the six named parts; anything missing or extra is an ``InputError``."""
        missing = [name for name in KEY_FIELDS if name not in data]
        if missing:
            raise InputError("missing from the pair key", file=file, field=missing[0])
        extra = sorted(set(data) - set(KEY_FIELDS))
        if extra:
            raise InputError("not a part of the pair key", file=file, field=extra[0])
        try:
            return cls(**{name: data[name] for name in KEY_FIELDS})
        except InputError as exc:
            raise InputError(exc.problem, file=file, field=exc.field) from exc

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace: the same key always gives the same bytes."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """sha256 hex of :meth:`canonical_json`; stable across processes, machines and versions."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def describe(self) -> str:
        """One line for messages: ``resident@family + candidate@family on device (regime)``."""
        return (
            f"{self.resident_version}@{self.resident_shape_family} + "
            f"{self.candidate_version}@{self.candidate_shape_family} on {self.device_type} ({self.regime})"
        )
