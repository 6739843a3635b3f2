"""The evidence lookup on an admission's hot path: select a pair key's candidate records and pool them.

Takes the caller's ``Session`` and never commits; reads no clock (callers pass ``now``). The rule that
combines the records is ``evidence_store.pooling``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import Dialect, Select, String, bindparam, cast, func, null, select, union_all
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from canary._model import PairKey
from canary.errors import InputError
from evidence_store.conditions import active_booking, usable_evidence
from evidence_store.models import Evidence, Reservation
from evidence_store.pooling import Record, pool
from evidence_store.schemas import LookupResult, to_utc

_LOOKUP_COLUMNS = (
    Evidence.id,
    Evidence.driver_version,
    Evidence.source,
    Evidence.outcome,
    Evidence.resident_slowdown_pct,
    Evidence.resident_slowdown_low_pct,
    Evidence.resident_slowdown_high_pct,
    Evidence.samples,
    Evidence.confidence,
    Evidence.created_at,
    Evidence.expires_at,
)


# Built once: a lookup sits on the admission's hot path, and constructing the statement costs more
# than running it.
_LOOKUP_STATEMENT = (
    select(*_LOOKUP_COLUMNS)
    .where(
        Evidence.key_digest == bindparam("key_digest"),
        usable_evidence(bindparam("now", type_=Evidence.expires_at.type),
                        bindparam("oldest", type_=Evidence.created_at.type)),
    )
    .order_by(Evidence.created_at.desc(), Evidence.id.desc())
)


@lru_cache(maxsize=4096)
def key_digest(key: PairKey) -> str:
    """``key.digest()``, computed once per key: a key is immutable (a frozen dataclass of six strings)
    and its digest a pure function of them, while the JSON and hash cost more than the lookup's row."""
    return key.digest()


def _lookup_params(key: PairKey, now: datetime, ttl_s: float) -> dict[str, Any]:
    now = to_utc(now)
    return {"key_digest": key_digest(key), "now": now, "oldest": now - timedelta(seconds=ttl_s)}


def lookup_query(key: PairKey, *, now: datetime, ttl_s: float) -> Select[*tuple[Any, ...]]:
    """The candidate rows of a lookup, with its parameters bound (for ``EXPLAIN``): current,
    unexpired, within the TTL, newest first; only the columns pooling reads.

    Served by the composite index ``ix_evidence_lookup (key_digest, status, expires_at)``.
    """
    return _LOOKUP_STATEMENT.params(**_lookup_params(key, now, ttl_s))


def lookup(
    session: Session | Connection,
    key: PairKey,
    *,
    driver_version: str | None,
    now: datetime,
    ttl_s: float,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float = 0.5,
) -> LookupResult:
    """Pool the usable evidence for ``key`` at ``now``. ``session`` may be a ``Session`` or a Core
    ``Connection`` (the admission's read-only transaction: plain rows, no ORM bookkeeping).

    Candidates: status ``current``, ``expires_at > now``, created within ``ttl_s``. They are combined
    by ``evidence_store.pooling.pool`` (conclusive records only, the current driver's unless
    ``allow_cross_driver``, local before imported, production violations outweigh earlier records);
    the rule is documented there.

    Returns ``outcome=None`` (and ``reason`` saying why) when no usable evidence exists;
    ``confidence`` is ``None`` when none of the deciding records carried one.
    """
    _check_pooling(ttl_s, cross_driver_confidence_factor)
    rows: Sequence[Any] = session.execute(_LOOKUP_STATEMENT, _lookup_params(key, now, ttl_s)).all()
    return pool_candidates(rows, ttl_s=ttl_s, driver_version=driver_version, allow_cross_driver=allow_cross_driver,
                           cross_driver_confidence_factor=cross_driver_confidence_factor)


def _check_pooling(ttl_s: float, cross_driver_confidence_factor: float) -> None:
    if not ttl_s > 0:
        raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
    if not 0.0 <= cross_driver_confidence_factor <= 1.0:
        raise InputError(
            f"must be within 0..1, got {cross_driver_confidence_factor}",
            field="cross_driver_confidence_factor",
        )


def pool_candidates(
    rows: Sequence[Any],
    *,
    ttl_s: float,
    driver_version: str | None,
    allow_cross_driver: bool,
    cross_driver_confidence_factor: float,
) -> LookupResult:
    """One key's candidate rows (as ``lookup`` or ``decision_read`` selected them) pooled into one answer.

    Pooling is a pure function of the rows' values; ``decision_read``'s rows are values (``pooling.Record``,
    frozen and hashable), so their answer is kept by them: a cached admission asks about the same few rows
    again and again, and every change in the store — a new record, a revocation, an expiry — changes the
    rows the read returns, and so the key."""
    _check_pooling(ttl_s, cross_driver_confidence_factor)
    if rows and all(type(r) is Record for r in rows):
        return _pooled(tuple(rows), ttl_s, driver_version, allow_cross_driver, cross_driver_confidence_factor)
    return _pooled.__wrapped__(rows, ttl_s, driver_version, allow_cross_driver, cross_driver_confidence_factor)


@lru_cache(maxsize=4096)
def _pooled(rows: Sequence[Any], ttl_s: float, driver_version: str | None, allow_cross_driver: bool,
            cross_driver_confidence_factor: float) -> LookupResult:
    if not rows:
        return LookupResult(outcome=None, reason=f"no current evidence within the last {ttl_s:g} s for this pair")
    return pool(rows, driver_version=driver_version, allow_cross_driver=allow_cross_driver, ttl_s=ttl_s,
                cross_driver_confidence_factor=cross_driver_confidence_factor)


# One statement for everything decisions read: the memory booked on each of their devices, and the
# candidate evidence rows of each of their pair keys — for one decision, or for every decision a server
# has waiting at once (``canary.serve.reads`` batches them). The devices and the key digests travel as one
# array parameter each (PostgreSQL's ``= ANY``, SQLite's ``json_each``), so there is one statement shape
# whatever the numbers, and one snapshot of the store for all of it.
#
# It is built and compiled by SQLAlchemy, once per dialect, and executed on the driver's own connection
# (``DecisionStatement``): on a cached admission SQLAlchemy's per-execution work (execution context,
# parameter and result processing) cost ~5x the statement itself (measured: 200 µs of CPU against 42 µs
# for the same statement through psycopg; docs/serve.md). The conversions SQLAlchemy would apply are its
# own: each bind's and each column's type processors for the dialect.

#: Most devices, and most key digests, one statement reads.
MAX_BATCH = 512


def _member(column: Any, name: str, dialect: Dialect) -> Any:
    """``column`` is one of the values of the array parameter ``name``."""
    if dialect.name == "postgresql":
        from sqlalchemy import any_
        from sqlalchemy.dialects.postgresql import ARRAY

        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    values = func.json_each(bindparam(name, type_=String())).table_valued("value")  # a JSON array of strings
    return column.in_(select(values.c.value))


def _decision_statement(dialect: Dialect) -> Select[*tuple[Any, ...]]:
    evidence_columns = (Evidence.key_digest, *_LOOKUP_COLUMNS)
    bookings = select(
        Reservation.device_id.label("device_id"), func.sum(Reservation.memory_bytes).label("booked"),
        *(cast(null(), c.type).label(c.name) for c in evidence_columns),
    ).where(
        _member(Reservation.device_id, "devices", dialect),
        active_booking(bindparam("booked_at", type_=Reservation.expires_at.type)),
    ).group_by(Reservation.device_id)
    candidates = select(
        cast(null(), Reservation.device_id.type).label("device_id"),
        cast(null(), Reservation.memory_bytes.type).label("booked"), *evidence_columns,
    ).where(
        _member(Evidence.key_digest, "digests", dialect),
        usable_evidence(bindparam("evidence_at", type_=Evidence.expires_at.type),
                        bindparam("oldest", type_=Evidence.created_at.type)),
    )
    both = union_all(bookings, candidates).subquery("decision")
    statement = select(*both.c).order_by(both.c.key_digest, both.c.created_at.desc(), both.c.id.desc())
    assert tuple(c.name for c in statement.selected_columns) == (
        "device_id", "booked", "key_digest", *(f.name for f in fields(Record)))
    return statement


class DecisionStatement:
    """The decision read compiled for one dialect: its SQL text, its parameters in the driver's style
    with SQLAlchemy's bind conversions, and SQLAlchemy's result conversions."""

    def __init__(self, dialect: Dialect) -> None:
        statement = _decision_statement(dialect)
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        self._postgresql = dialect.name == "postgresql"
        self._names: tuple[str, ...] | None = (
            tuple(compiled.positiontup) if compiled.positional and compiled.positiontup is not None else None)
        self._fixed = {k: v for k, v in compiled.params.items() if v is not None}
        self._binds = {name: bind.type.dialect_impl(dialect).bind_processor(dialect)
                       for name, bind in compiled.binds.items() if name in compiled.params}
        self._dialect = dialect
        self._types = tuple(c.type.dialect_impl(dialect) for c in statement.selected_columns)
        self._results: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}

    @staticmethod
    @lru_cache(maxsize=8)
    def get(dialect: Dialect) -> DecisionStatement:
        return DecisionStatement(dialect)

    def parameters(self, *, devices: Sequence[str], digests: Sequence[str], booked_at: datetime,
                   evidence_at: datetime, ttl_s: float) -> dict[str, Any] | tuple[Any, ...]:
        if not ttl_s > 0:
            raise InputError(f"evidence TTL must be positive, got {ttl_s}", field="ttl_s")
        if len(devices) > MAX_BATCH or len(digests) > MAX_BATCH:
            raise ValueError(f"one decision read takes at most {MAX_BATCH} devices and key digests")
        at = to_utc(evidence_at)
        values: dict[str, Any] = {**self._fixed, "booked_at": to_utc(booked_at), "evidence_at": at,
                                  "oldest": at - timedelta(seconds=ttl_s)}
        for name, process in self._binds.items():
            if process is not None and name in values:
                values[name] = process(values[name])
        if self._postgresql:
            values["devices"], values["digests"] = list(devices), list(digests)
        else:
            values["devices"], values["digests"] = json.dumps(list(devices)), json.dumps(list(digests))
        return values if self._names is None else tuple(values[n] for n in self._names)

    def _processors(self, codes: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Each column's result conversion for the driver's column types (``type_codes``: some
        conversions depend on the type the server sent), or ``None`` when no column needs one."""
        if codes not in self._results:
            found = tuple(t.result_processor(self._dialect, code) for t, code in zip(self._types, codes, strict=True))
            self._results[codes] = found if any(p is not None for p in found) else None
        return self._results[codes]

    def rows(self, raw: Sequence[Sequence[Any]], codes: tuple[Any, ...]) -> DecisionRows:
        """The driver's rows (with their columns' ``type_codes``) as bookings by device and candidate
        rows by key digest, newest first."""
        results = self._processors(codes)
        booked: dict[str, int] = {}
        by_key: dict[str, list[Record]] = {}
        for r in raw:
            if results is not None:
                r = tuple(v if p is None or v is None else p(v) for p, v in zip(results, r, strict=True))
            if r[0] is not None:
                booked[r[0]] = int(r[1] or 0)
            else:
                by_key.setdefault(r[2], []).append(Record(*r[3:]))
        return DecisionRows(booked, by_key)


class DecisionRows(NamedTuple):
    """What one decision read found: bytes booked by device (a device without bookings is absent),
    and candidate rows by key digest (a digest without candidates is absent)."""

    booked: dict[str, int]
    rows: dict[str, list[Record]]


def type_codes(cursor: Any) -> tuple[Any, ...]:
    """The type code of each column of the cursor's result (``cursor.description``'s second item),
    read from psycopg's result directly where there is one: ``description`` builds a column object per
    column on every call, which cost more than the rest of a decision's read."""
    result = getattr(cursor, "pgresult", None)
    if result is not None:
        return tuple(result.ftype(i) for i in range(result.nfields))
    return tuple(d[1] for d in cursor.description)


def decision_read(
    connection: Session | Connection,
    *,
    device_id: str,
    keys: Sequence[PairKey],
    booked_at: datetime,
    evidence_at: datetime,
    ttl_s: float,
) -> tuple[int, dict[str, list[Record]]]:
    """What one admission reads, in one statement: the memory booked on ``device_id`` at ``booked_at``
    (``reservations.reserved_bytes``'s sum) and, for each of ``keys``, its candidate evidence rows at
    ``evidence_at`` (``lookup``'s selection: current, unexpired, within ``ttl_s``), by key digest.

    One statement is one snapshot of the store on PostgreSQL and SQLite alike, so the bookings and the
    evidence are of the same instant without a transaction around them, and one round trip instead of
    BEGIN, one statement per read and COMMIT. It runs on the connection's driver connection
    (``DecisionStatement``; ``read_batch`` for several decisions at once). Pool each key's rows with
    ``pool_candidates``."""
    found = read_batch(connection, devices=[device_id], digests=sorted({key_digest(k) for k in keys}),
                       booked_at=booked_at, evidence_at=evidence_at, ttl_s=ttl_s)
    return found.booked.get(device_id, 0), found.rows


def read_batch(
    connection: Session | Connection,
    *,
    devices: Sequence[str],
    digests: Sequence[str],
    booked_at: datetime,
    evidence_at: datetime,
    ttl_s: float,
) -> DecisionRows:
    """The decision read of several decisions in one statement: the bookings of ``devices`` and the
    candidate rows of the key ``digests`` (``key_digest``)."""
    if isinstance(connection, Session):
        connection = connection.connection()
    statement = DecisionStatement.get(connection.dialect)
    params = statement.parameters(devices=devices, digests=digests, booked_at=booked_at, evidence_at=evidence_at,
                                  ttl_s=ttl_s)
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None
    try:
        cursor = dbapi.cursor()
        try:
            cursor.execute(statement.sql, params)
            raw, codes = cursor.fetchall(), type_codes(cursor)
        finally:
            cursor.close()
    except connection.dialect.loaded_dbapi.Error as err:
        raise _wrapped(err, connection, statement.sql, params) from err
    return statement.rows(raw, codes)


def _wrapped(err: Any, connection: Connection, sql: str, params: Any) -> BaseException:
    """The driver's error as SQLAlchemy raises it from ``execute`` (``DBAPIError`` and its subclasses,
    so callers translate it as any other store error); a lost connection is invalidated, so the pool
    replaces it rather than hand it out again."""
    dialect = connection.dialect
    lost = bool(dialect.is_disconnect(err, connection.connection.dbapi_connection, None))
    if lost:
        connection.invalidate(err)
    wrapped: BaseException = sa_exc.DBAPIError.instance(sql, params, err, dialect.loaded_dbapi.Error,
                                                        connection_invalidated=lost, dialect=dialect)
    return wrapped


async def read_batch_async(
    connection: Any,
    dialect: Dialect,
    *,
    devices: Sequence[str],
    digests: Sequence[str],
    booked_at: datetime,
    evidence_at: datetime,
    ttl_s: float,
) -> DecisionRows:
    """``read_batch`` on an asynchronous driver connection (psycopg's ``AsyncConnection``), for a
    caller on an event loop: the same statement, parameters and conversions, without a thread."""
    statement = DecisionStatement.get(dialect)
    params = statement.parameters(devices=devices, digests=digests, booked_at=booked_at, evidence_at=evidence_at,
                                  ttl_s=ttl_s)
    cursor = await connection.execute(statement.sql, params)
    return statement.rows(await cursor.fetchall(), type_codes(cursor))
