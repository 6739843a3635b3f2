"""Engine, sessions, retries and the schema check, on real SQLite files and the real PostgreSQL server."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, exc, text
from sqlalchemy.orm import Session

from canary.errors import InputError, SchemaOutOfDate, StoreUnavailable
from evidence_store import database as store_database
from evidence_store.database import (
    RetryPolicy,
    is_transient,
    make_engine,
    normalize_url,
    redact,
    run_transaction,
    session_scope,
)
from evidence_store.errors import TransientStoreError
from evidence_store.location import default_db_url
from evidence_store.migrate import check_schema, upgrade
from tests.evidence_store.evidence_store_testkit import FAST_RETRY
from tests.support.helpers import free_port


def test_default_url_prefers_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CANARY_DB_URL", "postgresql://fleet@db.internal/canary")
    assert default_db_url() == "postgresql://fleet@db.internal/canary"
    monkeypatch.delenv("CANARY_DB_URL")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_url() == f"sqlite:///{tmp_path / 'canary' / 'evidence.sqlite3'}"


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("sqlite:///x.db", "sqlite"),
    ],
)
def test_urls_map_to_supported_drivers(given: str, driver: str) -> None:
    assert normalize_url(given).drivername == driver


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("mysql://u@h/db", "unsupported database"),
        ("postgresql+psycopg2://u@h/db", "not supported"),
        ("not a url", "not a URL"),
        ("postgresql://u:pw@h:abc/db", "cannot parse"),
        ("", "is empty"),
        ("sqlite://u:pw@h/x.db", "names a file"),
    ],
)
def test_bad_urls_are_input_errors(given: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as info:
        normalize_url(given)
    assert info.value.field == "--db"


def test_redact_removes_the_password() -> None:
    shown = redact("postgresql://canary:hunter2@db.internal:5432/evidence")
    assert "hunter2" not in shown
    assert "canary" in shown and "db.internal:5432/evidence" in shown
    assert "hunter2" not in redact("postgresql://canary:hunter2@[broken")


def test_unreachable_store_names_the_url_without_password_after_retries() -> None:
    port = free_port()
    url = f"postgresql://postgres:s3cret@127.0.0.1:{port}/evidence"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        make_engine(url, retry=RetryPolicy(attempts=3, initial_wait_s=0.05, max_wait_s=0.1))
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert f"127.0.0.1:{port}/evidence" in message
    assert "s3cret" not in message
    assert "after 3 attempts" in message
    assert not isinstance(info.value, TransientStoreError)
    assert elapsed >= 0.1  # two waits happened: it retried
    assert info.value.exit_code == 4


def test_sqlite_in_missing_directory_is_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'e.sqlite3'}"
    with pytest.raises(InputError, match="does not exist") as info:
        make_engine(url, retry=FAST_RETRY)
    assert info.value.field == "--db"
    assert not (tmp_path / "no").exists()


def test_unopenable_sqlite_file_is_unavailable_not_retried(tmp_path: Path) -> None:
    (tmp_path / "e.sqlite3").mkdir()  # a directory where the file should be
    with pytest.raises(InputError, match="not a regular file"):
        make_engine(f"sqlite:///{tmp_path / 'e.sqlite3'}", retry=FAST_RETRY)


def test_sqlite_connections_use_wal_foreign_keys_and_busy_timeout(tmp_path: Path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'e.sqlite3'}", sqlite_busy_timeout_s=1.5)
    with eng.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1500
    eng.dispose()


def _locked_error(tmp_path: Path) -> exc.OperationalError:
    path = tmp_path / "lock.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        waiter.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as err:
        return exc.OperationalError("BEGIN IMMEDIATE", None, err)
    finally:
        holder.close()
        waiter.close()
    raise AssertionError("the second writer was not locked out")


def _integrity_error() -> exc.IntegrityError:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    try:
        conn.execute("INSERT INTO t VALUES (1)")
    except sqlite3.IntegrityError as err:
        return exc.IntegrityError("INSERT", None, err)
    raise AssertionError("no integrity error")


def test_transient_classification_on_real_errors(tmp_path: Path) -> None:
    locked = _locked_error(tmp_path)
    assert "database is locked" in str(locked)
    assert is_transient(locked)
    assert not is_transient(_integrity_error())


def test_session_scope_commits_once_or_rolls_back(engine: Engine) -> None:
    with session_scope(engine) as session:
        session.execute(
            text("INSERT INTO devices (device_id, first_reserved_at) VALUES ('gpu-a', '2026-11-30 06:00:00')")
        )
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        session.execute(
            text("INSERT INTO devices (device_id, first_reserved_at) VALUES ('gpu-b', '2026-11-30 06:00:00')")
        )
        raise RuntimeError("use case failed after the write")
    with session_scope(engine, read_only=True) as session:
        ids = session.scalars(text("SELECT device_id FROM devices ORDER BY device_id")).all()
    assert ids == ["gpu-a"]


def test_integrity_violation_is_input_error_not_retried(engine: Engine) -> None:
    calls = []

    def write(session: Session) -> None:
        calls.append(1)
        session.execute(
            text("INSERT INTO devices (device_id, first_reserved_at) VALUES ('gpu-a', '2026-11-30 06:00:00')")
        )

    run_transaction(engine, write, retry=FAST_RETRY)
    with pytest.raises(InputError, match="refused the write"):
        run_transaction(engine, write, retry=FAST_RETRY)
    assert len(calls) == 2  # one call each: the violation was not retried


def test_sqlite_writers_queue_and_run_transaction_retries_a_locked_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.sqlite3'}"
    upgrade(url)
    holder = make_engine(url)
    impatient = make_engine(url, sqlite_busy_timeout_s=0.02)
    held = threading.Event()

    def hold_write_lock() -> None:
        with session_scope(holder) as session:
            session.execute(
                text("INSERT INTO devices (device_id, first_reserved_at) VALUES ('a', '2026-11-30 06:00:00')")
            )
            held.set()
            time.sleep(0.4)

    thread = threading.Thread(target=hold_write_lock)
    thread.start()
    held.wait(5)
    with pytest.raises(TransientStoreError, match="database is locked"), session_scope(impatient) as session:
        session.execute(text("SELECT 1"))
    attempts = []

    def write(session: Session) -> int:
        attempts.append(1)
        return int(session.execute(text("SELECT count(*) FROM devices")).scalar_one())

    seen = run_transaction(
        impatient, write, retry=RetryPolicy(attempts=12, initial_wait_s=0.05, max_wait_s=0.2)
    )
    thread.join()
    assert seen == 1  # it ran after the holder committed
    assert len(attempts) >= 1
    holder.dispose()
    impatient.dispose()


def test_check_schema_empty_older_current_and_unknown(empty_url: str) -> None:
    eng = make_engine(empty_url, retry=FAST_RETRY)
    try:
        with pytest.raises(SchemaOutOfDate, match="no schema yet: run canary db upgrade"):
            check_schema(eng)
        upgrade(empty_url, "5e1d0c3a9b21")
        with pytest.raises(SchemaOutOfDate, match=r"older than .*run canary db upgrade") as info:
            check_schema(eng)
        assert info.value.exit_code == 4
        upgrade(empty_url)
        check_schema(eng)
        with eng.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'ffffffffffff'"))
        with pytest.raises(SchemaOutOfDate, match="does not know"):
            check_schema(eng)
    finally:
        eng.dispose()


def test_default_retry_is_bounded() -> None:
    policy = store_database.DEFAULT_RETRY
    worst_wait_s = sum(
        min(policy.initial_wait_s * 2**i, policy.max_wait_s) for i in range(policy.attempts - 1)
    )
    assert worst_wait_s < 10
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
