"""What the ``canary evidence|reservations|db`` commands share: opening the store, reading times, tables,
and the export/import file format.

Export format (JSON lines): the first line is ``{"format": "canary-evidence", "version": 2}``; every
following line is one stored record (``EvidenceOut``: the observation, its id, key digest and status),
slowdowns in percent (``resident_slowdown_pct``: 5.0 is 5% slower). Version-1 files (slowdowns as
fractions, without the ``_pct`` suffix) are still read: ``schemas.record_from_v1`` converts them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from canary._model import check_limits
from canary.errors import CanaryError, InputError
from canary.tables import table as table  # the project's one table renderer, re-exported
from evidence_store.engine import open_store
from evidence_store.models import Evidence, Reservation
from evidence_store.schemas import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    CertificateOut,
    EvidenceOut,
    ExportHeader,
    ReservationOut,
    record_from_v1,
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
    if rec.resident_slowdown_pct is None:
        return "unknown"
    text = f"{rec.resident_slowdown_pct:.1f}%"
    if rec.resident_slowdown_low_pct is not None and rec.resident_slowdown_high_pct is not None:
        text += f" [{rec.resident_slowdown_low_pct:.1f}, {rec.resident_slowdown_high_pct:.1f}]"
    return text


def fmt_confidence(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def fmt_minute(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


#: How ``evidence list`` narrows to a terminal's width (``evidence show`` and ``--json`` have everything).
EVIDENCE_FIT: tuple[FitStep, ...] = (
    ("drop", "SOURCE"), ("drop", "DRIVER"), ("drop", "CONF"), ("drop", "CREATED"),
    ("cut", "RESIDENT → CANDIDATE", 48), ("drop", "REGIME"), ("cut", "RESIDENT → CANDIDATE", 24),
    ("cut", "SLOWDOWN", 8),
)


def evidence_rows(
    records: Iterable[EvidenceOut], names: PairNames | None = None
) -> tuple[list[str], list[list[str]]]:
    """One row per record: the pair as ``name@version`` (short versions; a name where the store knows
    it, :func:`pair_names`), minutes for the time."""
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
    rows = []
    for r in records:
        resident, candidate = (names or {}).get((r.key.resident_version, r.key.candidate_version), (None, None))
        rows.append(
            [
                r.id[:8],
                fmt_minute(r.created_at),
                f"{workload_label(resident, r.key.resident_version)} → "
                f"{workload_label(candidate, r.key.candidate_version)}",
                r.key.device_type,
                r.key.regime,
                r.driver_version or "unknown",
                r.source,
                r.outcome,
                fmt_slowdown(r),
                fmt_confidence(r.confidence),
                r.status,
            ]
        )
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


# --- workload names, short versions, the width of a terminal ---------------------------------------

#: A version shown in a table: a digest (``sha256:<hex>``) keeps its algorithm and 12 hex characters,
#: as container tools show image ids; any other version longer than this is cut with an ellipsis.
SHORT_DIGEST_HEX = 12
MAX_SHOWN_VERSION = 24
_DIGEST = re.compile(r"(?P<algo>[a-z0-9]+):(?P<hex>[0-9a-f]{16,})", re.IGNORECASE)


def short_version(version: str) -> str:
    """``sha256:4f1c9a0e7d2b…`` (64 hex) → ``sha256:4f1c9a0e7d2b``; ``1.8.0`` stays; other long versions
    are cut to ``MAX_SHOWN_VERSION`` characters ending in ``…``. ``--json`` keeps the full value."""
    digest = _DIGEST.fullmatch(version)
    if digest is not None:
        return f"{digest['algo']}:{digest['hex'][:SHORT_DIGEST_HEX]}"
    if len(version) > MAX_SHOWN_VERSION:
        return version[: MAX_SHOWN_VERSION - 1] + "…"
    return version


def workload_label(name: str | None, version: str) -> str:
    """``name@short-version``, or the short version alone when no name is known for it."""
    return f"{name}@{short_version(version)}" if name else short_version(version)


#: (resident version, candidate version) → (resident name, candidate name); a name is ``None`` where
#: the store does not say it.
PairNames = dict[tuple[str, str], tuple[str | None, str | None]]


def pair_names(session: Session, pairs: Iterable[tuple[str, str]] | None = None) -> PairNames:
    """The workloads' names for evidence pairs (``None``: every pair in the store).

    An evidence key holds versions only, so names come from what else the store keeps: the certificates
    linked to the pair's evidence (the candidate's ``workload_name``, the resident whose
    ``workload_version`` is the pair's), and, for a version no such certificate names, the profile
    registry or another pair's certificate when that version has exactly one name there. A version with
    no name, or with several, stays without one: a name is never guessed.
    """
    from sqlalchemy import and_, func, or_

    from evidence_store.models import Certificate, CertificateEvidence
    from evidence_store.serve_models import RegistryEntry

    wanted = None if pairs is None else set(pairs)
    query = (
        select(Evidence.resident_version, Evidence.candidate_version, func.min(CertificateEvidence.certificate_id))
        .join(CertificateEvidence, CertificateEvidence.evidence_id == Evidence.id)
        .group_by(Evidence.resident_version, Evidence.candidate_version)
    )
    if wanted is not None:
        if not wanted:
            return {}
        query = query.where(
            or_(*(and_(Evidence.resident_version == r, Evidence.candidate_version == c) for r, c in wanted))
        )
    first_cert = {(r, c): cert_id for r, c, cert_id in session.execute(query)}
    documents: dict[str, Any] = {}
    if first_cert:
        for cert_id, document in session.execute(
            select(Certificate.id, Certificate.certificate_json).where(Certificate.id.in_(set(first_cert.values())))
        ):
            documents[cert_id] = document
    names: PairNames = {}
    by_version: dict[str, set[str]] = {}
    for (resident_v, candidate_v), cert_id in first_cert.items():
        doc = documents.get(cert_id) or {}
        candidate = doc.get("workload_name") if doc.get("workload_version") == candidate_v else None
        resident = next(
            (r.get("name") for r in doc.get("residents") or () if isinstance(r, dict)
             and r.get("workload_version") == resident_v),
            None,
        )
        resident = resident if isinstance(resident, str) and resident else None
        candidate = candidate if isinstance(candidate, str) and candidate else None
        names[(resident_v, candidate_v)] = (resident, candidate)
        for name, version in ((resident, resident_v), (candidate, candidate_v)):
            if name is not None:
                by_version.setdefault(version, set()).add(name)
    if wanted is None:
        wanted = {
            (r, c) for r, c in session.execute(
                select(Evidence.resident_version, Evidence.candidate_version).distinct()
            )
        }
    unnamed = {v for pair in wanted for v, n in zip(pair, names.get(pair, (None, None)), strict=True) if n is None}
    if unnamed:
        for name, version in session.execute(
            select(RegistryEntry.name, RegistryEntry.version).where(
                RegistryEntry.kind == "profile", RegistryEntry.version.in_(unnamed)
            )
        ):
            by_version.setdefault(version, set()).add(name)

    def only(version: str) -> str | None:
        found = by_version.get(version, set())
        return next(iter(found)) if len(found) == 1 else None

    for resident_v, candidate_v in wanted:
        resident, candidate = names.get((resident_v, candidate_v), (None, None))
        names[(resident_v, candidate_v)] = (resident or only(resident_v), candidate or only(candidate_v))
    return names


def _term_matches(term: str, name: str | None, version: str) -> bool:
    """A ``--pair`` side: the version, its short form as tables show it, the name, or ``name@version``
    (full or short)."""
    if term in (version, short_version(version)):
        return True
    if name is None:
        return False
    return term == name or term in (f"{name}@{version}", f"{name}@{short_version(version)}")


def pairs_matching(pair: str, names: PairNames) -> list[tuple[str, str]]:
    """The (resident version, candidate version) pairs that ``RESIDENT:CANDIDATE`` names. Versions
    hold ``:`` themselves (``sha256:…``), so every ``:`` is tried as the divider."""
    found: list[tuple[str, str]] = []
    cuts = [i for i, ch in enumerate(pair) if ch == ":"]
    for (resident_v, candidate_v), (resident, candidate) in names.items():
        if any(
            _term_matches(pair[:i], resident, resident_v) and _term_matches(pair[i + 1:], candidate, candidate_v)
            for i in cuts
        ):
            found.append((resident_v, candidate_v))
    return found


def check_pair_filter(pair: str) -> None:
    """``--pair`` is ``RESIDENT:CANDIDATE`` with both sides given."""
    if ":" not in pair or pair.startswith(":") or pair.endswith(":"):
        raise InputError(
            f"{pair!r} is not RESIDENT:CANDIDATE (each a workload name, name@version or version, "
            "e.g. comms:embedding-service)",
            field="--pair",
        )


def list_evidence_for_pairs(
    session: Session,
    pairs: Iterable[tuple[str, str]],
    *,
    device_type: str | None,
    status: str | None,
    limit: int | None,
) -> list[EvidenceOut]:
    """Records of these (resident version, candidate version) pairs, newest first, filtered like
    ``evidence.list_evidence``."""
    from sqlalchemy import and_, or_

    wanted = list(pairs)
    if not wanted:
        return []
    from evidence_store.evidence import newest_records

    query = select(Evidence).where(
        or_(*(and_(Evidence.resident_version == r, Evidence.candidate_version == c) for r, c in wanted))
    )
    return newest_records(session, query, device_type=device_type, status=status, limit=limit)


def terminal_columns() -> int | None:
    """The width tables must keep to: ``$COLUMNS``, else the terminal's; ``None`` when the output is not
    a terminal and ``$COLUMNS`` is unset (a pipe or a file gets whole rows)."""
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return max(int(os.environ["COLUMNS"]), 40)
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 24)).columns


#: How a table is narrowed: drop a column, or cut a column's cells to at most N characters.
FitStep = tuple[str, str] | tuple[str, str, int]


def fit_table(
    headers: list[str], rows: list[list[str]], *, width: int | None, steps: Sequence[FitStep]
) -> tuple[str, list[str]]:
    """The table within ``width`` characters (``None``: as wide as it is), narrowed by ``steps`` in
    order until it fits: ``("drop", COLUMN)`` leaves a column out, ``("cut", COLUMN, N)`` cuts its cells
    to N characters ending in ``…``. Returns the table and the names of the columns left out."""
    headers, rows = list(headers), [list(r) for r in rows]
    dropped: list[str] = []

    def too_wide() -> int:
        return 0 if width is None else max(len(line) for line in table(headers, rows).splitlines()) - width

    for step in steps:
        over = too_wide()
        if over <= 0:
            break
        if step[1] not in headers:
            continue
        i = headers.index(step[1])
        if step[0] == "drop":
            del headers[i]
            for row in rows:
                del row[i]
            dropped.append(step[1])
        else:
            floor = max(step[2] if len(step) > 2 else 1, len(headers[i]))
            widest = max(len(r[i]) for r in rows) if rows else 0
            limit = max(floor, widest - over)
            for row in rows:
                if len(row[i]) > limit:
                    row[i] = row[i][: limit - 1] + "…"
    return table(headers, rows), dropped

def probe_decision(session: Session, probe_id: str) -> dict[str, str | None] | None:
    """What decided the probe behind a record, from this store's probe journal: the deciding rule
    (``judge``, ``slo``, ``guard``, …) and the judge's or the rollback's reason; ``None`` when the
    journal has no result for it (an imported record, or production evidence)."""
    from evidence_store.models import ProbeJournal

    row = session.get(ProbeJournal, probe_id)
    result = row.result_json if row is not None else None
    if not isinstance(result, dict):
        return None

    def text(name: str) -> str | None:
        value = result.get(name)
        return value if isinstance(value, str) and value else None

    return {"rule": text("decided_by_rule"), "reason": text("judgment_reason") or text("rollback_reason")}


# --- stored certificates --------------------------------------------------------------------------

CERTIFICATE_VERDICTS = ("admit", "reject", "unknown")


def _certificate_filters(device: str | None, workload: str | None, verdict: str | None) -> list[Any]:
    from sqlalchemy import or_

    from evidence_store.models import Certificate

    doc = Certificate.certificate_json
    conditions: list[Any] = []
    if verdict is not None:
        conditions.append(doc["verdict"].as_string() == verdict)
    if device is not None:
        conditions.append(or_(doc[("device", "type")].as_string() == device,
                              doc[("device", "uuid")].as_string() == device))
    if workload is not None:
        name, at, version = workload.partition("@")
        if at:
            if not name or not version:
                raise InputError(f"{workload!r} is not NAME, NAME@VERSION or a version", field="--workload")
            conditions.append(doc["workload_name"].as_string() == name)
            conditions.append(doc["workload_version"].as_string() == version)
        else:
            conditions.append(or_(doc["workload_name"].as_string() == workload,
                                  doc["workload_version"].as_string() == workload))
    return conditions


def list_certificates(
    session: Session, *, device: str | None = None, workload: str | None = None, verdict: str | None = None,
    limit: int | None = None,
) -> tuple[list[CertificateOut], int]:
    """Stored certificates, newest issued first, and how many match in all. ``device`` is a device type
    or UUID; ``workload`` the candidate's name, ``name@version`` or version; ``verdict`` admit, reject or
    unknown."""
    from sqlalchemy import func

    from evidence_store.models import Certificate, CertificateEvidence

    if verdict is not None and verdict not in CERTIFICATE_VERDICTS:
        raise InputError(f"unknown verdict {verdict!r}; one of {', '.join(CERTIFICATE_VERDICTS)}", field="--verdict")
    conditions = _certificate_filters(device, workload, verdict)
    total = session.scalar(select(func.count()).select_from(Certificate).where(*conditions)) or 0
    query = (
        select(Certificate)
        .where(*conditions)
        .order_by(Certificate.certificate_json["issued_at"].as_string().desc(), Certificate.id)
    )
    if limit is not None:
        query = query.limit(limit)
    rows = session.scalars(query).all()
    links: dict[str, list[str]] = {}
    if rows:
        for cert_id, evidence_id in session.execute(
            select(CertificateEvidence.certificate_id, CertificateEvidence.evidence_id)
            .where(CertificateEvidence.certificate_id.in_([r.id for r in rows]))
            .order_by(CertificateEvidence.evidence_id)
        ):
            links.setdefault(cert_id, []).append(evidence_id)
    out = [
        CertificateOut(id=r.id, digest=r.digest, certificate_json=r.certificate_json,
                       evidence_ids=tuple(links.get(r.id, ())), recorded_at=r.recorded_at)
        for r in rows
    ]
    return out, total


def resolve_certificate_id(session: Session, given: str) -> str:
    """A full certificate id from an id or a unique prefix of one (the table shows 8 characters)."""
    from evidence_store.models import Certificate

    if session.get(Certificate, given) is not None:
        return given
    matches = session.scalars(
        select(Certificate.id).where(Certificate.id.startswith(given, autoescape=True)).limit(2)
    ).all()
    if not matches:
        raise InputError(f"no certificate with id {given!r}", field="ID")
    if len(matches) > 1:
        raise InputError(f"id prefix {given!r} matches several certificates; give more of it", field="ID")
    return matches[0]


def _doc_text(doc: dict[str, Any], *path: str) -> str | None:
    value: Any = doc
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


def _issued(doc: dict[str, Any]) -> str:
    text = _doc_text(doc, "issued_at")
    if text is None:
        return "-"
    try:
        return fmt_minute(datetime.fromisoformat(text))
    except ValueError:
        return text


#: How ``evidence certificates list`` narrows to a terminal's width.
CERTIFICATE_FIT: tuple[FitStep, ...] = (
    ("cut", "REASON", 48), ("drop", "EVIDENCE"), ("drop", "BY"), ("drop", "REGIME"), ("cut", "REASON", 24),
    ("cut", "RESIDENTS", 24), ("drop", "ISSUED"), ("cut", "REASON", 16), ("cut", "WORKLOAD", 24),
    ("cut", "RESIDENTS", 12), ("cut", "REASON", 8),
)


def certificate_rows(records: Iterable[CertificateOut]) -> tuple[list[str], list[list[str]]]:
    headers = ["ID", "ISSUED", "VERDICT", "WORKLOAD", "RESIDENTS", "DEVICE", "REGIME", "BY", "EVIDENCE", "REASON"]
    rows = []
    for c in records:
        doc = c.certificate_json
        residents = [
            workload_label(_doc_text(r, "name"), _doc_text(r, "workload_version") or "unprofiled")
            if _doc_text(r, "workload_version") else (_doc_text(r, "name") or "?")
            for r in doc.get("residents") or () if isinstance(r, dict)
        ]
        rows.append([
            c.id[:8],
            _issued(doc),
            _doc_text(doc, "verdict") or "?",
            workload_label(_doc_text(doc, "workload_name"), _doc_text(doc, "workload_version") or "?"),
            ", ".join(residents) or "-",
            _doc_text(doc, "device", "type") or "?",
            _doc_text(doc, "regime") or "?",
            _doc_text(doc, "decided_by") or "?",
            str(len(c.evidence_ids)),
            (_doc_text(doc, "reason") or "").replace("\n", " "),
        ])
    return headers, rows


def write_json(value: Any, out: IO[str] | None = None) -> None:
    stream = out or sys.stdout
    json.dump(value, stream, indent=2, sort_keys=True)
    stream.write("\n")


# --- export / import ------------------------------------------------------------------------------


def header_line(key: bytes | None = None) -> str:
    header: dict[str, Any] = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
    if key is not None:
        header["key_id"] = key_id(key)
    return json.dumps(header, sort_keys=True)


# --- fleet signing --------------------------------------------------------------------------------

MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096


def key_id(key: bytes) -> str:
    import hashlib

    return hashlib.sha256(key).hexdigest()[:16]


def read_fleet_key(path: str | None) -> bytes | None:
    """The fleet key from a key file (operator configuration: ``--key FILE`` or
    ``$CANARY_FLEET_KEY_FILE``); ``None`` when neither names one. The file holds at least 16 bytes
    (surrounding whitespace ignored)."""
    import stat

    if path is None:
        path = os.environ.get("CANARY_FLEET_KEY_FILE") or None
    if path is None:
        return None
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("the fleet key must be a regular file", file=path, field="--key")
        with open(path, "rb") as fh:
            key = fh.read(MAX_KEY_BYTES + 1).strip()
    except FileNotFoundError:
        raise InputError("fleet key file not found", file=path, field="--key") from None
    except OSError as err:
        raise InputError(f"cannot read the fleet key: {err.strerror}", file=path, field="--key") from None
    except ValueError:
        raise InputError("not a file name (holds a NUL character)", file=path, field="--key") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise InputError(f"a fleet key holds {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes", file=path, field="--key")
    return key


def check_export_target(path: Path) -> None:
    """Refuse a target that is not a regular file (or not there yet): a device, FIFO, socket or
    directory is never replaced by the export."""
    import stat

    try:
        info = os.stat(path)  # follows a link: what would really be replaced
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise InputError(f"directory {path.parent} does not exist", file=str(path)) from None
        return
    except OSError as err:
        raise InputError(f"cannot use as export target: {err.strerror}", file=str(path)) from None
    except ValueError:
        raise InputError("not a file name (holds a NUL character)", file=str(path)) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError("is a directory; give a file name", file=str(path))
    if not stat.S_ISREG(info.st_mode):
        raise InputError("not a regular file (a device, FIFO or socket); refusing to replace it", file=str(path))


def _export_lines(records: Iterable[EvidenceOut], key: bytes | None) -> Iterator[str]:
    import hashlib
    import hmac

    mac = hmac.new(key, digestmod=hashlib.sha256) if key is not None else None
    lines = [header_line(key) + "\n"]
    lines_iter = (
        json.dumps(rec.model_dump(mode="json"), sort_keys=True, separators=(",", ":")) + "\n" for rec in records
    )
    for line in _chain(lines, lines_iter):
        if mac is not None:
            mac.update(line.encode("utf-8"))
        yield line
    if mac is not None:
        yield json.dumps({"hmac_sha256": mac.hexdigest()}) + "\n"


def _chain(first: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from rest


def write_export(
    path: Path | None, records: Iterable[EvidenceOut], out: IO[str] | None = None, *, key: bytes | None = None
) -> int:
    """Write the export to ``path`` atomically (a temporary file renamed into place), or to ``out``
    when ``path`` is ``None``; signed with ``key`` when given. Returns the record count. A target that
    is not a regular file is refused (``InputError``) before anything is written."""
    count = -1 if key is None else -2
    if path is None:
        stream = out or sys.stdout
        for line in _export_lines(records, key):
            stream.write(line)
            count += 1
        stream.flush()
        return count
    path = Path(os.path.abspath(path))
    check_export_target(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in _export_lines(records, key):
                fh.write(line)
                count += 1
        check_export_target(path)  # nothing swapped in meanwhile
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return count


#: Largest export file read, and longest line in it (a record is about 1 KiB).
MAX_IMPORT_BYTES = 512 * 1024 * 1024
MAX_IMPORT_LINE_BYTES = 64 * 1024


def _validation_field(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(record)"
    return loc, first["msg"]


def read_export(path: Path, *, key: bytes | None = None) -> list[tuple[int, EvidenceOut]]:
    """Every record of an export file with its line number, all validated before anything is stored.

    With ``key`` (the fleet key), the file must be signed with it: a file without a signature, signed
    with another key, or changed after signing is refused. Raises ``InputError`` naming the file, the
    line and the field for an unreadable, corrupt, wrong-version or wrongly signed file.
    """
    import stat

    name = str(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise InputError("is a directory, expected an evidence export file", file=name)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file (a device, FIFO or socket)", file=name)
        with open(path, "rb") as fh:
            raw = fh.read(MAX_IMPORT_BYTES + 1)
    except FileNotFoundError:
        raise InputError("file not found", file=name) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=name) from None
    except ValueError:  # a NUL byte in the name
        raise InputError("not a file name (holds a NUL character)", file=name) from None
    if len(raw) > MAX_IMPORT_BYTES:
        raise InputError(f"larger than {MAX_IMPORT_BYTES} bytes (limit MAX_IMPORT_BYTES)", file=name)
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
    except (RecursionError, ValueError) as err:
        raise InputError(f"line 1: header is not JSON ({str(err).splitlines()[0][:80]})", file=name) from err
    try:
        header = ExportHeader.model_validate(header_data)
    except ValidationError as err:
        loc, msg = _validation_field(err)
        raise InputError(
            f"line 1: not a canary evidence export of version {EXPORT_VERSION} ({msg}; expected {header_line()})",
            file=name,
            field=loc,
        ) from err
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_IMPORT_LINE_BYTES:
            raise InputError(
                f"line {number}: longer than {MAX_IMPORT_LINE_BYTES} characters (limit MAX_IMPORT_LINE_BYTES)",
                file=name,
            )
    lines = _verified(lines, header, key, name)
    records: list[tuple[int, EvidenceOut]] = []
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_IMPORT_LINE_BYTES:
            raise InputError(
                f"line {number}: longer than {MAX_IMPORT_LINE_BYTES} characters (limit MAX_IMPORT_LINE_BYTES)",
                file=name,
            )
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            raise InputError(f"line {number}: blank line inside the file", file=name)
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"line {number}: not JSON ({err.msg} at column {err.colno})", file=name) from err
        except (RecursionError, ValueError) as err:  # nesting or a number too long to convert
            raise InputError(f"line {number}: not a record ({str(err).splitlines()[0][:80]})", file=name) from err
        check_limits(data, file=f"{name}: line {number}")
        if header.version == 1:
            data = record_from_v1(data)
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


def _verified(lines: list[str], header: ExportHeader, key: bytes | None, name: str) -> list[str]:
    """The lines without the signature line; ``InputError`` when a configured key does not verify."""
    import hashlib
    import hmac

    if header.key_id is None:
        if key is not None:
            raise InputError("not signed, and this fleet accepts only files signed with its key", file=name,
                             field="key_id")
        return lines
    last = lines[-1] if len(lines) > 1 else ""
    try:
        trailer = json.loads(last)
    except ValueError:
        trailer = None
    if not (isinstance(trailer, dict) and set(trailer) == {"hmac_sha256"} and isinstance(trailer["hmac_sha256"], str)):
        raise InputError(f"line {len(lines)}: a signed file ends with its signature line", file=name)
    body = lines[:-1]
    if key is None:
        return body  # signed, but this store has no fleet key to check it with: its records are still checked
    if header.key_id != key_id(key):
        raise InputError(f"signed with another key (key id {header.key_id}, this fleet's is {key_id(key)})",
                         file=name, field="key_id")
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for line in body:
        mac.update((line + "\n").encode("utf-8"))
    if not hmac.compare_digest(mac.hexdigest(), trailer["hmac_sha256"]):
        raise InputError("the signature does not match: the file was changed after it was signed", file=name,
                         field="hmac_sha256")
    return body
