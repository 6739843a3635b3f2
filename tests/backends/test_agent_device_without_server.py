"""``agent:NODE/NAME`` names a device a node agent publishes to the service; only the service's store
holds those reports, so without ``--server URL`` or ``$CANARY_SERVER`` the CLI cannot resolve it: bad
input (exit 2) that says where such a device is resolved, not a bare "unknown device", and no store is
touched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")
DEVICE = "agent:gpu-node-a/gpu0"
WANT = (f"canary: field 'DEVICE': '{DEVICE}' names a device a node agent publishes to the canary service, and "
        "only the service holds what agents publish: canary fit and canary admit reach it with --server URL "
        "(or $CANARY_SERVER)")


def _env(tmp_path: Path) -> dict[str, str]:
    env = cli_env(tmp_path)
    env.pop("CANARY_SERVER", None)
    return env


@pytest.mark.parametrize("argv", [
    pytest.param(["fit", DEVICE, PROFILE], id="fit"),
    pytest.param(["fit", DEVICE, PROFILE, "--json", "--no-store"], id="fit-no-store"),
    pytest.param(["admit", DEVICE, PROFILE, "--no-probe"], id="admit"),
    pytest.param(["feedback", DEVICE, PROFILE, "--resident-name", "comms"], id="feedback"),
    pytest.param(["snapshot", DEVICE], id="snapshot"),
])
def test_an_agent_device_needs_the_service(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CANARY_SERVER", raising=False)
    done = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=_env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip() == WANT, done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "evidence.sqlite3").exists()


def test_the_installed_script_says_so(tmp_path: Path) -> None:
    """The installed script, as a user runs it."""
    done = subprocess.run([*canary_cmd(), "fit", DEVICE, PROFILE], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip() == WANT and "Traceback" not in done.stderr
    assert not (tmp_path / "evidence.sqlite3").exists()
