"""The commands ``make serve-demo`` prints work when pasted into a shell: after the demo, its printed
``export TOKEN=…``, server command and ``curl`` lines — run by ``bash`` exactly as printed — start the
server on the demo's store and get the answers the demo showed (the pair now from the evidence cache,
the probe ``done``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")
CURL = shutil.which("curl")


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run([BASH, "-c", script], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(BASH is None or CURL is None, reason="needs bash and curl to replay the printed commands")
def test_printed_commands_replay_in_a_shell(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    demo = subprocess.run([sys.executable, "-m", "canary.serve.demo", "--dir", str(tmp_path / "demo")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert demo.returncode == 0, demo.stderr[-2000:]
    commands = [line[2:] for line in demo.stdout.splitlines() if line.startswith("$ ")]
    export = next(c for c in commands if c.startswith("export TOKEN="))
    serve = next(c for c in commands if c.endswith(" &")).removesuffix(" &")
    curls = [c.split("   #")[0] for c in commands if c.startswith("curl ")]
    assert [c.split()[3] for c in curls] == ["POST", "GET", "POST"]
    assert (tmp_path / "demo" / "admission.json").is_file()  # the body file the curl lines send

    assert BASH is not None
    server = subprocess.Popen([BASH, "-c", f"exec {serve}"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = curls[0].split()[4].strip("'")
        base = base[: base.index("/v1/")]
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the printed server command did not start"
            time.sleep(0.1)
        answers = []
        for line in curls:
            done = _bash(f"{export}\n{line} -w '\\n%{{http_code}}'", env)
            assert done.returncode == 0, (line, done.stderr)
            body, _, status = done.stdout.rpartition("\n")
            answers.append((int(status), json.loads(body)))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    (post_status, post), (get_status, probe), _ = answers
    assert post_status == 200 and post["decided_by"] == "cache" and post["verdict"] == "admit", post
    assert get_status == 200 and probe["state"] == "done", probe
