"""``canary admit`` as people run it: piped into ``head``, with stderr closed, with ``--no-store``; and
``canary feedback`` refusing a report that contradicts itself. The progress display never decides a
probe: a display whose stream is gone stops displaying and the probe goes on, so the store records the
same decision as a quiet run."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from canary.commands.admit import Progress
from canary.errors import EXIT_ADMIT, EXIT_REJECT, EXIT_UNKNOWN
from canary.probe.orchestrator import ProbeProgress
from tests.security.adversarial import store_digest
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

SNAPSHOT = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")
EXIT = {"admit": EXIT_ADMIT, "reject": EXIT_REJECT, "unknown": EXIT_UNKNOWN}


def _recorded(url: str) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    try:
        return {
            "journal": sorted(r[0] for r in conn.execute("select state from probe_journal")),
            "evidence": sorted(conn.execute("select outcome, source from evidence").fetchall()),
            "certificates": [json.loads(r[0])["verdict"] for r in conn.execute("select certificate_json "
                                                                               "from certificates")],
        }
    finally:
        conn.close()


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same admission with no display at all (a real process): what the store must record."""
    folder = tmp_path_factory.mktemp("quiet")
    url = migrated_sqlite(folder / "store.sqlite3")
    proc = subprocess.run([*canary_cmd(), "--db", url, "admit", SNAPSHOT, PROFILE, "--quiet", "--json"],
                          capture_output=True, text=True, env=cli_env(folder), timeout=120)
    verdict = json.loads(proc.stdout)["verdict"]
    assert proc.returncode == EXIT[verdict], proc.stderr
    recorded = _recorded(url)
    assert recorded["journal"] == ["recorded"] and recorded["certificates"] == [verdict]
    return {"verdict": verdict, **recorded}


def _shell(tmp_path: Path, url: str, redirect: str) -> subprocess.CompletedProcess[str]:
    argv = " ".join(shlex.quote(a) for a in [*canary_cmd(), "--db", url, "admit", SNAPSHOT, PROFILE, "--json"])
    return subprocess.run(["bash", "-c", redirect.format(cmd=argv)], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_piped_into_head_the_probe_goes_on(tmp_path: Path, quiet_run: dict[str, Any]) -> None:
    """``canary admit … 2>&1 | head -3``: the reader leaves after three lines, mid-probe."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    proc = _shell(tmp_path, url, "{cmd} 2>&1 | head -3; exit ${{PIPESTATUS[0]}}")
    assert len(proc.stdout.splitlines()) == 3
    assert proc.returncode == EXIT[quiet_run["verdict"]]  # the decision's exit code, not 0 for any
    recorded = _recorded(url)
    assert recorded["journal"] == ["recorded"]  # not "aborted" by the display
    assert recorded["evidence"] == quiet_run["evidence"] and recorded["certificates"] == [quiet_run["verdict"]]


@pytest.mark.slow
def test_with_stderr_closed_the_probe_goes_on(tmp_path: Path, quiet_run: dict[str, Any]) -> None:
    """``canary admit … 2>&-``: Python's ``sys.stderr`` is ``None``; every attempt used to end unknown."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    proc = _shell(tmp_path, url, "exec {cmd} 2>&-")
    cert = json.loads(proc.stdout)
    assert cert["verdict"] == quiet_run["verdict"] and proc.returncode == EXIT[cert["verdict"]]
    recorded = _recorded(url)
    assert recorded["journal"] == ["recorded"] and recorded["evidence"] == quiet_run["evidence"]


class _Gone:
    """A stream whose reader left: every write raises, as a pipe with no reader does."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.writes = 0

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self.writes += 1
        raise self.exc

    def flush(self) -> None:
        raise self.exc


def _progress(state: str, windows: int) -> ProbeProgress:
    return ProbeProgress(probe_id="p", state=state, time_used_s=1.0, max_probe_time_s=60.0,  # type: ignore[arg-type]
                         exposure_used=1, max_requests_exposed=10, windows=windows, estimate_pct=None,
                         interval_pct=None, simulated=True)


@pytest.mark.parametrize("stream", [
    pytest.param(_Gone(BrokenPipeError(32, "Broken pipe")), id="reader-left"),
    pytest.param(_Gone(OSError(9, "Bad file descriptor")), id="closed-fd"),
    pytest.param(_Gone(ValueError("I/O operation on closed file")), id="closed-file"),
    pytest.param(None, id="no-stderr"),
])
def test_a_display_whose_stream_is_gone_stops_quietly(stream: _Gone | None) -> None:
    display = Progress(stream)
    for windows, state in ((0, "PENDING"), (10, "PROBING"), (20, "PROBING"), (21, "DECIDED")):
        display(_progress(state, windows))  # must not raise
    display.done()
    if stream is not None:
        assert stream.writes == 1  # it tried once, then stopped displaying


def test_admit_no_store_touches_no_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(tmp_path)
    out = run_in_process(["admit", SNAPSHOT, PROFILE, "--no-store"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert out.returncode == 2 and "'--no-store'" in out.stderr and "canary fit --no-store" in out.stderr
    assert not (tmp_path / "evidence.sqlite3").exists() and not (tmp_path / "xdg").exists()


@pytest.mark.parametrize("value", ["-50", "0", "-0.0", "nan", "1e9"])
def test_feedback_refuses_a_slowdown_that_contradicts_an_slo_violation(
        tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    before = store_digest(url)
    out = run_in_process(["--db", url, "feedback", SNAPSHOT, PROFILE, "--resident-name", "comms",
                          f"--slowdown-pct={value}"], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 2 and "'--slowdown-pct'" in out.stderr and "Traceback" not in out.stderr
    assert store_digest(url) == before


def test_feedback_with_a_slowdown_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    out = run_in_process(["--db", url, "feedback", SNAPSHOT, PROFILE, "--resident-name", "comms",
                          "--slowdown-pct", "35"], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert _recorded(url)["evidence"] == [("unsafe", "production")]


def test_a_device_with_bookings_and_no_resident_is_not_empty(tmp_path: Path) -> None:
    """An admission books 6.5 GiB on an idle H100 (the candidate's 6 GiB peak and the policy's 512 MiB
    context): the workload booked is about to run there. The next candidate fits in the memory left, but
    it would run beside the booked workload, which cannot be probed before it runs: unknown (exit 3),
    naming the booking — never 'nothing else runs on the device' — and nothing more is booked."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")

    def admit(*extra: str) -> tuple[int, dict[str, Any]]:
        proc = subprocess.run([*canary_cmd(), "--db", url, "admit", "h100", PROFILE, "--quiet", "--json", *extra],
                              capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
        return proc.returncode, json.loads(proc.stdout)

    first_rc, first = admit()
    assert first_rc == EXIT_ADMIT and first["reason"] == "fits, and nothing else runs on the device"
    assert [r["memory_bytes"] for r in first["resource_reservations"]] == [int(6.5 * 2**30)]
    second_rc, second = admit()
    assert second_rc == EXIT_UNKNOWN and second["verdict"] == "unknown", second["reason"]
    assert "other admissions booked 6.5 GiB on this device" in second["reason"]
    assert "not running yet" in second["reason"] and second["resource_reservations"] == []
    fit = subprocess.run([*canary_cmd(), "--db", url, "fit", "h100", PROFILE, "--json"], capture_output=True,
                         text=True, env=cli_env(tmp_path), timeout=120)
    assert fit.returncode == EXIT_UNKNOWN and "not running yet" in json.loads(fit.stdout)["reason"]
    conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    try:
        assert conn.execute("select count(*) from reservations").fetchone() == (1,)
    finally:
        conn.close()


def test_the_remote_progress_display_never_fails_the_admission() -> None:
    """``canary admit --server … 2>&-``: the remote probe's state lines go to a stderr whose reader left
    (or that is closed: ``None``); the display drops them instead of raising into the admission."""
    from canary.commands.admit import _remote_progress

    class Gone:
        def write(self, text: str) -> int:
            raise BrokenPipeError("reader left")

        def flush(self) -> None:
            raise BrokenPipeError("reader left")

    for stream in (Gone(), None):
        show = _remote_progress(stream)
        show({"id": "p1", "state": "running", "waiters": 2})
        show({"id": "p1", "state": "recorded", "waiters": 2})
