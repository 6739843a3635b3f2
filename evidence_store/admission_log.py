"""The admission history: which pairs the service was asked about, how often, and the newest request
of each (documents by value) — what the nightly warm job and a driver change's revalidation rank from.

It is kept for ``ADMISSION_LOG_RETENTION_DAYS`` unless the operator says otherwise
(``prune_admission_log``: ``canary db prune``, and every agent's loop).

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select
from sqlalchemy.orm import Session

from evidence_store.fleet_models import AdmissionLog
from evidence_store.schemas import to_utc

ADMISSION_LOG_RETENTION_DAYS = 30.0
"""How long the admission history is kept by default: longer than any ``--since`` window the nightly
warm job or revalidation ranks from (7 days by default), short enough that the table stays small."""
PRUNE_BATCH = 5000


def log_admission(session: Session, *, pair_digest: str, key_digests: Sequence[str], device_type: str,
                  device_id: str, label: str, verdict: str, request_json: dict[str, Any], now: datetime) -> None:
    """One row of the admission history."""
    log_admissions(session, [{"pair_digest": pair_digest, "key_digests": key_digests, "device_type": device_type,
                              "device_id": device_id, "label": label, "verdict": verdict,
                              "request_json": request_json, "now": now}])


def log_admissions(session: Session, entries: Sequence[dict[str, Any]]) -> None:
    """The admission history of ``entries`` (each with ``log_admission``'s arguments), written together:
    one row per pair, device, verdict and label among them, with ``requests`` the number of admissions
    it stands for, ``at`` the newest one's time and ``request_json`` the newest one's request (the last
    in ``entries`` among equal times).

    The service's history writer hands over every admission of its window (50 ms by default). A
    scheduler asks about the same pair hundreds of times a second, with the same documents (kilobytes)
    each time: a row and a copy of the request per admission made the table grow by tens of millions of
    rows a day and the writer's transactions, which overlap requests, several times longer. What reads
    the history wants counts, recency and a pair's newest request (``hot_pairs``,
    ``latest_request_for_keys``). One multi-row ``INSERT``, Core: no ORM object per row."""
    if not entries:
        return
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for e in entries:
        label = e["label"][:600]
        at = to_utc(e["now"])
        key = (e["pair_digest"], e["device_id"], e["verdict"], label)
        row = groups.get(key)
        if row is None:
            groups[key] = {"id": str(uuid.uuid4()), "at": at, "pair_digest": e["pair_digest"],
                           "key_digests": sorted(e["key_digests"]), "device_type": e["device_type"],
                           "device_id": e["device_id"], "label": label, "verdict": e["verdict"],
                           "request_json": e["request_json"], "requests": 1}
            continue
        row["requests"] += 1
        if at >= row["at"]:
            row["at"], row["request_json"] = at, e["request_json"]
    rows = [{**row, "request_json": dict(row["request_json"])} for row in groups.values()]
    session.execute(insert(cast(Table, AdmissionLog.__table__)), rows)


def prune_admission_log(session: Session, *, before: datetime, limit: int = PRUNE_BATCH) -> int:
    """Delete at most ``limit`` rows of the admission history older than ``before``; returns how many.
    Callers commit after each call and call again while it returns ``limit``, so a large backlog is
    removed in short transactions that never hold one long lock."""
    ids = list(session.scalars(select(AdmissionLog.id).where(AdmissionLog.at < to_utc(before)).limit(limit)))
    if ids:
        session.execute(delete(AdmissionLog).where(AdmissionLog.id.in_(ids)))
        session.flush()
    return len(ids)


def count_admissions_before(session: Session, before: datetime) -> int:
    return int(session.scalar(select(func.count()).select_from(AdmissionLog).where(AdmissionLog.at < to_utc(before)))
               or 0)


def oldest_admission(session: Session) -> datetime | None:
    value = session.scalar(select(func.min(AdmissionLog.at)))
    return None if value is None else to_utc(value)


@dataclass(frozen=True, slots=True)
class HotPair:
    pair_digest: str
    key_digests: tuple[str, ...]
    device_type: str
    label: str
    requests: int
    last_at: datetime
    request_json: dict[str, Any]


def hot_pairs(session: Session, *, since: datetime, device_type: str | None = None,
              limit: int | None = None) -> list[HotPair]:
    """Pairs asked for since ``since``, most requested first, the most recent first among equals;
    each with its newest request (documents by value)."""
    since = to_utc(since)
    conds = [AdmissionLog.at >= since]
    if device_type is not None:
        conds.append(AdmissionLog.device_type == device_type)
    counts = session.execute(
        select(AdmissionLog.pair_digest, func.sum(AdmissionLog.requests), func.max(AdmissionLog.at))
        .where(*conds).group_by(AdmissionLog.pair_digest)
    ).all()
    ranked = sorted(((str(d), int(n), to_utc(last)) for d, n, last in counts), key=lambda t: (-t[1], -t[2].timestamp(), t[0]))
    if limit is not None:
        ranked = ranked[:limit]
    out: list[HotPair] = []
    for digest, n, last in ranked:
        row = session.scalars(select(AdmissionLog).where(AdmissionLog.pair_digest == digest, *conds)
                              .order_by(AdmissionLog.at.desc()).limit(1)).first()
        assert row is not None
        out.append(HotPair(digest, tuple(row.key_digests), row.device_type, row.label, n, last,
                           dict(row.request_json)))
    return out


def latest_request_for_keys(session: Session, key_digests: set[str]) -> dict[str, AdmissionLog]:
    """For each key digest, the newest logged admission whose pair includes it."""
    found: dict[str, AdmissionLog] = {}
    for row in session.scalars(select(AdmissionLog).order_by(AdmissionLog.at.desc())):
        for k in row.key_digests:
            if k in key_digests and k not in found:
                found[k] = row
        if len(found) == len(key_digests):
            break
    return found
