"""What the journey tests share: ``canary`` run as the user runs it (the installed script, a timeout on
every call, never a traceback), a private migrated PostgreSQL database (skips, saying why, when the
server at 127.0.0.1:5432 is unreachable), and reads of the store through the CLI's ``--json`` listings.

A journey walks one user's path end to end with real processes; each step's expectation is derived
from the inputs (NVIDIA's MIG placement tables, memory arithmetic), written next to the step.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.evidence_store.conftest import PgServer, _need_pg, pg_server
from tests.support.paths import EXAMPLES, ROOT, canary_cmd, cli_env

__all__ = ["EXAMPLES", "ROOT", "Canary", "pg_server", "pg_url"]

STEP_TIMEOUT_S = 120.0


class Canary:
    """``canary --db URL …`` as a subprocess of the installed script, in ``cwd``, with a timeout."""

    def __init__(self, db_url: str, tmp_path: Path) -> None:
        self.db_url = db_url
        self.cwd = tmp_path
        self.env = cli_env(tmp_path)
        self.env["CANARY_DB_URL"] = db_url

    def run(self, *args: str | Path, want: int | Sequence[int] | None = None,
            timeout_s: float = STEP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        argv = [*canary_cmd(), "--db", self.db_url, *(str(a) for a in args)]
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=timeout_s)
        where = f"canary {' '.join(str(a) for a in args)}"
        assert "Traceback" not in done.stderr, f"{where}: a traceback\n{done.stderr[-3000:]}"
        if want is not None:
            wanted = (want,) if isinstance(want, int) else tuple(want)
            assert done.returncode in wanted, (
                f"{where}: exit {done.returncode}, wanted {wanted}\nstdout: {done.stdout[:600]}\n"
                f"stderr: {done.stderr[-2000:]}")
        return done

    def json(self, *args: str | Path, want: int | Sequence[int] | None = None,
             timeout_s: float = STEP_TIMEOUT_S) -> tuple[int, Any]:
        done = self.run(*args, "--json", want=want, timeout_s=timeout_s)
        try:
            return done.returncode, json.loads(done.stdout)
        except json.JSONDecodeError as err:
            raise AssertionError(f"canary {' '.join(map(str, args))} --json printed no JSON ({err}): "
                                 f"{done.stdout[:500]!r}; stderr {done.stderr[-1000:]}") from None

    def evidence(self, *filters: str) -> list[dict[str, Any]]:
        """Evidence records in the store, every status unless ``filters`` say otherwise
        (``canary evidence list --limit 0 --json``)."""
        return list(self.json("evidence", "list", "--limit", "0", *filters, want=0)[1])


def finding(cert: dict[str, Any], resource: str) -> dict[str, Any]:
    found = [f for f in cert["findings"] if f["resource"] == resource]
    assert len(found) == 1, f"certificate has {len(found)} '{resource}' finding(s): {cert['findings']}"
    return found[0]


@pytest.fixture
def pg_url(pg_server: PgServer | None) -> str:
    """A PostgreSQL database migrated to head, private to the test."""
    return _need_pg(pg_server).migrated()


class Steps:
    """A journey's steps, each checked on its own: a failed step is recorded and the journey goes on
    (later steps still run against what the store holds), so one run names every broken step. The test
    fails at the end with all of them."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def step(self, name: str) -> _Step:
        return _Step(self, name)

    def verify(self) -> None:
        if self.failed:
            pytest.fail(f"{len(self.failed)} step(s) of the journey failed:\n\n" + "\n\n".join(self.failed),
                        pytrace=False)


class _Step:
    def __init__(self, steps: Steps, name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, (AssertionError, subprocess.TimeoutExpired, KeyError, IndexError, TypeError)):
            text = str(exc)
            if len(text) > 1800:  # the head says what was run, the tail how it ended (a traceback's last line)
                text = f"{text[:900]}\n  …\n{text[-900:]}"
            self.steps.failed.append(f"[{self.name}] {type(exc).__name__}: {text}")
            return True
        return False


@pytest.fixture
def steps() -> Steps:
    return Steps()
