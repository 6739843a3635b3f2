"""Migrated SQLite stores without running the migration chain once per test.

The first call in a test process runs the real Alembic chain (``evidence_store.migrate.upgrade``) on a
template file in a folder of the session; every call copies that file (SQLite's backup API: a
consistent snapshot whatever the journal state). The copy holds exactly the rows and schema the chain
made, so a test gets the same store it would get from ``upgrade`` on an empty file, in milliseconds
instead of half a second. Tests *of* the migrations (tests/evidence_store/test_store_migrations.py,
``db upgrade`` through the CLI) still run the chain themselves.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

__all__ = ["migrated_sqlite"]

_lock = threading.Lock()
_template: Path | None = None


def _migrated_template() -> Path:
    global _template
    with _lock:
        if _template is None:
            from evidence_store.migrate import upgrade

            folder = Path(tempfile.mkdtemp(prefix="canary-test-template-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            path = folder / "head.sqlite3"
            upgrade(f"sqlite:///{path}")
            _template = path
        return _template


def migrated_sqlite(path: Path) -> str:
    """A SQLite store at ``path`` migrated to head (``path`` must not exist yet); its URL."""
    if path.exists():
        raise FileExistsError(f"{path} exists: migrated_sqlite makes a new store, it never overwrites one")
    source = sqlite3.connect(f"file:{_migrated_template()}?mode=ro", uri=True)
    target = sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return f"sqlite:///{path}"
