"""Budget invariants as properties, under adversarial executors and monitors.

Whatever the executor and monitor do (hang on start, lie about their requests, die mid-probe, answer
slowly, return NaN or garbage, raise, get cancelled from outside):

- exposure never exceeds ``max_requests_exposed``;
- wall time stays within ``max_probe_time_s`` + the documented grace (≤ 2 s) — plus a scheduling
  slack for a starved CI process (``tests/support/timing.py``) that every adversary here would
  overrun by far if the bound were broken;
- rollback always runs, exactly once;
- the candidate never outlives the probe.

The last two are also checked with a real subprocess that ignores SIGTERM.
"""

from __future__ import annotations

import time

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canary.policy import RiskBudget
from canary.probe.executors.process import ProcessExecutor
from canary.probe.journal import MemoryJournal
from canary.probe.orchestrator import ProbeResult, RollbackFailed, run_probe
from canary.probe.procs import group_alive
from tests.support.doubles import Bench, FakeExecutor, FakeMonitor
from tests.support.helpers import candidate_profile, free_port
from tests.support.timing import SCHEDULING_SLACK_S

GRACE_S = 2.0

EXECUTORS = [
    "good",
    "hang-prepare",
    "hang-start",
    "fail-start",
    "greedy",
    "die-after",
    "slow-rollback",
    "raise-rollback",
]
MONITORS = ["good", "nan", "garbage", "empty", "slow", "raise", "sleepless", "stall-on"]


@st.composite
def budgets(draw: st.DrawFn) -> RiskBudget:
    max_time = draw(st.floats(0.05, 0.5))
    window = draw(st.floats(0.005, max_time))
    return RiskBudget(
        max_probe_time_s=max_time,
        max_requests_exposed=draw(st.integers(1, 80)),
        max_resident_slowdown_pct=draw(st.floats(1.0, 50.0)),
        required_confidence=draw(st.floats(0.8, 0.99)),
        baseline_window_s=draw(st.floats(0.005, max_time)),
        sampling_window_s=window,
        min_windows=draw(st.integers(1, 4)),
    )


@pytest.mark.slow
@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    budget=budgets(),
    executor_behaviour=st.sampled_from(EXECUTORS),
    monitor_behaviour=st.sampled_from(MONITORS),
    slowdown_pct=st.floats(0.0, 800.0),
    cancel_after_s=st.one_of(st.none(), st.floats(0.0, 0.4)),
    seed=st.integers(0, 2**16),
)
def test_budget_invariants_hold_against_adversaries(
    budget: RiskBudget,
    executor_behaviour: str,
    monitor_behaviour: str,
    slowdown_pct: float,
    cancel_after_s: float | None,
    seed: int,
) -> None:
    bench = Bench(slowdown_pct=slowdown_pct)
    executor = FakeExecutor(
        bench, behaviour=executor_behaviour, die_after_windows=1, request_interval_s=0.0005
    )
    monitor = FakeMonitor(bench, behaviour=monitor_behaviour, seed=seed)
    journal = MemoryJournal()
    outcome: dict[str, object] = {}

    async def main() -> None:
        try:
            with anyio.move_on_after(cancel_after_s if cancel_after_s is not None else 3600):
                outcome["result"] = await run_probe(
                    probe_id="prop",
                    budget=budget,
                    executor=executor,
                    monitor=monitor,
                    journal=journal,
                    rollback_grace_s=0.3,
                )
        except RollbackFailed as exc:
            outcome["failed"] = exc.result

    began = time.monotonic()
    anyio.run(main)
    wall_s = time.monotonic() - began

    assert wall_s <= budget.max_probe_time_s + GRACE_S + SCHEDULING_SLACK_S
    assert bench.rollbacks == 1  # rollback always runs, exactly once
    assert bench.sent <= budget.max_requests_exposed
    result = outcome.get("result") or outcome.get("failed")
    if isinstance(result, ProbeResult):
        assert result.exposure_used <= budget.max_requests_exposed
        assert result.exposure_used == bench.sent
        assert result.transitions[-1].state == "RECORDED"
        assert result.outcome != "safe" or monitor_behaviour in ("good", "sleepless", "slow")
    if executor_behaviour in ("slow-rollback", "raise-rollback"):
        # The fake candidate's rollback never completed: the probe must say so, never pretend.
        assert "result" not in outcome
    else:
        assert not bench.alive  # the candidate never outlives the probe
        assert bench.rollback_finished == 1
    if journal.rows:
        assert journal.rows["prop"].state != "running"


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_probe_time_s=st.floats(0.6, 1.5),
    cancel_after_s=st.one_of(st.none(), st.floats(0.1, 1.0)),
)
def test_a_real_candidate_ignoring_sigterm_never_outlives_the_probe(
    max_probe_time_s: float, cancel_after_s: float | None
) -> None:
    port = free_port()
    executor = ProcessExecutor(
        candidate_profile(port, "--ignore-sigterm", "--burners", "1"),
        mps_active_thread_pct=50,
        term_grace_s=0.3,
    )
    bench = Bench()
    budget = RiskBudget(
        max_probe_time_s=max_probe_time_s,
        max_requests_exposed=20,
        max_resident_slowdown_pct=10,
        required_confidence=0.9,
        baseline_window_s=0.05,
        sampling_window_s=0.05,
    )
    journal = MemoryJournal()

    async def main() -> None:
        with anyio.move_on_after(cancel_after_s if cancel_after_s is not None else 3600):
            await run_probe(
                probe_id="real", budget=budget, executor=executor, monitor=FakeMonitor(bench), journal=journal
            )

    began = time.monotonic()
    anyio.run(main)
    assert time.monotonic() - began <= max_probe_time_s + GRACE_S + SCHEDULING_SLACK_S
    assert executor.pgid is not None and not group_alive(executor.pgid)
    assert executor.requests_sent <= 20
    assert journal.rows["real"].state in ("recorded", "aborted")
