"""Fixtures: every store test runs on SQLite (a file in a temporary directory) and on the real
PostgreSQL server at 127.0.0.1:5432 (trust auth, user ``postgres``).

PostgreSQL: every database this session creates is uniquely named (pid + random suffix) and dropped at
the end, so parallel runs never collide. Store tests share one migrated database, emptied before each
test; migration tests get an empty database of their own. The PostgreSQL cases skip, saying why, only when the server cannot be reached.

SQLite stores migrated to head are copies of one template the session migrated (tests/support/stores.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from evidence_store.database import make_engine
from evidence_store.migrate import upgrade
from tests.evidence_store.evidence_store_testkit import FAST_RETRY
from tests.support.stores import migrated_sqlite

PG_HOST = os.environ.get("CANARY_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CANARY_TEST_PG_PORT", "5432"))


def _pg_admin() -> Any:
    import psycopg

    return psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True, connect_timeout=3
    )


@dataclass
class PgServer:
    prefix: str
    created: list[str]
    shared: str | None = None
    template: str | None = None

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{dbname}"

    def create(self) -> str:
        """A new empty database owned by this test session."""
        name = f"{self.prefix}_{len(self.created)}"
        with _pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.url(name)

    def migrated(self) -> str:
        """A new database migrated to head, private to the caller: a copy (``CREATE DATABASE …
        TEMPLATE``) of one database this session migrated with the real chain, nobody connected to it."""
        if self.template is None:
            url = self.create()
            upgrade(url)
            self.template = self.created[-1]
        name = f"{self.prefix}_{len(self.created)}"
        with _pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.created.append(name)
        return self.url(name)

    def clean_store(self) -> str:
        """The session's migrated database, emptied of rows (faster than a database per test).

        Every table but ``alembic_version`` is emptied with DELETE in one transaction, foreign-key
        triggers off for it (``session_replication_role``): on tables of a few rows that takes
        milliseconds where TRUNCATE (new files for every table, synced at commit) takes a few hundred."""
        if self.shared is None:
            self.shared = self.create()
            upgrade(self.shared)
        import psycopg

        with psycopg.connect(self.shared, autocommit=True) as conn:
            tables = [row[0] for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename <> 'alembic_version' ORDER BY tablename")]
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")
                for table in tables:
                    conn.execute(f'DELETE FROM "{table}"')
        return self.shared


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | None]:
    try:
        conn = _pg_admin()
    except Exception:  # any failure to connect means: no server for this run (tests say why)
        yield None
        return
    conn.close()
    server = PgServer(prefix=f"canary_test_{os.getpid()}_{uuid.uuid4().hex[:8]}", created=[])
    try:
        yield server
    finally:
        _drop_all(server.created)


def _drop_all(names: list[str]) -> None:
    """Drop the session's databases from several connections at once. Every DROP DATABASE waits for a
    checkpoint of the whole server; drops issued together share one instead of paying one each."""

    def drop(name: str) -> None:
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    with ThreadPoolExecutor(max_workers=16) as pool:  # well under max_connections (100)
        for done in [pool.submit(drop, name) for name in names]:
            done.result()  # a drop that fails says so at the end of the session


def _need_pg(pg_server: PgServer | None) -> PgServer:
    if pg_server is None:
        try:
            _pg_admin().close()
            reason = "PostgreSQL became reachable only after the session started"
        except Exception as err:
            reason = f"PostgreSQL at {PG_HOST}:{PG_PORT} is unreachable: {err}"
        pytest.skip(reason)
    return pg_server


# The store's own tests run on both backends in the fast set: their PostgreSQL cases share one migrated
# database, emptied per test in milliseconds.
STORE_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]

# What tests/serve (and tests/agent through it) parametrise over: there a PostgreSQL case creates a
# database of its own and starts a server or agent process on it, seconds a case, so those cases are
# slow (``make test``); their SQLite twins stay in the fast set.
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=[pytest.mark.postgres, pytest.mark.slow]),
]


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, tmp_path: Path, pg_server: PgServer | None) -> str:
    """A store with no schema at all."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    return _need_pg(pg_server).create()


@pytest.fixture
def store_url(backend: str, tmp_path: Path, pg_server: PgServer | None) -> str:
    """A store migrated to head, private to the test."""
    if backend == "sqlite":
        return migrated_sqlite(tmp_path / "evidence.sqlite3")
    return _need_pg(pg_server).clean_store()


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url, retry=FAST_RETRY)
    yield eng
    eng.dispose()
