"""``canary serve`` on an address it cannot listen on: exit 4 (operational) with one line naming the
address, before it announces "serving on" — never uvicorn's start-up exit 3, which is canary's
"unknown"."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from tests.support.paths import canary_cmd, cli_env


def test_a_port_in_use_is_exit_4_naming_the_address(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run([*canary_cmd(), "serve", "--no-auth", "--port", str(port)], capture_output=True,
                              text=True, env=cli_env(tmp_path), timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 4, proc.stderr
    assert f"http://127.0.0.1:{port}" in proc.stderr and "already in use" in proc.stderr
    assert "serving on" not in proc.stderr and "Traceback" not in proc.stderr
