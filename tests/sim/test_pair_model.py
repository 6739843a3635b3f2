"""The time-sliced pair model, the Gavel-format loader and the calibrated regime.

Expected slowdowns are worked out by hand from the schedule each case describes (two jobs taking
turns on one GPU), not read from the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from canary.errors import InputError
from canary.sim.gavel import gavel_gpus, jobs_never_alone, load_gavel_pairs, load_isolated
from canary.sim.gavel_profiles import MIN_GPU_FRACTION
from canary.sim.pair_model import PairModelParams, device_jobs, predict_slowdowns

FIXTURE = Path(__file__).parent / "fixtures" / "gavel_small.json"


def _params(
    slice_ms: float = 1000.0,
    switch_us: float = 0.0,
    host_contention: float = 0.0,
    overlap: float = 0.0,
    serial: float = 1.0,
) -> PairModelParams:
    return PairModelParams(slice_ms, switch_us, host_contention, overlap, serial)


@pytest.mark.parametrize(
    ("params", "a", "b", "want_a", "want_b"),
    [
        # Two GPU-bound 100 ms steps, slice longer than a step: they alternate, each at half speed.
        pytest.param(_params(), (100, 0), (100, 0), 100.0, 100.0, id="equal-gpu-bound-halve"),
        # 10 ms steps, 1 ms lost at each of the two switches per round: round 22 ms for 10 ms of work.
        pytest.param(_params(switch_us=1000), (10, 0), (10, 0), 120.0, 120.0, id="switch-cost"),
        # 5 ms steps next to 500 ms ones with a 20 ms slice: each 5 ms step waits a whole 20 ms slice
        # (round 25 ms: 400%); the long job loses 5 ms per 20 ms it runs (25%).
        pytest.param(_params(slice_ms=20), (5, 0), (500, 0), 400.0, 25.0, id="short-step-loses"),
        # 50 ms host + 50 ms GPU each: one's host work hides behind the other's GPU work. No loss.
        pytest.param(_params(), (100, 50), (100, 50), 0.0, 0.0, id="host-gaps-interleave"),
        # 80 ms host + 20 ms GPU each, host phases on one CPU set: 80 + 80 ms of host work per
        # 160 ms period, one step each: 60%. On independent CPUs: no loss.
        pytest.param(_params(serial=1.0), (100, 80), (100, 80), 60.0, 60.0, id="host-serialized"),
        pytest.param(_params(serial=0.0), (100, 80), (100, 80), 0.0, 0.0, id="host-independent"),
        # Half of the co-runner's chunk overlaps: 100 + 50 ms per 100 ms step.
        pytest.param(_params(overlap=0.5), (100, 0), (100, 0), 50.0, 50.0, id="half-overlap"),
        # Host time stretched by 1 + 1 x (other's host fraction 0.5) = 75 ms; independent CPUs:
        # the period is 50 GPU + 75 host = 125 ms.
        pytest.param(
            _params(host_contention=1.0, serial=0.0), (100, 50), (100, 50), 25.0, 25.0, id="host-contention"
        ),
    ],
)
def test_schedules_worked_by_hand(
    params: PairModelParams, a: tuple[float, float], b: tuple[float, float], want_a: float, want_b: float
) -> None:
    pa, pb = predict_slowdowns(
        params, np.array([a[0]], float), np.array([a[1]], float), np.array([b[0]], float), np.array([b[1]], float)
    )
    assert pa[0] * 100 == pytest.approx(want_a, abs=1e-9)
    assert pb[0] * 100 == pytest.approx(want_b, abs=1e-9)


def test_two_jobs_can_do_less_than_one_machine() -> None:
    """The shipped model could never predict this; 43% of Gavel's V100 pairs show it."""
    pa, pb = predict_slowdowns(
        _params(switch_us=1000), np.array([10.0]), np.array([0.0]), np.array([10.0]), np.array([0.0])
    )
    assert 1 / (1 + pa[0]) + 1 / (1 + pb[0]) < 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"timeslice_ms": 0.0}, id="zero-slice"),
        pytest.param({"context_switch_us": -1.0}, id="negative-switch"),
        pytest.param({"overlap": 1.0}, id="full-overlap"),
        pytest.param({"host_serialization": 1.5}, id="serialization-above-one"),
    ],
)
def test_parameters_are_validated(kwargs: dict[str, float]) -> None:
    base = {"timeslice_ms": 10.0, "context_switch_us": 0.0, "host_contention": 0.0, "overlap": 0.0}
    with pytest.raises(ValueError):
        PairModelParams(**{**base, **kwargs})


def test_host_time_is_held_fixed_across_devices() -> None:
    v100, _ = device_jobs({"ResNet-50 (batch size 32)": 8.0})
    slower, _ = device_jobs({"ResNet-50 (batch size 32)": 4.0})
    a, b = v100["ResNet-50 (batch size 32)"], slower["ResNet-50 (batch size 32)"]
    assert a.host_ms == pytest.approx(b.host_ms)
    assert a.step_ms == pytest.approx(125.0) and b.step_ms == pytest.approx(250.0)
    # The slower device's extra 125 ms is all GPU time.
    assert b.gpu_ms - a.gpu_ms == pytest.approx(125.0)


def test_gpu_time_has_a_floor_and_unknown_jobs_are_said() -> None:
    # ResNet-18 b=32 has ~25 ms of fixed host time; a 20 ms step on a faster host cannot hold it.
    jobs, assumptions = device_jobs({"ResNet-18 (batch size 32)": 50.0, "Mystery (batch size 8)": 10.0})
    fast = jobs["ResNet-18 (batch size 32)"]
    assert fast.gpu_ms == pytest.approx(MIN_GPU_FRACTION * 20.0)
    assert fast.host_ms + fast.gpu_ms == pytest.approx(20.0)
    assert jobs["Mystery (batch size 8)"].host_ms == pytest.approx(10.0)  # 0.1 of its 100 ms step
    assert assumptions == ["Mystery (batch size 8): no profile; host time assumed 0.1 of its step"]


def test_loader_reads_single_gpu_entries_only() -> None:
    raw = json.loads(FIXTURE.read_text())
    assert gavel_gpus(FIXTURE) == ["v100", "z100", "z100_unconsolidated"]
    # The scale-factor-2 ResNet-50 entry of the fixture is not a job on one GPU.
    assert sorted(load_isolated(FIXTURE, gpu="v100")) == sorted(
        k.split("'")[1] for k in raw["v100"] if k.endswith(", 1)")
    )
    pairs = load_gavel_pairs(FIXTURE, gpu="v100")
    # 10 written pairs, one of them [0, 0].
    assert len(pairs) == 9
    assert ("Mystery (batch size 8)", "ResNet-50 (batch size 32)") not in {(p.job_a, p.job_b) for p in pairs}
    # Mystery never ran alone on z100: its pair is skipped, and said.
    assert jobs_never_alone(FIXTURE, gpu="z100") == ["Mystery (batch size 8)"]
    assert len(load_gavel_pairs(FIXTURE, gpu="z100")) == 6


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param('{"v100": {"(\'A\', 1)": {"null": -1}}}', "non-negative isolated", id="negative-isolated"),
        pytest.param('{"v100": {"(\'A\', 1)": {"null": 1, "(\'A\', 1)": [1]}}}', "throughput_a", id="short-pair"),
        pytest.param('{"v100": {"(\'A\', 1)": {"null": 1, "(\'A\', 1)": ["x", 1]}}}', "throughput_a", id="text"),
        pytest.param("[1, 2]", "JSON object", id="not-an-object"),
        pytest.param("{", "cannot read", id="not-json"),
        pytest.param('{"p100": {}}', "no 'v100' section \\(the file has: p100\\)", id="missing-gpu"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, content: str, match: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(InputError, match=match):
        load_gavel_pairs(bad, gpu="v100")


def test_calibrated_regime_runs_in_the_event_simulator() -> None:
    from canary.catalog import lookup
    from canary.sim import SimDevice, calibrated_regime
    from canary.sim.gavel_profiles import gavel_jobs
    from canary.sim.params import GAVEL_PAIR_PARAMS

    chosen = calibrated_regime()
    assert chosen.regime == "timeslice"
    assert chosen.contention.timeslice_ms == GAVEL_PAIR_PARAMS.timeslice_ms
    assert chosen.contention.context_switch_us == GAVEL_PAIR_PARAMS.context_switch_us
    job = gavel_jobs()["Transformer (batch size 64)"]
    dev = SimDevice(lookup("v100"), seed=1, regime=chosen.regime, params=chosen.contention)
    a = dev.place(job.profile(), role="resident", kernel_time_us=job.kernel_time_us)
    b = dev.place(job.profile(), role="candidate", kernel_time_us=job.kernel_time_us)
    window = dev.run_window(3.0)
    # Two GPU-bound copies time-sliced: each well under its isolated rate (8.2 steps/s).
    assert 0 < window.throughput[a] < 0.75 * 8.2
    assert 0 < window.throughput[b] < 0.75 * 8.2


def test_catalog_has_the_older_gavel_gpus() -> None:
    from canary.catalog import lookup

    p100, k80 = lookup("p100"), lookup("k80")
    assert (p100.sm_count, p100.compute_capability) == (56, (6, 0))
    assert (k80.sm_count, k80.compute_capability) == (13, (3, 7))
    assert "datasheet" in p100.source("sm_count").lower()


def test_device_aware_event_profiles_keep_host_time_and_scale_sm_share() -> None:
    from canary.catalog import lookup
    from canary.sim.gavel_profiles import gavel_jobs, gavel_jobs_on

    p100 = lookup("p100")
    iso = load_isolated(gpu="p100")
    on_p100, v100 = gavel_jobs_on(p100, iso), gavel_jobs()
    for name in ("ResNet-50 (batch size 32)", "Transformer (batch size 64)"):
        a, b = v100[name], on_p100[name]
        assert b.step_time_ms == pytest.approx(1000.0 / iso[name])
        assert b.step_time_ms * (1 - b.duty_cycle) == pytest.approx(a.step_time_ms * (1 - a.duty_cycle))
        # The same grids on 56 SMs instead of 80.
        assert b.sm_share == pytest.approx(min(1.0, a.sm_share * 80 / 56))


def test_event_simulator_under_the_calibrated_regime_agrees_with_the_pair_model() -> None:
    """For GPU-bound pairs (host < 15% of the step) the event engine's time slicing and the closed
    form describe the same schedule; their throughput ratios agree within 20%. (Host-heavy jobs
    differ: the engine runs a step's host time as one block, the closed form spreads it over rounds;
    docs/simulator.md.)"""
    from canary.catalog import lookup
    from canary.sim import calibrated_regime
    from canary.sim.calibration import simulate_pair
    from canary.sim.gavel_profiles import gavel_jobs_on
    from canary.sim.pair_model import predict_pairs

    chosen = calibrated_regime()
    iso = load_isolated(gpu="p100")
    events, closed = gavel_jobs_on(lookup("p100"), iso), device_jobs(iso)[0]
    names = ["ResNet-50 (batch size 32)", "Transformer (batch size 64)", "LM (batch size 20)", "CycleGAN"]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i:]]
    pa, pb = predict_pairs(chosen.pair, closed, pairs)
    for i, (a, b) in enumerate(pairs):
        sa, sb = simulate_pair(events[a], events[b], chosen.contention, seed=i, regime=chosen.regime, spec_name="p100")
        assert abs(np.log((1 + sa / 100) / (1 + pa[i] / 100))) < np.log(1.2), (a, b, sa, pa[i])
        assert abs(np.log((1 + sb / 100) / (1 + pb[i] / 100))) < np.log(1.2), (a, b, sb, pb[i])


def test_a_pair_written_one_way_round_is_read(tmp_path: Path) -> None:
    one_way = tmp_path / "one_way.json"
    one_way.write_text(
        json.dumps({"g": {"('A', 1)": {"null": 10.0}, "('B', 1)": {"null": 20.0, "('A', 1)": [5.0, 4.0]}}})
    )
    (pair,) = load_gavel_pairs(one_way, gpu="g")
    assert (pair.job_a, pair.job_b) == ("A", "B")
    # B ran at 5 beside A (isolated 20: 300%), A at 4 beside B (isolated 10: 150%).
    assert pair.slowdown_a_pct == pytest.approx(150.0)
    assert pair.slowdown_b_pct == pytest.approx(300.0)
