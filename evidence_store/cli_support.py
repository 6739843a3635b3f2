"""What the ``canary evidence|reservations|db`` commands share: opening the store, reading times, tables,
and the export/import file format.

Export format (JSON lines): the first line is ``{"format": "canary-evidence", "version": 1}``; every
following line is one stored record (``EvidenceOut``: the observation, its id, key digest and status).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from canary.errors import CanaryError, InputError
from canary.tables import table as table  # the project's one table renderer, re-exported
from evidence_store.engine import open_store
from evidence_store.models import Evidence, Reservation
from evidence_store.schemas import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    EvidenceOut,
    ExportHeader,
    ReservationOut,
)


@contextmanager
def store(url: str | None) -> Iterator[Engine]:
    """An engine for a store at the current schema (``SchemaOutOfDate`` otherwise), disposed afterwards."""
    engine = open_store(url)
    try:
        yield engine
    finally:
        engine.dispose()


def parse_time(text: str, *, field: str) -> datetime:
    """An ISO-8601 time with a zone (``2026-11-30T06:00:00Z``); a time without one is refused."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as err:
        raise InputError(f"not an ISO-8601 time: {text!r}", field=field) from err
    if value.tzinfo is None:
        raise InputError(f"{text!r} has no time zone; add one, e.g. {text}Z", field=field)
    return value.astimezone(UTC)


def utc_now() -> datetime:
    return datetime.now(UTC)


def resolve_evidence_id(session: Session, given: str) -> str:
    """A full evidence id from an id or a unique prefix of one (the tables show 8 characters)."""
    if session.get(Evidence, given) is not None:
        return given
    matches = session.scalars(
        select(Evidence.id).where(Evidence.id.startswith(given, autoescape=True)).limit(2)
    ).all()
    if not matches:
        raise InputError(f"no evidence with id {given!r}", field="ID")
    if len(matches) > 1:
        raise InputError(f"id prefix {given!r} matches several records; give more of it", field="ID")
    return matches[0]


def resolve_reservation_id(session: Session, given: str) -> str:
    if session.get(Reservation, given) is not None:
        return given
    matches = session.scalars(
        select(Reservation.id).where(Reservation.id.startswith(given, autoescape=True)).limit(2)
    ).all()
    if not matches:
        raise InputError(f"no reservation with id {given!r}", field="ID")
    if len(matches) > 1:
        raise InputError(f"id prefix {given!r} matches several reservations; give more of it", field="ID")
    return matches[0]


# --- terminal tables ------------------------------------------------------------------------------


def fmt_time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_slowdown(rec: EvidenceOut) -> str:
    if rec.resident_slowdown is None:
        return "unknown"
    text = f"{rec.resident_slowdown * 100:.1f}%"
    if rec.resident_slowdown_low is not None and rec.resident_slowdown_high is not None:
        text += f" [{rec.resident_slowdown_low * 100:.1f}, {rec.resident_slowdown_high * 100:.1f}]"
    return text


def fmt_confidence(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def evidence_rows(records: Iterable[EvidenceOut]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "ID",
        "CREATED",
        "RESIDENT → CANDIDATE",
        "DEVICE",
        "REGIME",
        "DRIVER",
        "SOURCE",
        "OUTCOME",
        "SLOWDOWN",
        "CONF",
        "STATUS",
    ]
    rows = [
        [
            r.id[:8],
            fmt_time(r.created_at),
            f"{r.key.resident_version} → {r.key.candidate_version}",
            r.key.device_type,
            r.key.regime,
            r.driver_version or "unknown",
            r.source,
            r.outcome,
            fmt_slowdown(r),
            fmt_confidence(r.confidence),
            r.status,
        ]
        for r in records
    ]
    return headers, rows


def reservation_rows(records: Iterable[ReservationOut], now: datetime) -> tuple[list[str], list[list[str]]]:
    headers = ["ID", "DEVICE", "HOLDER", "MEMORY_GIB", "MPS_PCT", "MIG", "CREATED", "EXPIRES", "STATE"]
    rows = []
    for r in records:
        state = "released" if r.released_at is not None else ("active" if r.active_at(now) else "expired")
        rows.append(
            [
                r.id[:8],
                r.device_id,
                r.holder,
                f"{r.memory_bytes / 2**30:.2f}",
                "-" if r.mps_pct is None else f"{r.mps_pct:g}",
                r.mig_instance or "-",
                fmt_time(r.created_at),
                fmt_time(r.expires_at),
                state,
            ]
        )
    return headers, rows


def write_json(value: Any, out: IO[str] | None = None) -> None:
    stream = out or sys.stdout
    json.dump(value, stream, indent=2, sort_keys=True)
    stream.write("\n")


# --- export / import ------------------------------------------------------------------------------


def header_line() -> str:
    return json.dumps({"format": EXPORT_FORMAT, "version": EXPORT_VERSION}, sort_keys=True)


def write_export(path: Path, records: Iterable[EvidenceOut]) -> int:
    """Write the file atomically (a temporary file renamed into place); returns the record count."""
    path = path.resolve()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(header_line() + "\n")
            for rec in records:
                out.write(
                    json.dumps(rec.model_dump(mode="json"), sort_keys=True, separators=(",", ":")) + "\n"
                )
                count += 1
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return count


def _validation_field(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(record)"
    return loc, first["msg"]


def read_export(path: Path) -> list[tuple[int, EvidenceOut]]:
    """Every record of an export file with its line number, all validated before anything is stored.

    Raises ``InputError`` naming the file, the line and the field for an unreadable, corrupt or
    wrong-version file.
    """
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=name) from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad_line = raw[: err.start].count(b"\n") + 1
        raise InputError(f"line {bad_line}: not UTF-8 text", file=name) from err
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise InputError("line 1: empty file; expected the header " + header_line(), file=name)
    try:
        header_data = json.loads(lines[0])
    except json.JSONDecodeError as err:
        raise InputError(f"line 1: header is not JSON ({err.msg})", file=name) from err
    try:
        ExportHeader.model_validate(header_data)
    except ValidationError as err:
        loc, msg = _validation_field(err)
        raise InputError(
            f"line 1: not a canary evidence export of version {EXPORT_VERSION} ({msg}; expected {header_line()})",
            file=name,
            field=loc,
        ) from err
    records: list[tuple[int, EvidenceOut]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            raise InputError(f"line {number}: blank line inside the file", file=name)
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"line {number}: not JSON ({err.msg} at column {err.colno})", file=name) from err
        try:
            records.append((number, EvidenceOut.model_validate(data)))
        except ValidationError as err:
            loc, msg = _validation_field(err)
            raise InputError(f"line {number}: {msg}", file=name, field=loc) from err
        except CanaryError as err:  # the pair key validates itself
            field = getattr(err, "field", None)
            raise InputError(
                f"line {number}: {getattr(err, 'problem', str(err))}",
                file=name,
                field=f"key.{field}" if field else "key",
            ) from err
    return records
