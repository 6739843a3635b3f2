"""The small interfaces the orchestrator drives: ``Executor``, ``Monitor``, ``Journal``, ``ExposureGate``.

An **executor** starts and stops the candidate and sends it requests; a **monitor** measures the
resident; a **journal** records that a probe is running (so a crashed probe can be found and its
canary killed). The orchestrator enforces every bound itself: it hands the executor an
:class:`ExposureGate` that refuses a request beyond the cap, and counts exposure from the gate,
never from what the executor says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from anyio.abc import TaskStatus


class ExposureGate:
    """Requests the candidate may still be sent. Checked before every request.

    ``try_acquire`` grants one request or refuses; ``acquire_up_to`` grants at most ``n`` (used by
    executors that learn their request count after the fact, like the simulator's). ``used`` is
    what was granted: the only exposure count the orchestrator believes."""

    def __init__(self, allowance: int) -> None:
        if allowance < 0:
            raise ValueError("allowance must be >= 0")
        self._allowance = allowance
        self._used = 0

    @property
    def allowance(self) -> int:
        return self._allowance

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int:
        return self._allowance - self._used

    def try_acquire(self) -> bool:
        if self._used >= self._allowance:
            return False
        self._used += 1
        return True

    def acquire_up_to(self, n: int) -> int:
        granted = max(0, min(n, self.remaining))
        self._used += granted
        return granted


@dataclass(frozen=True, slots=True)
class CandidateProcess:
    """The candidate's OS process: its pid and process group (what recovery kills)."""

    pid: int
    pgid: int


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """What a rollback did and whether it could prove the candidate gone.

    ``verified`` is ``True`` only when the executor checked (processes gone; memory back where the
    backend can tell); ``memory_checked`` says whether memory was part of the check."""

    verified: bool
    detail: str
    memory_checked: bool = False
    killed: bool = False


@dataclass(frozen=True, slots=True)
class WindowSample:
    """The resident's latencies (ms) in one window, as the monitor delivered them.

    ``latencies_ms`` is left raw (it may hold NaN or garbage); the judge cleans it. ``stalled`` is
    ``True`` only when the monitor saw the resident demonstrably stalled in the window — requests
    outstanding past their timeout, or its SLO monitor said so. A window with few or no latencies
    and ``stalled=False`` is only *no data*: no data is neither a pass nor harm.

    ``work_units`` marks a **throughput window**: the resident's work done in the window, partial
    steps included (``None``: a latency window). ``latencies_ms`` then holds one value, the window's
    time per unit of work (``1000 · duration_s / work_units``), so the window's mean is exactly the
    inverse throughput; an empty list when no work was done."""

    latencies_ms: Sequence[object]
    duration_s: float
    note: str = ""
    stalled: bool = False
    work_units: float | None = None


@runtime_checkable
class Executor(Protocol):
    """Starts, loads and stops the candidate. Implementations: ``sim``, ``process``, ``cuda``."""

    name: str
    simulated: bool

    async def prepare(self, probe_id: str) -> CandidateProcess | None:
        """Create the candidate's process without letting it run (``None``: no OS process of its own).

        ``probe_id`` marks the process (``CANARY_PROBE_ID`` in its environment) so recovery can tell
        an orphaned canary from an unrelated process that reused its process-group id."""
        ...

    async def start(self) -> None:
        """Let the candidate run and wait until it is ready; raise ``ProbeError`` if it cannot start."""
        ...

    async def drive(self, duration_s: float, gate: ExposureGate, *, task_status: TaskStatus[None]) -> None:
        """Send the candidate requests for one window, each only after ``gate.try_acquire()``.

        Calls ``task_status.started()`` once load flows; the orchestrator cancels it when the window ends."""
        ...

    async def rollback(self) -> RollbackReport:
        """Stop the candidate and verify it is gone. Idempotent: a second call only verifies."""
        ...


@runtime_checkable
class Monitor(Protocol):
    """Measures the resident. Implementations: ``sim``, ``http``, ``prometheus``."""

    name: str
    simulated: bool

    async def open(self) -> None: ...

    async def measure(self, duration_s: float) -> WindowSample:
        """The resident's latencies over the next ``duration_s`` seconds."""
        ...

    async def close(self) -> None: ...


class Journal(Protocol):
    """Where a probe is written as running before its candidate starts (the store implements it)."""

    def start(
        self,
        probe_id: str,
        key_json: dict[str, Any],
        owner: str,
        lease_s: float,
        pid: int,
        pgid: int,
        budget_json: dict[str, Any],
    ) -> None: ...

    def heartbeat(self, probe_id: str, lease_s: float) -> None: ...

    def finish(self, probe_id: str, state: str, result_json: dict[str, Any]) -> None: ...
