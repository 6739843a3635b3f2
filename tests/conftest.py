"""Fixtures every test package uses. Shared helpers live in ``tests/support/``; the names below stay
importable from here for tests written against them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.paths import EXAMPLES, ROOT, SHARED, SHARED_DATA, canary_cmd, cli_env, shared_data

__all__ = ["EXAMPLES", "ROOT", "SHARED", "SHARED_DATA", "canary_cmd", "cli_env", "shared_data"]


@pytest.fixture(scope="session", autouse=True)
def _caches_outside_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The device-catalog cache (``platformdirs.user_cache_dir``) of in-process code and of every
    subprocess that inherits this environment goes to a temporary folder, not the user's home."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
