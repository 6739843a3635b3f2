"""``canary agent`` / ``canary drift`` bad input: one clear line naming the field, exit 2, no traceback,
nothing written to the store."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import canary_cmd, cli_env
from tests.support.cli import run_in_process


@pytest.mark.parametrize(("args", "needle"), [
    pytest.param(["agent", "run", "--device", "gpu0"], "'--device'", id="device-without-source"),
    pytest.param(["agent", "run", "--device", "gpu0=/no/such/snapshot.yaml"], "/no/such/snapshot.yaml",
                 id="missing-snapshot-file"),
    pytest.param(["agent", "run", "--device", "bad name=h.yaml"], "devices", id="bad-device-name"),
    pytest.param(["agent", "run", "--node", "a/b", "--device", "gpu0=x.yaml"], "node", id="bad-node-name"),
    pytest.param(["agent", "run", "--heartbeat-s", "0", "--device", "gpu0=x.yaml"], "heartbeat_s",
                 id="zero-heartbeat"),
    pytest.param(["agent", "run"], "no devices", id="no-devices"),
])
def test_agent_run_bad_input(tmp_path: Path, args: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (tests/support/cli.py); the two tests below run the installed script."""
    (tmp_path / "x.yaml").write_text("device_type: h100-sxm\n")
    db = tmp_path / "store.sqlite3"
    out = run_in_process(["--db", f"sqlite:///{db}", *args], capsys=capsys, monkeypatch=monkeypatch,
                         env=cli_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not db.exists()


def test_snapshot_file_with_bad_field(tmp_path: Path) -> None:
    snap = tmp_path / "gpu0.yaml"
    snap.write_text("device_type: h100-sxm\nmemory_total_bytes: lots\n")
    db = tmp_path / "store.sqlite3"
    out = subprocess.run([*canary_cmd(), "--db", f"sqlite:///{db}", "agent", "run", "--once", "--device",
                          f"gpu0={snap}"], capture_output=True, text=True, timeout=60, env=cli_env(tmp_path))
    assert out.returncode == 2 and "memory_total_bytes" in out.stderr and "Traceback" not in out.stderr
    assert not db.exists()


def test_drift_unknown_event(tmp_path: Path) -> None:
    from evidence_store.migrate import upgrade

    url = f"sqlite:///{tmp_path / 's.sqlite3'}"
    upgrade(url)
    out = subprocess.run([*canary_cmd(), "--db", url, "drift", "nope"],
                         capture_output=True, text=True, timeout=60, env=cli_env(tmp_path))
    assert out.returncode == 2 and "no drift event 'nope'" in out.stderr


@pytest.mark.parametrize("args", [
    pytest.param(["agent", "list"], id="agent-list"),
    pytest.param(["agent", "list", "--json"], id="agent-list-json"),
    pytest.param(["drift"], id="drift"),
    pytest.param(["drift", "nope"], id="drift-id"),
    pytest.param(["agent", "drain", "gpu-node-a"], id="agent-drain"),
])
def test_agent_commands_on_a_mistyped_store_path_create_nothing(
        tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``agent run`` creates a store: the commands that read (or drain) what agents published say
    that no store is at the path (exit 4, as every ``canary evidence`` command does) and leave no file."""
    db = tmp_path / "typo.sqlite3"
    out = run_in_process(["--db", f"sqlite:///{db}", *args], capsys=capsys, monkeypatch=monkeypatch,
                         env=cli_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    assert f"no store at {db}" in out.stderr and "Traceback" not in out.stderr
    assert not db.exists()


def test_snapshot_file_of_a_device_the_catalog_lacks(tmp_path: Path) -> None:
    """Read as canary fit reads a DEVICE file, before anything is written: a typo in device_type is exit 2
    with the closest names (the file was published, and fit refused it)."""
    snap = tmp_path / "gpu0.yaml"
    snap.write_text('device_type: h100x\ndriver_version: "580.95.05"\n')
    db = tmp_path / "store.sqlite3"
    out = subprocess.run([*canary_cmd(), "--db", f"sqlite:///{db}", "agent", "run", "--once", "--device",
                          f"gpu0={snap}"], capture_output=True, text=True, timeout=60, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{snap}: field 'device_type': unknown device 'h100x'; closest: h100-sxm" in out.stderr
    assert "Traceback" not in out.stderr
    assert not db.exists()
