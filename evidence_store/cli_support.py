"""What the ``canary evidence|reservations|db`` commands share: opening the store, reading times and
ids, and the tables and JSON they print.

The export file's format is ``evidence_store.export_file``'s.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any

from sqlalchemy import Engine, Select, select
from sqlalchemy.orm import Session

from canary.errors import InputError
from canary.tables import table
from canary.units import parse_time as parse_time  # the store CLI's reader of times, defined with the units
from evidence_store.errors import NoSuchId
from evidence_store.migrate import open_store
from evidence_store.models import Evidence, Reservation
from evidence_store.schemas import (
    CertificateOut,
    EvidenceOut,
    ReservationOut,
)


@contextmanager
def store(url: str | None) -> Iterator[Engine]:
    """An engine for a store at the current schema (``SchemaOutOfDate`` otherwise), disposed afterwards.

    A SQLite store whose file does not exist is refused before anything connects (connecting would
    leave an empty file behind, and a typo in the path would then read as a store without a schema);
    the commands that create a store are ``canary db upgrade`` and those that write evidence (``canary
    admit``, ``open_store_for_writing``)."""
    require_existing_store(url)
    engine = open_store(url)
    try:
        yield engine
    finally:
        engine.dispose()


#: A date with a zone and no time of day (``2026-12-03Z``, ``2026-12-03+02:00``): midnight in that zone.
#: ``datetime.fromisoformat`` refuses the first and reads the second as 02:00 with no zone.


def require_existing_store(url: str | None) -> None:
    """Raise ``SchemaOutOfDate`` (exit 4) naming the path when ``url`` is a SQLite file that does not
    exist; create nothing. Other URLs (PostgreSQL, in-memory) pass: the connection says what it finds."""
    from canary.errors import SchemaOutOfDate
    from evidence_store.location import check_db_url, default_db_url, sqlite_file

    resolved = url or default_db_url()
    check_db_url(resolved)  # a missing directory is bad input (exit 2), as everywhere else
    path = sqlite_file(resolved)
    if path is not None and not path.exists():
        raise SchemaOutOfDate(
            f"no store at {path} (nothing created; check the path): canary db upgrade, with the same "
            "--db or CANARY_DB_URL, creates one there"
        )


def resolve_evidence_id(session: Session, given: str) -> str:
    """A full evidence id from an id or a unique prefix of one (the tables show 8 characters)."""
    if session.get(Evidence, given) is not None:
        return given
    matches = session.scalars(
        select(Evidence.id).where(Evidence.id.startswith(given, autoescape=True)).limit(2)
    ).all()
    if not matches:
        raise NoSuchId(f"no evidence with id {given!r}", field="ID")
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
        raise NoSuchId(f"no reservation with id {given!r}", field="ID")
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


#: Outcomes that decided nothing: a confidence stored with one is the level the probe was asked to reach
#: (its interval's nominal coverage), not one it reached.
UNDECIDED_OUTCOMES = ("inconclusive", "aborted")


def fmt_confidence(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def fmt_record_confidence(rec: EvidenceOut, *, long: bool = False) -> str:
    """The confidence a record reached: its stored value for a safe or unsafe outcome; for an
    inconclusive or aborted one none was reached, so ``-`` (``long``: says so, with the level asked)."""
    if rec.outcome not in UNDECIDED_OUTCOMES:
        return fmt_confidence(rec.confidence)
    if not long:
        return "-"
    asked = "" if rec.confidence is None else f" ({rec.confidence:.3f} was asked)"
    return f"none reached: the probe was {rec.outcome}{asked}"


#: The store has kept ``status_changed_at`` since this migration; a stale or revoked record without one
#: changed status before it.
STATUS_TIME_SINCE_REVISION = "fa1f2187b9d5"


def fmt_status_changed(rec: EvidenceOut) -> str:
    """When a record became stale or revoked; ``-`` for a current record (its status never changed);
    ``unknown`` for one that changed before the store kept this time (never guessed)."""
    if rec.status == "current":
        return "-"
    if rec.status_changed_at is None:
        return f"unknown (before this store kept the time of a status change, revision {STATUS_TIME_SINCE_REVISION})"
    return fmt_time(rec.status_changed_at)


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
                fmt_record_confidence(r),
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
    from evidence_store.service.models import RegistryEntry

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
    from evidence_store.evidence import newest_records

    query = pairs_query(pairs)
    if query is None:
        return []
    return newest_records(session, query, device_type=device_type, status=status, limit=limit)


def pairs_query(pairs: Iterable[tuple[str, str]]) -> Select[Evidence] | None:
    """The records of these (resident version, candidate version) pairs; ``None`` for no pair."""
    from sqlalchemy import and_, or_

    wanted = list(pairs)
    if not wanted:
        return None
    return select(Evidence).where(
        or_(*(and_(Evidence.resident_version == r, Evidence.candidate_version == c) for r, c in wanted))
    )


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


def device_type_filter(session: Any, value: str, *, option: str, column: Any) -> str:
    """The device type a filter option names, resolved as DEVICE is for ``canary fit``: a catalog name
    or alias (``h100`` is ``h100-sxm``, the name records are stored under). A name the catalog lacks is
    kept only when ``column`` holds it (a live device of a model the catalog lacks); otherwise it is an
    ``UnknownDevice`` (exit 2) naming ``option`` and the closest catalog names, not an empty answer."""
    from sqlalchemy import select

    from canary.catalog import UnknownDevice, lookup

    try:
        return lookup(value).name
    except UnknownDevice as exc:
        if session.scalar(select(column).where(column == value).limit(1)) is not None:
            return value
        raise UnknownDevice(exc.problem, field=option) from None


def registry_named_pairs(s: Session, pair: str, names: dict[tuple[str, str], tuple[str | None, str | None]]
                         ) -> set[tuple[str, str]]:
    """The pairs ``pair`` names when a side is given by its profile registry name (``nccl-comms``), where
    the store names that workload by what the certificates call it (the snapshot's process, ``comms``):
    a version is also known by every registry profile name it is stored under."""
    from evidence_store.service.models import RegistryEntry

    registered: dict[str, set[str]] = {}
    for name, version in s.execute(select(RegistryEntry.name, RegistryEntry.version)
                                   .where(RegistryEntry.kind == "profile")):
        registered.setdefault(version, set()).add(name)
    found: set[tuple[str, str]] = set()
    for (resident_v, candidate_v), (resident, candidate) in names.items():
        residents = registered.get(resident_v, set()) | {resident}
        candidates = registered.get(candidate_v, set()) | {candidate}
        if any(pairs_matching(pair, {(resident_v, candidate_v): (r, c)}) for r in residents for c in candidates):
            found.add((resident_v, candidate_v))
    return found


def pairs_named(s: Session, pair: str, names: PairNames) -> list[tuple[str, str]]:
    """The pairs ``pair`` (``RESIDENT:CANDIDATE``) names, as ``canary evidence list --pair`` and
    ``GET /v1/evidence?pair=`` read it: by the names the certificates give (``pairs_matching``) and by
    profile registry names (``registry_named_pairs``)."""
    return sorted(set(pairs_matching(pair, names)) | registry_named_pairs(s, pair, names))
