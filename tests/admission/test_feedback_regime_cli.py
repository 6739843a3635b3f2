"""``canary feedback`` reports a violation for an *admitted* pair, so without ``--regime`` it records it
under the regime the pair's stored admission on this device was decided under — as ``POST /v1/feedback``
does — not the regime canary would choose now (mps:30 on g-nccl-mps-room: the candidate's own active-thread
percentage). It says which regime it used and why; admitted under several regimes, it
refuses (exit 2, naming ``--regime``) and records nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from canary.errors import EXIT_ADMIT, EXIT_BAD_INPUT
from tests.security.adversarial import store_digest
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env
from tests.support.stores import migrated_sqlite

pytestmark = pytest.mark.slow

SNAPSHOT = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def _production_regimes(url: str) -> list[str]:
    conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("select regime from evidence where source = 'production'")]
    finally:
        conn.close()


def test_feedback_takes_the_regime_of_the_stored_admission(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    env = cli_env(tmp_path)

    def canary(*argv: str):  # type: ignore[no-untyped-def]
        return run_in_process(["--db", url, *argv], capsys=capsys, monkeypatch=monkeypatch, env=env)

    feedback = ("feedback", SNAPSHOT, PROFILE, "--resident-name", "comms")
    # Nothing admitted yet: the regime canary chooses, and the answer says so.
    none = canary(*feedback)
    assert none.returncode == 0, none.stderr
    assert "no admission of this pair on this device is stored" in none.stdout
    chosen = _production_regimes(url)
    assert len(chosen) == 1 and chosen[0] != "mps:50", chosen  # canary's own choice, not the admitted one

    admitted = canary("admit", SNAPSHOT, PROFILE, "--regime", "mps:50", "--quiet")
    assert admitted.returncode == EXIT_ADMIT, admitted.stdout + admitted.stderr
    out = canary(*feedback)
    assert out.returncode == 0, out.stderr
    assert "under regime mps:50" in out.stdout and "stored admission" in out.stdout, out.stdout
    assert _production_regimes(url)[1:] == ["mps:50"]

    # Given, --regime is used as it is.
    given = canary(*feedback, "--regime", "mps:50")
    assert given.returncode == 0 and "given with --regime" in given.stdout, given.stdout + given.stderr

    # Admitted under a second regime too: which one production saw is not canary's to guess.
    second = canary("admit", SNAPSHOT, PROFILE, "--regime", "mps:20", "--quiet")
    assert second.returncode == EXIT_ADMIT, second.stdout + second.stderr
    before = store_digest(url)
    ambiguous = canary(*feedback)
    assert ambiguous.returncode == EXIT_BAD_INPUT, ambiguous.stdout + ambiguous.stderr
    assert "'--regime'" in ambiguous.stderr and "mps:20" in ambiguous.stderr and "mps:50" in ambiguous.stderr
    assert "Traceback" not in ambiguous.stderr
    assert store_digest(url) == before
