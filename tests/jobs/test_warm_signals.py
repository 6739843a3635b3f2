"""SIGTERM — what a CronJob's deadline, a pod's termination or ``kill`` sends a nightly job — stops
``canary warm`` as Ctrl-C does: the probe in progress rolls back and is journaled aborted, the pairs
already answered stay recorded, and the job exits 143 saying so. It used to die at once: exit -15, no
word, and the probe's journal row left ``running`` until its lease expired."""

from __future__ import annotations

import json
import selectors
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

PROFILES = EXAMPLES / "profiles"


def _plan(tmp_path: Path) -> Path:
    """54 pairs, most of them probed: far more work than the signal takes to arrive, however slow the
    machine (the pairs that need no probe are answered first, then the probes one at a time)."""
    pairs = [{"device": d, "candidate": str(PROFILES / c), "residents": [str(PROFILES / r)]}
             for d in ("h100", "a100-80gb", "h200", "h100-pcie", "a100-80gb-pcie", "b200")
             for c in ("embedding-service.yaml", "etl-transcode.yaml", "llm-decode.yaml")
             for r in ("resnet50-training.yaml", "llm-prefill.yaml", "sd-unet-serving.yaml")]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"name": "big", "budget_s": 3600, "concurrency": 1, "pairs": pairs}))
    return path


def _first_probed_line(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """stderr up to the first pair a probe answered (read with a deadline, never blocking)."""
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen = b""
    deadline = time.monotonic() + timeout_s
    while b" probed " not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no progress line within {timeout_s} s: {seen!r}"
        if sel.select(timeout=left):
            chunk = proc.stderr.read1(4096)  # type: ignore[attr-defined]
            assert chunk, f"stderr closed before a progress line: {seen!r}"
            seen += chunk
    return seen


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_a_warm_job_as_ctrl_c_does(tmp_path: Path, sigint: str) -> None:
    """``ignored``: the job starts with SIGINT ignored, as a script's background job (``canary warm plan
    &``) inherits it from the shell — SIGTERM must stop it all the same (it ran to the end, exit 0)."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    proc = subprocess.Popen([*canary_cmd(), "--db", url, "warm", str(_plan(tmp_path))], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env(tmp_path), stdin=subprocess.DEVNULL,
                            preexec_fn=_ignore_sigint if sigint == "ignored" else None)
    try:
        before = _first_probed_line(proc, timeout_s=120)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    err = (before + rest).decode()
    assert proc.returncode == 143, err
    assert "canary: terminated (SIGTERM); any probe in progress was rolled back and journaled aborted" in err
    assert "Traceback" not in err
    conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    try:
        states = [r[0] for r in conn.execute("select state from probe_journal")]
    finally:
        conn.close()
    assert states and "running" not in states, states  # none left to its lease
    assert states.count("recorded") >= 1  # the pair answered before the signal stays recorded
