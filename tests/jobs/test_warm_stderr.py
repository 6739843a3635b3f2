"""A closed stderr (``2>&-``) or a stderr reader that left does not decide a warm or revalidate job:
the display stops, and the probes, their evidence, the report on stdout and the exit code are as they
would have been (docs/operations.md, "Command-line conventions")."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PLAN = str(EXAMPLES / "plans" / "nightly-h100.yaml")


def _closed_stderr(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``canary ARGS 2>&-`` as a shell runs it: fd 2 is not open at all in the process."""
    line = " ".join(shlex.quote(a) for a in [*canary_cmd(), *args]) + " 2>&-"
    return subprocess.run(["sh", "-c", line], stdout=subprocess.PIPE, text=True, env=cli_env(tmp_path),
                          timeout=180)


def _reader_left(tmp_path: Path, *args: str) -> tuple[int, str]:
    """stderr is a pipe whose reader closed it before the job wrote anything (``2> >(head -c 0)``)."""
    proc = subprocess.Popen([*canary_cmd(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(tmp_path))
    assert proc.stderr is not None
    proc.stderr.close()
    out, _ = proc.communicate(timeout=180)
    return proc.returncode, out


def _evidence(tmp_path: Path, *status: str) -> list[dict[str, object]]:
    proc = subprocess.run([*canary_cmd(), "evidence", "list", *status, "--json"], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def test_warm_with_stderr_closed_probes_and_reports(tmp_path: Path) -> None:
    proc = _closed_stderr(tmp_path, "warm", PLAN, "--json")
    assert proc.returncode == 0
    statuses = [p["status"] for p in json.loads(proc.stdout)["pairs"]]
    assert statuses.count("probed") == 3 and statuses.count("does-not-fit") == 2
    assert len(_evidence(tmp_path)) == 3


def test_warm_whose_stderr_reader_left_probes_and_reports(tmp_path: Path) -> None:
    code, out = _reader_left(tmp_path, "warm", PLAN)
    assert code == 0
    assert "nightly-h100: probed 3, does-not-fit 2" in out
    assert len(_evidence(tmp_path)) == 3


@pytest.mark.slow
def test_revalidate_with_stderr_closed_reprobes_and_reports(tmp_path: Path) -> None:
    assert _closed_stderr(tmp_path, "warm", PLAN).returncode == 0
    proc = _closed_stderr(tmp_path, "revalidate", "--driver", "600.1", "--yes", "--plan", PLAN, "--json")
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["stale_marked"] == 3
    assert [p["status"] for p in report["pairs"]].count("probed") == 3
    assert len(_evidence(tmp_path, "--status", "stale")) == 3
    assert len(_evidence(tmp_path, "--status", "current")) == 3  # the re-probes' evidence, under 600.1
