"""The orchestrator as state-transition cases, with misbehaving executors/monitors and the simulator."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from canary.errors import ProbeError
from canary.policy import RiskBudget
from canary.probe import make_executor, make_monitor
from canary.probe.interfaces import WindowSample
from canary.probe.journal import MemoryJournal
from canary.probe.orchestrator import (
    TRANSITIONS,
    ProbeProgress,
    ProbeResult,
    RollbackFailed,
    _Run,
    run_probe,
)
from tests.probe.doubles import Bench, FakeExecutor, FakeMonitor

ROOT = Path(__file__).resolve().parents[2]


def budget(**changes: object) -> RiskBudget:
    base: dict[str, object] = {
        "max_probe_time_s": 3.0,
        "max_requests_exposed": 2000,
        "max_resident_slowdown_pct": 10.0,
        "required_confidence": 0.95,
        "baseline_window_s": 0.03,
        "sampling_window_s": 0.03,
        "min_windows": 2,
        # A safe verdict then needs ceil(log 0.05 / log 0.6) = 6 usable pairs, which fits the short budget.
        "judge_burst_rate": 0.4,
    }
    base.update(changes)
    return RiskBudget.model_validate(base)


def states(result: ProbeResult) -> list[str]:
    return [t.state for t in result.transitions]


def compact(result: ProbeResult) -> list[str]:
    """The state path with PROBING ⇄ JUDGING loops collapsed."""
    out: list[str] = []
    for s in states(result):
        if out[-2:] == ["PROBING", "JUDGING"] and s == "PROBING":
            out.pop()
            continue
        if not out or out[-1] != s:
            out.append(s)
    return out


async def probe(executor: FakeExecutor, monitor: FakeMonitor, **kw: object) -> ProbeResult:
    b = kw.pop("budget", budget())
    assert isinstance(b, RiskBudget)
    return await run_probe(probe_id="t1", budget=b, executor=executor, monitor=monitor, **kw)  # type: ignore[arg-type]


CASES = [
    # (name, slowdown %, executor behaviour, monitor behaviour, slo, outcome, path, reason fragment)
    (
        "safe",
        0.0,
        "good",
        "good",
        None,
        "safe",
        ["PENDING", "BASELINE", "PROBING", "JUDGING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "decided: safe",
    ),
    (
        "unsafe",
        20.0,
        "good",
        "good",
        None,
        "unsafe",
        ["PENDING", "BASELINE", "PROBING", "JUDGING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "decided: unsafe",
    ),
    (
        "guard trip",
        500.0,
        "good",
        "good",
        None,
        "unsafe",
        ["PENDING", "BASELINE", "PROBING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "slowdown-guard",
    ),
    (
        "slo breach",
        20.0,
        "good",
        "good",
        11.5,
        "unsafe",
        ["PENDING", "BASELINE", "PROBING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "slo-breach",
    ),
    (
        "slo already breached",
        0.0,
        "good",
        "good",
        5.0,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "breaches its SLO alone",
    ),
    (
        "baseline no data",
        0.0,
        "good",
        "empty",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "unmeasurable: the resident gave no usable requests",
    ),
    (
        "baseline NaN only",
        0.0,
        "good",
        "nan",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "unmeasurable",
    ),
    (
        "garbage",
        0.0,
        "good",
        "garbage",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "not a number",
    ),
    (
        "monitor raises",
        0.0,
        "good",
        "raise",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "metrics endpoint went away",
    ),
    (
        "start fails",
        0.0,
        "fail-start",
        "good",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "crashed on start",
    ),
    (
        "hang on start",
        0.0,
        "hang-start",
        "good",
        None,
        "aborted",
        ["PENDING", "BASELINE", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "deadline",
    ),
    (
        "hang on prepare",
        0.0,
        "hang-prepare",
        "good",
        None,
        "aborted",
        ["PENDING", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "deadline",
    ),
    (
        "dies mid-probe",
        5.0,
        "die-after",
        "good",
        None,
        "aborted",
        ["PENDING", "BASELINE", "PROBING", "ABORTED", "ROLLED_BACK", "RECORDED"],
        "died mid-probe",
    ),
    (
        "stall with canary on",
        0.0,
        "good",
        "stall-on",
        None,
        "unsafe",
        ["PENDING", "BASELINE", "PROBING", "JUDGING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "resident was stalled",
    ),
    (
        "sparse on-windows are no data, not harm",
        0.0,
        "good",
        "sparse-on",
        None,
        "inconclusive",
        ["PENDING", "BASELINE", "PROBING", "JUDGING", "DECIDED", "ROLLED_BACK", "RECORDED"],
        "no-data",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "slowdown", "ex", "mon", "slo", "outcome", "path", "fragment"), CASES, ids=[c[0] for c in CASES]
)
async def test_state_transitions(
    name: str,
    slowdown: float,
    ex: str,
    mon: str,
    slo: float | None,
    outcome: str,
    path: list[str],
    fragment: str,
) -> None:
    bench = Bench(slowdown_pct=slowdown)
    executor = FakeExecutor(bench, behaviour=ex, die_after_windows=2)
    monitor = FakeMonitor(bench, behaviour=mon, seed=4)
    b = budget(max_probe_time_s=0.5) if ex.startswith("hang") or mon == "sparse-on" else budget()
    result = await probe(executor, monitor, budget=b, slo_latency_p99_ms=slo)
    assert result.outcome == outcome, result.transitions
    assert compact(result) == path
    assert fragment in result.rollback_reason or any(fragment in t.message for t in result.transitions)
    # Rollback ran exactly once, and every transition is allowed by the table.
    assert bench.rollbacks == 1 and result.rollback_verified
    for a, b2 in zip(states(result), states(result)[1:], strict=False):
        assert b2 in TRANSITIONS[a]  # type: ignore[index]
    assert monitor.closed
    assert not bench.alive


def test_transition_table_is_closed_and_ends_in_recorded() -> None:
    assert set(TRANSITIONS) == {s for targets in TRANSITIONS.values() for s in targets} | {"PENDING"}
    assert TRANSITIONS["RECORDED"] == frozenset()
    assert TRANSITIONS["DECIDED"] == TRANSITIONS["ABORTED"] == frozenset({"ROLLED_BACK"})


def test_an_illegal_transition_is_refused() -> None:
    from canary.probe.orchestrator import InvalidTransition

    bench = Bench()
    run = _Run("x", budget(), FakeExecutor(bench), FakeMonitor(bench), None, {}, "me", None, None, 10.0, 1.0, 0)
    run.go("PENDING", "")
    with pytest.raises(InvalidTransition):
        run.go("DECIDED", "skipping the probe")


@pytest.mark.anyio
async def test_exposure_cap_holds_against_a_greedy_executor() -> None:
    bench = Bench(slowdown_pct=5.0)
    result = await probe(
        FakeExecutor(bench, behaviour="greedy"), FakeMonitor(bench), budget=budget(max_requests_exposed=7)
    )
    assert result.exposure_used == 7
    assert bench.sent == 7
    assert result.outcome in ("inconclusive", "safe", "unsafe")


@pytest.mark.anyio
async def test_exposure_budget_spent_ends_in_a_final_judgment() -> None:
    bench = Bench(slowdown_pct=9.0)
    result = await probe(
        FakeExecutor(bench, request_interval_s=0.01),
        FakeMonitor(bench),
        budget=budget(max_requests_exposed=4),
    )
    assert result.exposure_used == 4
    assert any("exposure budget spent" in t.message for t in result.transitions)


@pytest.mark.anyio
async def test_time_budget_spent_gives_inconclusive_near_the_bound() -> None:
    bench = Bench(slowdown_pct=10.0)
    result = await probe(FakeExecutor(bench), FakeMonitor(bench), budget=budget(max_probe_time_s=0.3))
    assert result.outcome == "inconclusive"
    # What the probe recorded: it stopped at the deadline (not a window later) and judged what it had.
    assert 1 <= result.window_pairs <= 0.3 / (2 * 0.75 * 0.03)  # windows last >= 0.75 × 0.03 s
    assert any("time budget spent" in t.message or "deadline reached" in t.message for t in result.transitions)
    assert result.judgment is not None and result.judgment.label == "inconclusive"


@pytest.mark.anyio
async def test_slow_monitor_is_cut_by_the_deadline() -> None:
    bench = Bench()
    result = await probe(
        FakeExecutor(bench), FakeMonitor(bench, behaviour="slow"), budget=budget(max_probe_time_s=0.4)
    )
    assert result.outcome == "aborted"
    # The monitor's window would take 50 × longer than the budget: the deadline cut it, as recorded.
    assert any("deadline" in t.message for t in result.transitions)
    assert result.windows == 0  # not one window completed
    assert bench.rollbacks == 1


@pytest.mark.anyio
async def test_a_rollback_that_hangs_is_bounded_and_reported_unverified() -> None:
    bench = Bench()
    with pytest.raises(RollbackFailed) as info:
        await probe(FakeExecutor(bench, behaviour="slow-rollback"), FakeMonitor(bench), rollback_grace_s=0.2)
    result = info.value.result
    assert not result.rollback_verified
    assert "did not finish within 0.2 s" in result.rollback_detail
    assert isinstance(info.value, ProbeError) and info.value.exit_code == 4


@pytest.mark.anyio
async def test_a_rollback_that_raises_is_reported_unverified() -> None:
    bench = Bench()
    with pytest.raises(RollbackFailed, match="rollback exploded"):
        await probe(FakeExecutor(bench, behaviour="raise-rollback"), FakeMonitor(bench))


@pytest.mark.anyio
async def test_cancellation_rolls_back_records_and_propagates() -> None:
    bench = Bench(slowdown_pct=10.0)
    journal = MemoryJournal()
    with anyio.move_on_after(0.15) as scope:
        await probe(
            FakeExecutor(bench), FakeMonitor(bench), budget=budget(max_probe_time_s=30), journal=journal
        )
    assert scope.cancelled_caught
    assert bench.rollbacks == 1 and bench.rollback_finished == 1
    assert journal.rows["t1"].state == "aborted"
    assert journal.rows["t1"].result_json is not None
    assert journal.rows["t1"].result_json["rollback_reason"].startswith(
        "cancelled from outside the probe (Ctrl-C or SIGTERM to the job, a service shutting down, or a cancel request)")


@pytest.mark.anyio
async def test_keyboard_interrupt_rolls_back_and_propagates() -> None:
    bench = Bench(slowdown_pct=10.0)

    class Interrupting(FakeMonitor):
        async def measure(self, duration_s: float):  # type: ignore[no-untyped-def]
            if self.windows >= 3:
                raise KeyboardInterrupt
            return await super().measure(duration_s)

    with pytest.raises((KeyboardInterrupt, BaseExceptionGroup)):
        await probe(FakeExecutor(bench), Interrupting(bench), budget=budget(max_probe_time_s=30))
    assert bench.rollbacks == 1 and not bench.alive


@pytest.mark.anyio
async def test_journal_written_before_start_heartbeats_and_finished() -> None:
    bench = Bench()
    journal = MemoryJournal()
    result = await probe(
        FakeExecutor(bench), FakeMonitor(bench), journal=journal, key_json={"k": "v"}, owner="o1"
    )
    row = journal.rows["t1"]
    assert bench.events.index("start") > 0 and journal.events[0] == ("start", "t1")
    assert (row.owner, row.key_json, row.pgid) == ("o1", {"k": "v"}, 0)
    assert row.heartbeats >= 1
    assert row.state == "recorded" and row.result_json is not None
    assert row.result_json["outcome"] == result.outcome == "safe"
    assert states(result)[-1] == "RECORDED"


@pytest.mark.anyio
async def test_progress_reports_time_exposure_and_estimate() -> None:
    bench = Bench(slowdown_pct=2.0)
    seen: list[ProbeProgress] = []
    result = await probe(FakeExecutor(bench), FakeMonitor(bench), progress=seen.append)
    assert seen[0].state == "PENDING" and seen[-1].state == "RECORDED"
    assert seen[-1].exposure_used == result.exposure_used > 0
    assert any(p.estimate_pct is not None for p in seen)
    assert all(p.max_requests_exposed == 2000 for p in seen)


@pytest.mark.anyio
async def test_summary_dict_fits_the_certificate_model() -> None:
    from canary.certificate import ProbeSummary

    bench = Bench(slowdown_pct=20.0)
    result = await probe(FakeExecutor(bench), FakeMonitor(bench))
    summary = ProbeSummary.model_validate(result.to_summary_dict())
    assert summary.outcome == "unsafe" and summary.exposure_used == result.exposure_used
    assert summary.slowdown_interval_pct is not None and all(
        map(math.isfinite, summary.slowdown_interval_pct)
    )


# --- with the simulator ---------------------------------------------------------------------------


def _sim_pair(resident: str, candidate: str, regime: str = "timeslice", seed: int = 1):  # type: ignore[no-untyped-def]
    from canary.catalog import lookup
    from canary.policy import load_policy
    from canary.profile import load_profile
    from canary.sim import SimDevice

    dev = SimDevice(lookup("h100-sxm"), seed=seed, regime=regime)
    res = load_profile(ROOT / "examples" / "profiles" / resident)
    cand = load_profile(ROOT / "examples" / "profiles" / candidate)
    policy = load_policy()
    return dev, res, cand, policy


@pytest.mark.anyio
async def test_sim_probe_runs_in_simulated_time_and_restores_the_device() -> None:
    dev, res, cand, policy = _sim_pair("resnet50-training.yaml", "embedding-service.yaml")
    handles_before = dev.handles()
    result = await run_probe(
        probe_id="sim1",
        budget=policy.budget_for(res.workload_class),
        executor=make_executor(cand, policy=policy, sim_device=dev),
        monitor=make_monitor(res, sim_device=dev),
    )
    assert result.simulated
    assert result.outcome in ("safe", "unsafe", "inconclusive")
    assert result.time_used_s >= policy.budget_for(res.workload_class).baseline_window_s
    # Simulated seconds: every window advanced the simulated clock by at least 0.75 of its nominal length.
    b = policy.budget_for(res.workload_class)
    assert result.window_s is not None and result.window_plan
    assert result.time_used_s >= b.baseline_window_s + (result.windows - 1) * 0.75 * result.window_s
    assert result.rollback_verified and "memory" in result.rollback_detail
    assert dev.handles() == handles_before  # the monitor placed the resident and removed it again
    assert result.exposure_used <= policy.budget_for(res.workload_class).max_requests_exposed


@pytest.mark.anyio
async def test_sim_probe_respects_a_tiny_exposure_cap() -> None:
    dev, res, cand, policy = _sim_pair("resnet50-training.yaml", "embedding-service.yaml")
    b = policy.budget_for(res.workload_class).override(max_requests_exposed=25)
    result = await run_probe(
        probe_id="sim2",
        budget=b,
        executor=make_executor(cand, policy=policy, sim_device=dev),
        monitor=make_monitor(res, sim_device=dev),
    )
    assert result.exposure_used <= 25


def test_factories_pick_by_profile_and_fail_clearly() -> None:
    dev, res, cand, policy = _sim_pair("embedding-service.yaml", "embedding-service.yaml")
    assert make_executor(cand, policy=policy, sim_device=dev).name == "sim"
    assert make_monitor(res, sim_device=dev).name == "sim"
    with pytest.raises(ProbeError, match="needs a simulated device"):
        make_executor(cand, policy=policy)
    process = cand.model_copy(
        update={
            "canary": cand.canary.model_copy(
                update={"executor": "process", "command": ("true",), "endpoint": None}
            )
        }
    )
    with pytest.raises(ProbeError, match=r"needs canary\.endpoint"):
        make_executor(process, policy=policy)


def test_sim_links_are_shared_per_device_and_forgotten_with_it() -> None:
    import gc

    from canary.probe import simlink

    class Device:
        pass

    a, b = Device(), Device()
    assert simlink.link_for(a) is simlink.link_for(a)
    assert simlink.link_for(a) is not simlink.link_for(b)
    key = id(a)
    del a
    gc.collect()
    assert key not in simlink._LINKS


@pytest.mark.anyio
async def test_a_failing_progress_display_never_decides_the_probe() -> None:
    """A display whose terminal is gone (a closed pipe, ``| head``) stops being called; the probe goes on
    to the verdict it would have reached, and the failure is noted in its last transition."""
    bench = Bench()
    calls: list[str] = []

    def broken(p: ProbeProgress) -> None:
        calls.append(p.state)
        if p.state == "PROBING":
            raise BrokenPipeError("terminal gone")

    result = await probe(FakeExecutor(bench), FakeMonitor(bench), progress=broken)
    quiet = await probe(FakeExecutor(Bench()), FakeMonitor(Bench()))
    assert result.outcome == quiet.outcome == "safe"
    assert "terminal gone" not in result.rollback_reason
    assert "progress display raised BrokenPipeError: terminal gone" in result.transitions[-1].message
    assert bench.rollbacks == 1 and result.rollback_verified
    assert calls[-1] == "PROBING"  # never called again after it failed
    assert states(result)[-1] == "RECORDED"


@pytest.mark.anyio
async def test_an_slo_breach_the_resident_makes_alone_is_not_recorded_against_the_candidate() -> None:
    """The resident's own tail breaches its SLO in a third of its windows with no candidate at all: the
    SLO rule stops the candidate's load each time, the attribution test finds the resident's own windows
    breach as often, and the probe resumes instead of recording *unsafe*."""
    bench = Bench(slowdown_pct=0.0)
    monitor = FakeMonitor(bench, behaviour="spiky", seed=3, samples_per_window=50)
    result = await probe(FakeExecutor(bench), monitor, budget=budget(max_probe_time_s=8.0),
                         slo_latency_p99_ms=bench.base_ms * 2)
    assert result.outcome != "unsafe", result.rollback_reason
    assert result.attribution is not None and "not attributable to the candidate" in result.attribution
    resumed = [t for t in result.transitions if "not the candidate's, the probe resumes" in t.message]
    assert resumed and bench.rollbacks == 1


@pytest.mark.anyio
async def test_an_slo_breach_the_candidate_causes_is_attributed_and_recorded_unsafe() -> None:
    bench = Bench(slowdown_pct=300.0)
    monitor = FakeMonitor(bench, behaviour="good", seed=3, samples_per_window=50)
    result = await probe(FakeExecutor(bench), monitor, budget=budget(max_probe_time_s=8.0),
                         slo_latency_p99_ms=bench.base_ms * 2)
    assert result.outcome == "unsafe" and result.judgment is not None and result.judgment.rule == "slo"
    assert result.attribution is not None and result.attribution.startswith("attributed to the candidate")
    assert result.to_summary_dict()["attribution"] == result.attribution


@pytest.mark.anyio
async def test_an_attributed_slo_breach_within_the_bound_is_no_headroom_not_unsafe() -> None:
    """A resident whose own p99 sits just under its SLO (about 1.12 × its mean against an SLO of 1.15 ×):
    a 5% slowdown, half the 10% bound, pushes almost every window with the candidate over it and few
    without. The breaches *are* the candidate's — but the slowdown is one the bound allows, so the
    resident has no SLO headroom now: inconclusive, nothing unsafe recorded against the pair."""
    bench = Bench(slowdown_pct=5.0)
    monitor = FakeMonitor(bench, behaviour="good", seed=5, samples_per_window=50)
    result = await probe(FakeExecutor(bench), monitor, budget=budget(max_probe_time_s=8.0),
                         slo_latency_p99_ms=bench.base_ms * 1.15)
    assert result.outcome == "inconclusive", result.rollback_reason
    assert result.judgment is not None and result.judgment.rule == "slo"
    assert result.judgment.reason.startswith("no SLO headroom: slo-breach")
    assert result.attribution is not None and result.attribution.startswith("attributed to the candidate")
    assert result.slowdown_estimate_pct is not None and result.slowdown_estimate_pct < 10.0
    assert bench.rollbacks == 1 and result.rollback_verified


def test_a_judge_that_finds_unsafe_when_unattributed_breaches_end_the_probe_decides_by_its_own_rule() -> None:
    """Twelve pairs, the resident twice as slow with the candidate (0.5 ms spread): the judge's test
    rejects 'within 10%'. The SLO tally has more breaches with the candidate than without (12 to 5,
    excess 7 > MAX_EXCESS 6) but not attributable (1.9¹² × 0.1⁵ ≈ 0.02, far below 1/α = 20), so the
    excess cap ends the probe. The verdict is the judge's: rule ``judge`` and its reason first, the cap
    only as why the probe ended then — not an SLO rollback 'not attributable to the candidate' that
    is nonetheless unsafe."""
    import random

    from canary.probe.attribution import MAX_EXCESS, ExceedanceTally
    from canary.probe.judge import WindowPair
    from canary.probe.orchestrator import _Stop

    bench = Bench()
    run = _Run("x", budget(), FakeExecutor(bench), FakeMonitor(bench), None, {}, "me", None, None, 10.0, 1.0, 0)
    for state in ("PENDING", "BASELINE", "PROBING", "JUDGING"):
        run.go(state, "")
    rng = random.Random(7)
    run.pairs = [WindowPair([rng.gauss(10.0, 0.5) for _ in range(30)], [rng.gauss(20.0, 0.5) for _ in range(30)])
                 for _ in range(12)]
    tally = ExceedanceTally("slo")
    for on_over, off_over in [(True, False)] * 12 + [(False, True)] * 5:
        tally = tally.add(on_over=on_over, off_over=off_over)
    run.tallies = {"slo": tally, "guard": ExceedanceTally("guard")}
    assert tally.on_only - tally.off_only > MAX_EXCESS
    with pytest.raises(_Stop):
        run.settle(("slo-breach: resident p99 25.00 ms > SLO 15 ms with the canary on", "slo"))
    assert run.outcome == "unsafe"
    assert run.judgment is not None and run.judgment.rule == "judge"
    assert run.judgment.reason.startswith("slowdown ")
    assert "the test rejects 'within 10%'" in run.judgment.reason
    assert "the probe ended here: slo-breach" in run.judgment.reason and "not attributable" in run.judgment.reason


@pytest.mark.anyio
async def test_a_prior_reaches_the_judge_and_its_verdict_says_so() -> None:
    from canary.probe.judge import SlowdownPrior

    bench = Bench(slowdown_pct=0.0)
    result = await probe(FakeExecutor(bench), FakeMonitor(bench), prior=SlowdownPrior(mean_pct=0.0, sd_pct=2.0))
    plain = await probe(FakeExecutor(Bench()), FakeMonitor(Bench()))
    assert result.outcome == plain.outcome == "safe"
    assert result.judgment is not None and "prior" in result.judgment.reason
    assert plain.judgment is not None and "prior" not in plain.judgment.reason


@pytest.mark.anyio
async def test_a_washout_comes_before_every_off_window_that_follows_an_on_window_and_nowhere_else() -> None:
    """The plan's washout (4 × the resident's p99 alone: about 4 × 11 ms here, longer than any 22–38 ms
    window) is measured with the candidate stopped exactly where an off-window would otherwise begin
    while the candidate's backlog is still being served, and is never judged."""
    seen: list[tuple[bool, float]] = []

    class Recording(FakeMonitor):
        async def measure(self, duration_s: float) -> WindowSample:
            seen.append((self.bench.on, duration_s))
            return await super().measure(duration_s)

    bench = Bench(slowdown_pct=0.0)
    result = await probe(FakeExecutor(bench), Recording(bench))
    assert result.outcome == "safe"
    longest_window = 0.03 * 1.25
    kinds = ["on" if on else ("washout" if d > longest_window + 1e-9 else "off") for on, d in seen[1:]]
    assert "washout" in kinds
    for before, now, after in zip(kinds, kinds[1:], kinds[2:], strict=False):
        if now == "washout":
            assert (before, after) == ("on", "off")
        if before == "on" and now != "on":
            assert now == "washout"
    # every pair is one off- and one on-window; washouts are windows too, but no pair's
    assert result.window_pairs == kinds.count("on") == kinds.count("off")
    assert result.windows == 1 + len(kinds)


@pytest.mark.anyio
async def test_a_bursty_residents_slowdown_is_seen_through_its_gaps() -> None:
    """A resident that serves its requests in 2 s bursts every 5 s, near saturation in a burst (the
    benchmark's ``temporal`` family), beside a DRAM-streaming batch candidate under MPS: its true mean
    latency slowdown is over 100% (about 140% over 300 simulated seconds). Windows span its 5 s cycle
    and a one-cycle washout follows each on-window: without them windows shorter than the cycle fall in
    its gaps and the backlog an on-window leaves is served in the next off-window, and the estimate came
    out near 0% (canary bench, docs/benchmark.md)."""
    from canary.bench.profiles import bursty_serving
    from canary.probe.plan import TimeStructure

    dev, _, cand, policy = _sim_pair("embedding-service.yaml", "etl-transcode.yaml", regime="mps:40", seed=11)
    res = bursty_serving()
    result = await run_probe(
        probe_id="bursty",
        budget=policy.budget_for(res.workload_class),
        executor=make_executor(cand, policy=policy, sim_device=dev),
        monitor=make_monitor(res, sim_device=dev),
        structure=TimeStructure.of(cand, res),
        slo_latency_p99_ms=None,
        schedule_seed=11,
    )
    assert result.window_s == 5.0 and result.window_plan is not None and "washout of 5 s" in result.window_plan
    # 2 × 1.25 × 5 s + 5 s = 17.5 s a pair at most: 240 s hold 13, fewer than the burst rule's 59 — known
    # before the candidate started, and kept in the certificate's summary.
    assert result.safe_reachable is False and result.to_summary_dict()["safe_reachable"] is False
    assert "the budget holds 13 pairs, fewer than the 59 usable pairs the burst rule needs" in result.window_plan
    assert result.outcome == "unsafe", result.rollback_reason
    assert result.slowdown_estimate_pct is not None and result.slowdown_estimate_pct > 50.0
