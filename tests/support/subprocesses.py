"""Talking to a child process from a test without ever waiting forever or filling a pipe.

:class:`Child` starts a process with its stderr in a file (nothing to drain, nothing to block on)
and its stdout read by a thread, so :meth:`Child.line` can wait for the next line with a timeout.
A failure message carries the tail of what the child wrote to stderr.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.timing import HANG_S

__all__ = ["HANG_S", "Child"]


class Child:
    def __init__(self, argv: Sequence[str], *, stderr_path: Path, **popen: Any) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=self._stderr, **popen)
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw)
        self._lines.put(None)

    def stderr_tail(self, limit: int = 2000) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_bytes()[-limit:].decode("utf-8", "replace")

    def line(self, timeout_s: float = HANG_S) -> str:
        """The next stdout line (stripped); fails the test when none comes in ``timeout_s``."""
        try:
            raw = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(
                f"no output within {timeout_s:g} s from {self.proc.args!r}; stderr: {self.stderr_tail()}"
            ) from None
        if raw is None:
            raise AssertionError(
                f"{self.proc.args!r} ended (code {self.proc.poll()}) without the expected line; "
                f"stderr: {self.stderr_tail()}"
            )
        return raw.decode("utf-8", "replace").strip()

    def wait(self, timeout_s: float = HANG_S) -> int:
        """The exit code; fails the test (after killing the child) when it does not exit in time."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"{self.proc.args!r} did not exit within {timeout_s:g} s; stderr: {self.stderr_tail()}"
            ) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
