"""Shared fixtures: paths into the repository and the shared data folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARED = ROOT.parent / "shared"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def canary_cmd() -> list[str]:
    """The installed console script when present, else the module (same code either way)."""
    script = Path(sys.executable).parent / "canary"
    return [str(script)] if script.exists() else [sys.executable, "-m", "canary.cli"]


def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose default evidence store lives in tmp_path, never in the user's home."""
    env = dict(os.environ)
    env["CANARY_DB_URL"] = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    return env
