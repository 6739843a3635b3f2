"""``make serve-demo`` (``python -m canary.serve.demo``) runs end to end: start, a probe, a cached answer, stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_serve_demo(tmp_path: Path) -> None:
    """As make serve-demo runs it, with $CANARY_DEMO_DIR naming where its store goes (as for make demo):
    the store is there, not in the repository."""
    demo = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "canary.serve.demo"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**cli_env(tmp_path), "CANARY_DEMO_DIR": str(demo)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (demo / "serve.sqlite3").is_file()
    assert "HTTP/1.1 202 Accepted" in r.stdout and "HTTP/1.1 200 OK" in r.stdout
    assert '"decided_by": "cache"' in r.stdout and "server stopped" in r.stdout
