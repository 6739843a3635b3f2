"""The store's schema, only through the Alembic migrations in ``migrations/``.

* ``check_schema(engine)`` raises ``SchemaOutOfDate`` when the store is not at the newest migration:
  the store is never migrated silently; ``canary db upgrade`` does that. ``open_store`` is
  ``make_engine`` + ``check_schema``.
* ``upgrade``, ``downgrade``, ``current``: Alembic's commands on a store, each in one transaction, with
  an Alembic configuration built in code (``alembic_config``), so migrations run from an installed package.

Alembic is imported inside the functions that need it: a store at ``SCHEMA_HEAD`` is recognised with
SQLAlchemy alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, exc, text
from sqlalchemy.engine import Connection

from canary.errors import InputError, SchemaOutOfDate, StoreUnavailable
from evidence_store.database import SQLITE_BEGIN_OPTION, RetryPolicy, make_engine, redact, translate

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

FILE_TEMPLATE = "%%(year)d-%%(month).2d-%%(day).2d_%%(rev)s_%%(slug)s"


def migrations_dir() -> Path:
    """The installed ``migrations`` package (its ``env.py`` and ``versions/``)."""
    import migrations

    return Path(migrations.__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration built in code, so it works from an installed package (no ini file needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("file_template", FILE_TEMPLATE)
    config.attributes["connection"] = connection
    return config


@lru_cache(maxsize=1)
def _script_directory() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revisions() -> tuple[str, ...]:
    """The newest migration(s) this canary knows."""
    return tuple(sorted(_script_directory().get_heads()))


def _store_revisions(conn: Connection) -> tuple[str, ...]:
    from alembic.migration import MigrationContext

    return tuple(sorted(MigrationContext.configure(conn).get_current_heads()))


#: The newest migration in ``migrations/versions``. ``check_schema`` compares a store with it before
#: importing Alembic, whose import is a large part of every command that reads a store (``gpu-fit``
#: among them); ``tests/cli/test_fit_cli.py`` checks that it is Alembic's head, so a new migration
#: cannot leave it stale.
SCHEMA_HEAD = "fa1f2187b9d5"


def _at_schema_head(conn: Connection) -> bool:
    """Whether Alembic's version table holds exactly ``SCHEMA_HEAD`` (read with SQLAlchemy alone)."""
    from sqlalchemy import inspect

    if not inspect(conn).has_table("alembic_version"):
        return False
    return list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars()) == [SCHEMA_HEAD]


def check_schema(engine: Engine) -> None:
    """Return quietly when the store is at the newest migration; else raise ``SchemaOutOfDate``
    saying what to run. Never migrates. A store at ``SCHEMA_HEAD`` is recognised without Alembic;
    any other state is read and explained by Alembic."""
    try:
        with engine.connect() as conn:
            if _at_schema_head(conn):
                return
            at = _store_revisions(conn)
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err
    heads = head_revisions()
    if at == heads:
        return
    where = redact(engine.url)
    if not at:
        raise SchemaOutOfDate(f"the evidence store at {where} has no schema yet: run canary db upgrade")
    script = _script_directory()
    known = all(_known_revision(script, rev) for rev in at)
    if not known:
        raise SchemaOutOfDate(
            f"the evidence store at {where} is at revision {', '.join(at)}, which this canary does not know "
            f"(written by a newer canary?): upgrade canary, or downgrade the store with the newer one"
        )
    raise SchemaOutOfDate(
        f"the evidence store at {where} is at revision {', '.join(at)}, older than {', '.join(heads)}: "
        f"run canary db upgrade"
    )


def _known_revision(script: ScriptDirectory, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def open_store(url: str | None = None, *, retry: RetryPolicy | None = None) -> Engine:
    """``make_engine`` + ``check_schema``: an engine for a store that is ready to use."""
    engine = make_engine(url, retry=retry)
    try:
        check_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _migrate(url: str | None, action: Callable[[Config], None], retry: RetryPolicy | None) -> None:
    from alembic.util import CommandError
    # Foreign keys off on SQLite while migrating: batch mode rebuilds tables by copy-and-rename,
    # which a referencing table would otherwise block; the check after the run restores the guarantee.
    engine = make_engine(url, retry=retry, sqlite_foreign_keys=False)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                conn = conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
            with conn.begin():
                action(alembic_config(conn))
                if engine.dialect.name == "sqlite":
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise StoreUnavailable(
                            f"migration of {redact(engine.url)} left {len(broken)} broken references "
                            f"(first: {tuple(broken[0])}); rolled back"
                        )
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err
    except CommandError as err:  # an unknown or unreachable revision: nothing was migrated (rolled back)
        raise InputError(f"{str(err).splitlines()[0]}; nothing was changed", field="REV") from err
    finally:
        engine.dispose()


def check_revision(revision: str) -> None:
    """Raise ``InputError`` unless ``revision`` is ``head``, ``heads``, ``base``, a relative step
    (``-1``, ``+2``) or a revision this canary knows."""
    if revision in ("head", "heads", "base") or re.fullmatch(r"[+-][1-9][0-9]{0,2}", revision):
        return
    script = _script_directory()
    if not re.fullmatch(r"[0-9a-f]{4,40}", revision) or not _known_revision(script, revision):
        known = ", ".join(sorted(r.revision for r in script.walk_revisions()))
        raise InputError(f"unknown revision {revision[:60]!r} (known: head, base, -N, +N, {known})", field="REV")


def upgrade(url: str | None = None, revision: str = "head", *, retry: RetryPolicy | None = None) -> None:
    """Migrate the store up to ``revision`` (default: the newest) in one transaction."""
    from alembic import command

    check_revision(revision)
    _migrate(url, lambda config: command.upgrade(config, revision), retry)


def downgrade(url: str | None, revision: str, *, retry: RetryPolicy | None = None) -> None:
    """Migrate the store down to ``revision`` (``base`` removes every table) in one transaction."""
    from alembic import command

    check_revision(revision)
    _migrate(url, lambda config: command.downgrade(config, revision), retry)


@dataclass(frozen=True, slots=True)
class DowngradePreview:
    """What ``downgrade(url, revision)`` would do, found by running it in a transaction that is rolled
    back: the revision(s) the store is at and would be at (empty: no schema), the migrations undone
    (revision, title) newest first, and what they remove or change, with row counts."""

    at: tuple[str, ...]
    to: tuple[str, ...]
    steps: tuple[tuple[str, str], ...]
    dropped_tables: tuple[tuple[str, int], ...]
    dropped_columns: tuple[tuple[str, str, int], ...]
    added_columns: tuple[tuple[str, str], ...]
    changed_rows: tuple[tuple[str, int, int], ...]


def _revision_title(script: ScriptDirectory, revision: str) -> str:
    doc = script.get_revision(revision)
    text = (doc.doc if doc is not None else "") or ""
    return text.strip().splitlines()[0] if text.strip() else "(no description)"


def _schema_counts(conn: Connection) -> dict[str, tuple[int, dict[str, int]]]:
    """Every canary table: its row count and, per column, how many rows hold a value there."""
    from sqlalchemy import inspect

    out: dict[str, tuple[int, dict[str, int]]] = {}
    inspector = inspect(conn)
    for table in sorted(inspector.get_table_names()):
        if table == "alembic_version":
            continue
        columns = [c["name"] for c in inspector.get_columns(table)]
        counts = ", ".join(f'count("{c}")' for c in columns)
        row = conn.execute(text(f'SELECT count(*), {counts} FROM "{table}"')).one()
        out[table] = (int(row[0]), {c: int(n) for c, n in zip(columns, row[1:], strict=True)})
    return out


def downgrade_preview(url: str | None, revision: str, *, retry: RetryPolicy | None = None) -> DowngradePreview:
    """Run ``downgrade(url, revision)`` in a transaction, note what it removes and changes, and roll it
    back: nothing is changed. Raises ``InputError`` for a revision the store cannot go down to."""
    from alembic import command
    from alembic.util import CommandError

    check_revision(revision)
    engine = make_engine(url, retry=retry, sqlite_foreign_keys=False)
    script = _script_directory()
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                conn = conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
            transaction = conn.begin()
            try:
                at = _store_revisions(conn)
                before = _schema_counts(conn)
                command.downgrade(alembic_config(conn), revision)
                to = _store_revisions(conn)
                after = _schema_counts(conn)
            finally:
                transaction.rollback()
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err
    except CommandError as err:
        raise InputError(f"{str(err).splitlines()[0]}; nothing was changed", field="REV") from err
    finally:
        engine.dispose()
    undone: list[str] = []
    if at:
        stop = set(to)
        for rev in script.iterate_revisions(at, to[0] if to else "base"):
            if rev.revision not in stop:
                undone.append(rev.revision)
    dropped_tables = tuple((t, n) for t, (n, _) in before.items() if t not in after)
    dropped_columns = tuple(
        (t, c, filled) for t, (_, cols) in before.items() if t in after
        for c, filled in cols.items() if c not in after[t][1]
    )
    added_columns = tuple(
        (t, c) for t, (_, cols) in after.items() if t in before for c in cols if c not in before[t][1]
    )
    changed_rows = tuple(
        (t, n, after[t][0]) for t, (n, _) in before.items() if t in after and after[t][0] != n
    )
    return DowngradePreview(
        at=at, to=to, steps=tuple((r, _revision_title(script, r)) for r in undone),
        dropped_tables=dropped_tables, dropped_columns=dropped_columns, added_columns=added_columns,
        changed_rows=changed_rows,
    )


def current(url: str | None = None, *, retry: RetryPolicy | None = None) -> tuple[str, ...]:
    """The store's revision(s); empty when it has no schema yet."""
    engine = make_engine(url, retry=retry)
    try:
        with engine.connect() as conn:
            return _store_revisions(conn)
    except exc.SQLAlchemyError as err:
        raise translate(err, engine.url) from err
    finally:
        engine.dispose()
