"""Executors and monitors that misbehave on purpose (hang, lie, die, answer slowly, return garbage).

They implement the real interfaces, so the tests drive the real orchestrator with them. A shared
:class:`Bench` tells the monitor whether the canary is loading the resident right now.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from canary.probe.interfaces import CandidateProcess, ExposureGate, RollbackReport, WindowSample


@dataclass
class Bench:
    on: bool = False
    alive: bool = False
    slowdown_pct: float = 0.0
    base_ms: float = 10.0
    rollbacks: int = 0
    rollback_finished: int = 0
    sent: int = 0
    events: list[str] = field(default_factory=list)


@dataclass
class FakeExecutor:
    bench: Bench
    behaviour: str = "good"  # good | hang-prepare | hang-start | fail-start | greedy | die-after | slow-drive | slow-rollback | raise-rollback
    die_after_windows: int = 2
    request_interval_s: float = 0.001
    name: str = "fake"
    simulated: bool = False
    windows_driven: int = 0

    async def prepare(self, probe_id: str) -> CandidateProcess | None:
        self.bench.events.append("prepare")
        if self.behaviour == "hang-prepare":
            await anyio.sleep_forever()
        return None

    async def start(self) -> None:
        self.bench.events.append("start")
        if self.behaviour == "hang-start":
            await anyio.sleep_forever()
        if self.behaviour == "fail-start":
            raise RuntimeError("candidate crashed on start")
        self.bench.alive = True

    async def drive(self, duration_s: float, gate: ExposureGate, *, task_status: TaskStatus[None]) -> None:
        self.windows_driven += 1
        if self.behaviour == "die-after" and self.windows_driven > self.die_after_windows:
            self.bench.alive = False
            raise RuntimeError("candidate died mid-probe")
        self.bench.on = True
        task_status.started()
        try:
            if self.behaviour == "greedy":
                # Tries to take far more than allowed, and keeps asking.
                self.bench.sent += gate.acquire_up_to(10**9)
                while True:
                    if gate.try_acquire():
                        self.bench.sent += 1
                    await anyio.sleep(0)
            while gate.try_acquire():
                self.bench.sent += 1
                await anyio.sleep(self.request_interval_s)
            await anyio.sleep_forever()
        finally:
            self.bench.on = False

    async def rollback(self) -> RollbackReport:
        self.bench.rollbacks += 1
        self.bench.events.append("rollback")
        if self.behaviour == "slow-rollback":
            await anyio.sleep(60)
        if self.behaviour == "raise-rollback":
            raise RuntimeError("rollback exploded")
        self.bench.alive = False
        self.bench.on = False
        self.bench.rollback_finished += 1
        return RollbackReport(True, "fake candidate stopped")


@dataclass
class FakeMonitor:
    bench: Bench
    # good | nan | garbage | empty | slow | raise | sleepless | stall-on | sparse-on | spiky (the resident's
    # own tail: a window in three holds a request 3 × slower, with the candidate or without it)
    behaviour: str = "good"
    seed: int = 0
    samples_per_window: int = 30
    name: str = "fake-monitor"
    simulated: bool = False
    windows: int = 0
    opened: bool = False
    closed: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    async def open(self) -> None:
        self.opened = True

    async def measure(self, duration_s: float) -> WindowSample:
        self.windows += 1
        if self.behaviour == "slow":
            await anyio.sleep(duration_s * 50)
        elif self.behaviour != "sleepless":
            await anyio.sleep(duration_s)
        if self.behaviour == "raise":
            raise ConnectionError("metrics endpoint went away")
        if self.behaviour == "empty":
            return WindowSample([], duration_s)
        if self.behaviour == "nan":
            return WindowSample([math.nan] * self.samples_per_window, duration_s)
        if self.behaviour == "garbage":
            return WindowSample(["fast", None, -3, 1.0], duration_s)
        if self.behaviour == "stall-on" and self.bench.on:
            # Requests outstanding past their timeout: the monitor says the resident stalled.
            return WindowSample([], duration_s, note="3 requests past their timeout", stalled=True)
        if self.behaviour == "sparse-on" and self.bench.on:
            # Only one request completed, none outstanding: too little data, not harm.
            return WindowSample([self.bench.base_ms], duration_s)
        factor = 1.0 + (self.bench.slowdown_pct / 100.0 if self.bench.on else 0.0)
        mean = self.bench.base_ms * factor
        values = [self.rng.gauss(mean, mean * 0.05) for _ in range(self.samples_per_window)]
        if self.behaviour == "spiky" and self.rng.random() < 1 / 3:
            values[0] = 3 * mean
        return WindowSample(values, duration_s)

    async def close(self) -> None:
        self.closed = True
