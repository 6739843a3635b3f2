"""Fixtures every test package uses. Shared helpers live in ``tests/support/``; the names below stay
importable from here for tests written against them."""

from __future__ import annotations

import pytest

from tests.support.paths import EXAMPLES, ROOT, SHARED, SHARED_DATA, canary_cmd, cli_env, shared_data

__all__ = ["EXAMPLES", "ROOT", "SHARED", "SHARED_DATA", "canary_cmd", "cli_env", "shared_data"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
