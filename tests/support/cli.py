"""The ``canary`` command run in the test's own process: the console script's code path
(``canary.cli.main`` is ``_run(build_parser(), argv)``), its exit code and exactly what it writes to
stdout and stderr, without the half second of interpreter start-up and imports a subprocess costs.

For tables of bad input (exit code, one message line, nothing written). Each file that uses it keeps
at least one case as a real subprocess of the installed script, which is what a user runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

__all__ = ["run_in_process"]


def run_in_process(
    argv: list[str],
    *,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``canary *argv`` in-process, with ``env`` set and ``cwd`` as the working folder for the call
    only; returns what ``subprocess.run(..., capture_output=True, text=True)`` would."""
    from canary.cli import _run, build_parser

    with monkeypatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        capsys.readouterr()
        try:
            code = _run(build_parser(), argv)
        except SystemExit as exc:  # argparse's own usage errors, as the script would exit
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["canary", *argv], code, out, err)
