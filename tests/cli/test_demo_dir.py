"""``canary demo`` (``python -m canary.demo``, ``make demo``) keeps its store where ``$CANARY_DEMO_DIR``
says (a relative path from the working folder), else in the repository's ``.canary-demo/``; a
``$CANARY_DEMO_DIR`` that cannot hold a store is bad input: exit 2, one line naming it, nothing run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from canary import demo
from tests.support.paths import ROOT, cli_env


@pytest.mark.parametrize(("given", "want"), [
    pytest.param(None, ROOT / ".canary-demo", id="unset"),
    pytest.param("", ROOT / ".canary-demo", id="empty"),
    pytest.param("elsewhere/demo", "cwd/elsewhere/demo", id="relative"),
    pytest.param("/abs/demo", Path("/abs/demo"), id="absolute"),
])
def test_the_store_folder(given: str | None, want: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if given is None:
        monkeypatch.delenv("CANARY_DEMO_DIR", raising=False)
    else:
        monkeypatch.setenv("CANARY_DEMO_DIR", given)
    expected = tmp_path / str(want).removeprefix("cwd/") if str(want).startswith("cwd/") else want
    assert demo.demo_dir() == expected


def test_a_folder_that_cannot_hold_the_store_is_bad_input(tmp_path: Path) -> None:
    occupied = tmp_path / "a-file"
    occupied.write_text("not a folder\n")
    env = cli_env(tmp_path) | {"CANARY_DEMO_DIR": str(occupied)}
    done = subprocess.run([sys.executable, "-m", "canary.demo"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert done.returncode == 2, (done.stdout[-1000:], done.stderr[-1000:])
    assert done.stderr.strip() == f"demo: field '$CANARY_DEMO_DIR': {occupied} cannot hold the demo's store: " \
                                  "it is not a folder", done.stderr
    assert done.stdout == ""  # no step ran
    assert occupied.read_text() == "not a folder\n"
