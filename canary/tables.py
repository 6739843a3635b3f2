"""Plain-text tables for the terminal: the one renderer every command uses (standard library only, so
the evidence store's commands can use it without importing the models)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, a dashed line under the headers."""
    body = [list(row) for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body)
    return "\n".join(lines)


def key_values(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """``name  value`` lines with the names padded to one width (a record shown field by field)."""
    width = max((len(name) for name, _ in pairs), default=0)
    return [f"{name.ljust(width)}  {value}" for name, value in pairs]
