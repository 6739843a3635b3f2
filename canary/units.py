"""Byte sizes with units, as people write them: ``18Gi``, ``40GB``, ``512MiB``, ``4096``.

Parsing is pydantic's ``ByteSize`` (decimal ``kB/MB/GB/TB`` and binary ``KiB/MiB/GiB/TiB``);
Kubernetes-style binary suffixes (``Ki``, ``Mi``, ``Gi``, ``Ti``) are accepted as their ``…B`` forms.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, TypeAdapter

_K8S_SUFFIX = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGTP]i)\s*$", re.IGNORECASE)
_BYTE_SIZE = TypeAdapter(ByteSize)

# The largest size any field may hold: 64 TiB is far beyond any device, so a bigger number is a typo.
MAX_BYTES = 64 * 1024**4


def parse_bytes(value: Any) -> int:
    """Return ``value`` as a whole number of bytes; raise ``ValueError`` naming the problem."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 18Gi, 40GB or 4096, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"a size in bytes must be whole, got {value}")
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        match = _K8S_SUFFIX.match(text)
        if match:
            text = f"{match.group(1)}{match.group(2)}B"
        try:
            number = int(_BYTE_SIZE.validate_python(text))
        except Exception as exc:  # pydantic's message is long; ours names the accepted forms
            raise ValueError(f"cannot read {value!r} as a size (examples: 18Gi, 40GB, 512MiB, 4096)") from exc
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
