"""Process-group inspection, signalling and termination shared by the process executor and recovery
(Linux ``/proc``). :func:`terminate_group` is the one SIGTERM → SIGKILL path of both.

A process group counts as gone when none of its members is alive: zombies (state ``Z``) have exited
and only wait to be reaped by whoever adopted them, which may be a container's PID 1 that never
reaps, so they are not counted. Recovery kills a group only when at least one live member carries
``CANARY_PROBE_ID=<probe id>`` in its environment: a process-group id from an old journal row may by
now belong to an unrelated process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

from canary.errors import ProbeError

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    pgid: int
    state: str


def _stat(pid_dir: Path) -> ProcInfo | None:
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    rest = text[text.rfind(")") + 2 :].split()
    if len(rest) < 3:
        return None
    return ProcInfo(int(pid_dir.name), int(rest[2]), rest[0])


def proc_available() -> bool:
    return (PROC / "self" / "stat").exists()


def group_members(pgid: int) -> list[ProcInfo]:
    """Live (non-zombie) processes in group ``pgid``. Raises ``ProbeError`` without ``/proc``."""
    if not proc_available():
        raise ProbeError("cannot inspect process groups: /proc is not available on this system")
    members = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        info = _stat(entry)
        if info is not None and info.pgid == pgid and info.state not in ("Z", "X"):
            members.append(info)
    return members


def group_alive(pgid: int) -> bool:
    """Whether a live process is left in group ``pgid`` (``/proc`` when present, else ``killpg(0)``)."""
    if proc_available():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def carries_probe_id(pid: int, probe_id: str) -> bool:
    """Whether process ``pid`` has ``CANARY_PROBE_ID=<probe_id>`` in its environment."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"CANARY_PROBE_ID={probe_id}".encode() in environ.split(b"\0")


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to group ``pgid``; a group already gone is fine. Refuses our own or a system group."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise ProbeError(f"refusing to signal process group {pgid}: it is not a candidate's own group")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return


@dataclass(frozen=True, slots=True)
class Termination:
    """How a group ended: ``gone`` when ``alive`` said no at the end; ``killed`` when SIGKILL was
    needed; ``signalled`` is ``False`` when nothing was alive to signal in the first place."""

    gone: bool
    killed: bool
    signalled: bool


def _terminate_steps(
    pgid: int, alive: Callable[[], bool], term_grace_s: float, kill_wait_s: float, poll_s: float
) -> Generator[float, None, Termination]:
    """The one SIGTERM → SIGKILL sequence; yields how long to sleep before looking again, so the same
    steps run under a blocking sleep (recovery) and an async one (the executor's rollback)."""

    def gone_within(timeout_s: float) -> Generator[float, None, bool]:
        deadline = time.monotonic() + timeout_s
        while alive():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            yield min(poll_s, left)
        return True

    if not alive():
        return Termination(gone=True, killed=False, signalled=False)
    signal_group(pgid, signal.SIGTERM)
    if (yield from gone_within(term_grace_s)):
        return Termination(gone=True, killed=False, signalled=True)
    signal_group(pgid, signal.SIGKILL)
    gone = yield from gone_within(kill_wait_s)
    return Termination(gone=gone, killed=True, signalled=True)


async def terminate_group(
    pgid: int, *, alive: Callable[[], bool], term_grace_s: float, kill_wait_s: float, poll_s: float = 0.02
) -> Termination:
    """SIGTERM group ``pgid``, wait up to ``term_grace_s`` for ``alive()`` to turn false, then SIGKILL
    and wait up to ``kill_wait_s``. ``alive`` says what counts as still there (the executor reaps its
    child and looks at every member; recovery looks only at members carrying the probe id)."""
    import anyio

    steps = _terminate_steps(pgid, alive, term_grace_s, kill_wait_s, poll_s)
    try:
        while True:
            await anyio.sleep(next(steps))
    except StopIteration as done:
        result: Termination = done.value
        return result


def terminate_group_blocking(
    pgid: int, *, alive: Callable[[], bool], term_grace_s: float, kill_wait_s: float, poll_s: float = 0.02
) -> Termination:
    """:func:`terminate_group` for synchronous callers (it sleeps the calling thread: never call it
    from an event loop or while holding a store transaction)."""
    steps = _terminate_steps(pgid, alive, term_grace_s, kill_wait_s, poll_s)
    try:
        while True:
            time.sleep(next(steps))
    except StopIteration as done:
        result: Termination = done.value
        return result
