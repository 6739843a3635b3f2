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


# The fast set (``make check``: ``-m "not slow"``) stays under a minute only while every test in it
# takes well under SLOW_S alone. Nothing fails on time (a busy machine makes anything slow); the
# summary below names the unmarked tests that took longer in this run, to mark them
# ``@pytest.mark.slow`` or give them a cheaper fixture (tests/README.md).
SLOW_S = 3.0
_unmarked_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "slow" not in report.keywords:
        _unmarked_durations[report.nodeid] = _unmarked_durations.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    over = sorted(((d, n) for n, d in _unmarked_durations.items() if d > SLOW_S), reverse=True)
    if not over:
        return
    terminalreporter.write_sep("-", f"{len(over)} test(s) without @pytest.mark.slow took over {SLOW_S:g} s")
    for duration, nodeid in over:
        terminalreporter.write_line(f"{duration:6.2f}s {nodeid}")
    terminalreporter.write_line("(setup + call + teardown, this run; on a busy machine every figure is larger. "
                                "Over ~3 s on an idle one: mark it slow or make its fixture cheaper.)")
