"""Alembic environment: migrations run on the connection the caller passes in
(``config.attributes["connection"]``), or on a fresh engine for the configured store."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from evidence_store.metadata import METADATA

target_metadata = METADATA


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection: Connection | None = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from evidence_store.database import make_engine
    from evidence_store.location import default_db_url

    url = context.config.get_main_option("sqlalchemy.url") or default_db_url()
    engine = make_engine(url, sqlite_foreign_keys=False)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: run them against the store")
run_migrations_online()
