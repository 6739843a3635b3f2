"""Where the store lives by default. Light on purpose (no SQLAlchemy): the fast ``gpu-fit`` path
asks whether a default store exists before deciding to import anything heavier."""

from __future__ import annotations

import os
from pathlib import Path


def default_sqlite_path() -> Path:
    """Where the zero-setup store lives: ``<user data dir>/evidence.sqlite3``."""
    import platformdirs

    return Path(platformdirs.user_data_dir("canary")) / "evidence.sqlite3"


def default_db_url() -> str:
    """``$CANARY_DB_URL``, else a SQLite file in the user's data directory."""
    from_env = os.environ.get("CANARY_DB_URL")
    if from_env:
        return from_env
    return f"sqlite:///{default_sqlite_path()}"


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, ``None`` for other backends and in-memory databases."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)
