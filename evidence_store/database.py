"""Connections to the store: engines, sessions, transactions, retries, and what an error says.

* ``make_engine(url)`` builds an engine and checks that the store answers, retrying transient
  failures (connection refused or reset, serialization failure, deadlock, "database is locked")
  with bounded exponential backoff; a store that never answers raises ``StoreUnavailable`` naming
  the URL without its password. Integrity and validation errors are never retried.
* ``session_scope(engine)`` yields a session and commits once at the end, or rolls back.
  On SQLite a writing scope starts with ``BEGIN IMMEDIATE``, so concurrent writers queue on the
  database lock instead of failing half-way; a ``read_only`` scope starts with a plain ``BEGIN``.
* ``run_transaction(engine, fn)`` runs ``fn(session)`` in a scope and retries it whole on a transient
  error.

The schema (Alembic: ``check_schema``, ``upgrade``, ``open_store``) is ``evidence_store.migrate``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, exc, make_url, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.orm import Session
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from canary.errors import InputError, StoreUnavailable
from evidence_store.errors import TransientStoreError
from evidence_store.location import default_db_url, default_sqlite_path

T = TypeVar("T")

SQLITE_BEGIN_OPTION = "canary_sqlite_begin"
_PG_TRANSIENT_SQLSTATES = frozenset(
    {"40001", "40P01", "08000", "08001", "08003", "08004", "08006", "57P01", "57P02", "57P03"}
)
_TRANSIENT_MESSAGES = (
    "database is locked",
    "database table is locked",
    "connection refused",
    "connection reset",
    "server closed the connection unexpectedly",
    "could not receive data from server",
    "could not send data to server",
    "terminating connection",
    "the database system is starting up",
    "the database system is shutting down",
    "connection timed out",
    "timeout expired",
    "consuming input failed",
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to keep trying a transient failure: ``attempts`` tries in all, waits doubling from
    ``initial_wait_s`` and capped at ``max_wait_s``."""

    attempts: int = 5
    initial_wait_s: float = 0.2
    max_wait_s: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if self.initial_wait_s < 0 or self.max_wait_s < self.initial_wait_s:
            raise ValueError("RetryPolicy needs 0 <= initial_wait_s <= max_wait_s")


DEFAULT_RETRY = RetryPolicy()


def redact(url: str | URL) -> str:
    """The URL without its password, for messages. A string is redacted as written (``redact_url``:
    user-info, ``?password=`` and ``password=`` pairs, anywhere), never re-rendered, so a secret in an
    odd place is not percent-encoded past the redaction; a parsed URL is rendered with its password
    hidden, then redacted the same way."""
    from evidence_store.location import redact_url

    if isinstance(url, URL):
        return redact_url(url.render_as_string(hide_password=True))
    return redact_url(str(url))


def normalize_url(url: str) -> URL:
    """Parse a store URL; ``postgresql://`` and ``postgres://`` use psycopg 3.

    Raises ``InputError`` for an unparsable URL or a database other than SQLite and PostgreSQL.
    """
    from evidence_store.location import check_db_url

    check_db_url(url)
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as err:
        raise InputError(f"not a database URL: {redact(url)}", field="--db") from err
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise InputError(
            f"unsupported database {backend!r} in {redact(parsed)}: use sqlite:///PATH or postgresql://…",
            field="--db",
        )
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        raise InputError(
            f"PostgreSQL driver {parsed.get_driver_name()!r} is not supported; use postgresql+psycopg://",
            field="--db",
        )
    return parsed


def is_transient(error: BaseException) -> bool:
    """Whether retrying could help: lost or refused connections, serialization failures, deadlocks,
    SQLite lock timeouts. Integrity and programming errors are never transient."""
    if isinstance(error, exc.IntegrityError | exc.ProgrammingError | exc.DataError):
        return False
    orig: BaseException | None = error.orig if isinstance(error, exc.DBAPIError) else error
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if orig is None:
        return False
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate in _PG_TRANSIENT_SQLSTATES:
        return True
    if isinstance(orig, sqlite3.IntegrityError):
        return False
    message = str(orig).lower()
    return any(fragment in message for fragment in _TRANSIENT_MESSAGES)


def short_error(error: BaseException) -> str:
    """The first line of what a store error (or the driver error inside it) says."""
    orig = error.orig if isinstance(error, exc.DBAPIError) else error
    first = str(orig).strip().splitlines()
    return first[0] if first else type(orig).__name__


def _without_password(text: str, url: str | URL) -> str:
    """``text`` with the URL's password (as given and percent-encoded) replaced by ``***``, should a
    driver's message ever repeat it."""
    if isinstance(url, URL):
        secret = url.password
    else:
        try:
            secret = make_url(url).password
        except (exc.ArgumentError, ValueError):
            secret = None
    if not secret:
        return text
    from urllib.parse import quote

    for form in {str(secret), quote(str(secret), safe="")}:
        text = text.replace(form, "***")
    return text


def translate(error: exc.SQLAlchemyError, url: str | URL) -> Exception:
    """A SQLAlchemy error as the project error a caller can act on; no message holds the password."""
    where = redact(url)
    said = _without_password(short_error(error), url)
    if isinstance(error, exc.IntegrityError):
        return InputError(f"the evidence store at {where} refused the write: {said}")
    if is_transient(error):
        return TransientStoreError(f"evidence store {where} is unavailable: {said}")
    return StoreUnavailable(f"evidence store {where} failed: {said}")


def _install_sqlite_hooks(engine: Engine, *, busy_timeout_s: float, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (see _on_begin): pysqlite's own implicit BEGIN is DEFERRED
        # and comes too late for the lock a reservation needs.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
            # WAL with synchronous=NORMAL survives a killed process without losing a commit.
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


#: A pooled PostgreSQL connection idle for longer than this is pinged (``SELECT 1``) when it is checked
#: out, and replaced if the ping fails; one used more recently is handed out as it is.
PING_AFTER_IDLE_S = 1.0


def _install_idle_ping(engine: Engine, after_s: float) -> None:
    """Pessimistic disconnect handling for connections that sat idle in the pool: a server restart, an
    idle timeout or a dropped network path all happen while a connection waits there, so one idle for
    more than ``after_s`` is pinged before use, and discarded (the pool connects anew) when the ping
    fails. ``pool_pre_ping`` pinged every checkout, a round trip and 0.1–0.3 ms of CPU on each admission
    of a busy server whose connections are never idle that long. A connection that dies while busy
    fails its statement as before (a transient store error) and SQLAlchemy then invalidates the pool."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["canary_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("canary_idle_since")
        if since is None or time.monotonic() - since <= after_s:
            return  # a new connection, or one in use a moment ago
        try:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
            dbapi_connection.rollback()  # end the ping's implicit transaction (psycopg is not autocommit)
        except Exception as err:  # any failure: the pool discards this connection and connects anew
            raise exc.DisconnectionError(f"idle connection failed its ping: {err}") from err


def make_engine(
    url: str | None = None,
    *,
    retry: RetryPolicy | None = None,
    sqlite_busy_timeout_s: float = 30.0,
    sqlite_foreign_keys: bool = True,
    check_connection: bool = True,
) -> Engine:
    """An engine for ``url`` (default: ``default_db_url()``), checked to answer.

    SQLite: WAL journal, foreign keys on, a busy timeout, SQLAlchemy-controlled ``BEGIN``.
    PostgreSQL: psycopg 3, a ping for connections idle in the pool (``_install_idle_ping``), a connect
    timeout.
    Raises ``InputError`` for a bad URL and ``StoreUnavailable`` when the store does not answer
    after ``retry`` attempts.
    """
    raw = url or default_db_url()
    parsed = normalize_url(raw)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and Path(database) == default_sqlite_path():
            # The zero-setup store: its directory may not exist yet on a fresh machine.
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": sqlite_busy_timeout_s})
        _install_sqlite_hooks(engine, busy_timeout_s=sqlite_busy_timeout_s, foreign_keys=sqlite_foreign_keys)
    else:
        engine = create_engine(parsed, connect_args={"connect_timeout": 5})
        _install_idle_ping(engine, PING_AFTER_IDLE_S)
    if check_connection:
        try:
            _retrying(lambda: _ping(engine), url=parsed, retry=retry or DEFAULT_RETRY)
        except BaseException:
            engine.dispose()
            raise
    return engine


def _ping(engine: Engine) -> None:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err


def _retrying(fn: Callable[[], T], *, url: str | URL, retry: RetryPolicy) -> T:
    retrying = Retrying(
        stop=stop_after_attempt(retry.attempts),
        wait=wait_exponential(
            multiplier=retry.initial_wait_s, min=retry.initial_wait_s, max=retry.max_wait_s
        ),
        retry=retry_if_exception_type(TransientStoreError),
        reraise=False,
    )
    try:
        return retrying(fn)
    except RetryError as err:
        last = err.last_attempt.exception()
        detail = str(last) if last is not None else "no answer"
        raise StoreUnavailable(f"{detail} (gave up after {retry.attempts} attempts)") from last


@contextmanager
def session_scope(engine: Engine, *, read_only: bool = False) -> Iterator[Session]:
    """A session that commits once when the block ends, or rolls back if it raises.

    A writing scope on SQLite takes the database write lock at ``BEGIN IMMEDIATE``; a ``read_only``
    scope does not lock (and must not write). SQLAlchemy errors leave as project errors:
    ``TransientStoreError`` (retry may help), ``StoreUnavailable``, or ``InputError`` for a write the
    store's constraints refused.
    """
    bind = engine if read_only else engine.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
    session = Session(bind=bind, expire_on_commit=False, autoflush=True)
    try:
        yield session
        session.commit()
    except exc.SQLAlchemyError as err:
        _rollback_quietly(session)
        raise translate(err, engine.url) from err
    except BaseException:
        _rollback_quietly(session)
        raise
    finally:
        session.close()


def _rollback_quietly(session: Session) -> None:
    # The original error is the one worth reporting; a rollback on a dead connection only adds noise
    # (the server rolls the transaction back when the connection goes away).
    with contextlib.suppress(exc.SQLAlchemyError):
        session.rollback()


def run_transaction(
    engine: Engine, fn: Callable[[Session], T], *, read_only: bool = False, retry: RetryPolicy | None = None
) -> T:
    """``fn(session)`` in one ``session_scope``, retried whole on a transient error.

    ``fn`` must be safe to run again (every store write is). Raises ``StoreUnavailable`` when the
    attempts are spent.
    """

    def attempt() -> T:
        with session_scope(engine, read_only=read_only) as session:
            return fn(session)

    return _retrying(attempt, url=engine.url, retry=retry or DEFAULT_RETRY)
