"""Byte sizes with units, as people write them: ``18Gi``, ``40GB``, ``512MiB``, ``48KiB``, ``4096``.

One parser for every size canary reads (profiles, snapshots, policies, command-line options). Units:

- binary: ``KiB MiB GiB TiB PiB`` and the Kubernetes forms ``Ki Mi Gi Ti Pi`` (any letter case);
- decimal (SI): ``kB MB GB TB PB`` (any letter case) and the bare prefixes ``k M G T P``;
- ``B`` or no unit: bytes.

A fraction is allowed when the size comes out whole (``1.5Gi``); a size is never rounded.

Sizes of on-chip memories (``on_chip=True``: shared memory, LDS) are read by stricter rules, because
NVIDIA's and AMD's documents write "48 KB" for 48 KiB there: ``KB``/``MB`` (and ``Kb``, ``mB`` …) are
refused as ambiguous, only the exact SI spelling ``kB`` means 1000, the bare ``K``/``M`` mean KiB/MiB,
and units above MiB are refused (no on-chip memory is that large; such a unit is a typo).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

from canary.errors import InputError

# The largest size any field may hold: 64 TiB is far beyond any device, so a bigger number is a typo.
MAX_BYTES = 64 * 1024**4

_SIZE = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+)\s*(?P<unit>[A-Za-z]*)\s*$")
_PREFIX_POWER = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}

# Document sizes: unit (lower case) → factor.
_DOCUMENT_UNITS: dict[str, int] = {"": 1, "b": 1}
for _prefix, _power in _PREFIX_POWER.items():
    _DOCUMENT_UNITS[_prefix] = 1000**_power
    _DOCUMENT_UNITS[f"{_prefix}b"] = 1000**_power
    _DOCUMENT_UNITS[f"{_prefix}i"] = 1024**_power
    _DOCUMENT_UNITS[f"{_prefix}ib"] = 1024**_power

# On-chip sizes: unit (lower case) → factor; the SI kilo and the ambiguous spellings are decided by
# exact case before this table is consulted.
_ON_CHIP_UNITS = {"": 1, "b": 1, "k": 1024, "ki": 1024, "kib": 1024, "m": 1024**2, "mi": 1024**2, "mib": 1024**2}
_ON_CHIP_SI = {"kB": 1000}
_ON_CHIP_AMBIGUOUS = frozenset({"KB", "Kb", "MB", "mb", "Mb", "mB"})

_EXAMPLES = "examples: 18Gi, 40GB, 512MiB, 4096"
_ON_CHIP_EXAMPLES = "examples: 49152, 48KiB, 1MiB"


def _unit_factor(unit: str, *, on_chip: bool, value: object) -> int:
    if not on_chip:
        factor = _DOCUMENT_UNITS.get(unit.lower())
        if factor is None:
            raise ValueError(f"cannot read {value!r} as a size: unknown unit {unit!r} ({_EXAMPLES})")
        return factor
    if unit in _ON_CHIP_SI:
        return _ON_CHIP_SI[unit]
    if unit in _ON_CHIP_AMBIGUOUS:
        raise ValueError(f"unit {unit!r} is ambiguous: write KiB/MiB (powers of 1024) or kB (1000)")
    factor = _ON_CHIP_UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r} (use B, KiB, MiB or kB)")
    return factor


def parse_bytes(value: Any, *, on_chip: bool = False) -> int:
    """Return ``value`` as a whole number of bytes; raise ``ValueError`` naming the problem.

    ``on_chip`` selects the stricter reading for shared memory and LDS sizes (see the module)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 18Gi, 40GB or 4096, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"a size in bytes must be whole, got {value}")
        number = int(value)
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not a size ({_ON_CHIP_EXAMPLES if on_chip else _EXAMPLES})")
        factor = _unit_factor(match.group("unit"), on_chip=on_chip, value=value)
        digits = match.group("number")
        if "." in digits:
            whole, _, fraction = digits.partition(".")
            scaled = int(whole or "0") * factor * 10 ** len(fraction) + int(fraction) * factor
            number, remainder = divmod(scaled, 10 ** len(fraction))
            if remainder:
                raise ValueError(f"{value!r} is not a whole number of bytes")
        else:
            number = int(digits) * factor
    else:
        raise ValueError(f"expected a size such as 18Gi, 40GB or 4096, got {type(value).__name__}")
    if number < 0:
        raise ValueError(f"a size cannot be negative, got {value!r}")
    if number > MAX_BYTES:
        raise ValueError(f"{value!r} is larger than any device (over 64 TiB); check the unit")
    return number


Bytes = Annotated[int, BeforeValidator(parse_bytes)]
"""An ``int`` number of bytes that also accepts sizes with units."""


def format_bytes(value: int | None) -> str:
    """Human form (binary units) for tables; ``unknown`` for ``None``."""
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


_DATE_WITH_ZONE = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})(?P<zone>Z|[+-]\d{2}:\d{2})", re.IGNORECASE)


def parse_time(text: str, *, field: str) -> datetime:
    """An ISO-8601 time with a zone (``2026-11-30T06:00:00Z``), or a date with a zone meaning midnight
    there (``2026-11-30Z`` is ``2026-11-30T00:00:00Z``), in UTC; a time or date without a zone is refused
    with an example of one this accepts."""
    text = text.strip()
    dated = _DATE_WITH_ZONE.fullmatch(text)
    candidate = f"{dated['date']}T00:00:00{dated['zone']}" if dated else text
    try:
        value = datetime.fromisoformat(candidate.replace("z", "Z"))
    except ValueError as err:
        raise InputError(
            f"not an ISO-8601 time with a zone: {text!r} (e.g. 2026-11-30T06:00:00Z, or 2026-11-30Z for "
            "midnight UTC)",
            field=field,
        ) from err
    if value.tzinfo is None:
        raise InputError(f"{text!r} has no time zone; add one, e.g. {text}Z (UTC)", field=field)
    return value.astimezone(UTC)
