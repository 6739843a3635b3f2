"""Paths into the repository and the workspace's shared data, and running the CLI as a user would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# The workspace's shared folder sits beside the project (``../shared``); a clone elsewhere has none.
SHARED = ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"


def shared_data(relative: str) -> Path:
    """``../shared/data/<relative>``, or skip the calling test saying what is missing and why.

    The data sets there (production traces, published measurements) live outside the project: a
    clone outside this workspace does not have them, and its test run must say so, not fail.
    """
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(
            f"needs ../shared/data/{relative} (outside the project; present only in the canary "
            f"workspace, see its README there): {path} is absent"
        )
    return path


def canary_cmd() -> list[str]:
    """The installed console script when present, else the module (same code either way)."""
    script = Path(sys.executable).parent / "canary"
    return [str(script)] if script.exists() else [sys.executable, "-m", "canary.cli"]


def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose default evidence store lives in tmp_path, never in the user's home. The
    catalog cache follows ``XDG_CACHE_HOME``, which the session fixture in ``tests/conftest.py`` points at
    a temporary folder outside every test's tmp_path (tests that list their folder see only their files)."""
    env = dict(os.environ)
    env["CANARY_DB_URL"] = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    return env
