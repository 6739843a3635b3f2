"""SIGTERM under a long-poll: the waiter gets a typed answer at once (JSON 503 with Retry-After, or the
probe if it is final), not uvicorn's plain-text 500 when its graceful timeout cancels the request."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Server, make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def test_sigterm_answers_a_long_poll_with_a_typed_answer(store_url: str, tmp_path: Path) -> None:
    token = make_token(store_url, "admit")
    server = Server(store_url, tmp_path, "--sim-time-scale", "1").start()
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=f"term-{uuid.uuid4().hex[:6]}")}
    answers: list[Any] = []
    try:
        with server.client(token) as c:
            r = c.post("/v1/admissions", json=body)
            assert r.status_code == 202, r.text
            location = r.headers["location"]
            for _ in range(600):
                if c.get(location, params={"wait": "100ms"}).json()["state"] == "running":
                    break

        def wait() -> None:
            try:
                with server.client(token) as w:
                    started = time.monotonic()
                    answer = w.get(location, params={"wait": "60s"})
                    answers.append((answer, time.monotonic() - started))
            except BaseException as exc:
                answers.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.0)  # the long-poll is in the server
        assert server.proc is not None
        signalled = time.monotonic()
        os.killpg(server.proc.pid, signal.SIGTERM)
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        server.proc.wait(timeout=30)
        stopped_after_s = time.monotonic() - signalled
    finally:
        server.kill()
    assert answers and not isinstance(answers[0], BaseException), answers
    answer, _ = answers[0]
    assert isinstance(answer, httpx.Response)
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    if answer.status_code == 200:
        assert answer.json()["state"] == "aborted"
    else:
        assert answer.status_code == 503, answer.text
        assert "shutting down" in answer.json()["detail"]
        assert int(answer.headers["retry-after"]) > 0
    assert stopped_after_s < 8.0  # well inside the 10 s graceful timeout: nothing was left to cancel
    log = server.log.read_text()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log[-3000:]
