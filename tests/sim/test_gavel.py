"""The Gavel loader and the Gavel job profiles (their numbers checked against the data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary.sim.gavel import GavelDataMissing, default_gavel_path, load_gavel_pairs
from canary.sim.gavel_profiles import (
    GAVEL_ISOLATED_STEPS_PER_S,
    ORION_RESNET50_BUSY_MS,
    ORION_RESNET50_KERNELS,
    ORION_RESNET50_MEMORY_BOUND,
    ORION_SM_SHARE,
    ORION_TRANSFORMER_KERNELS,
    ORION_TRANSFORMER_MEMORY_BOUND,
    gavel_jobs,
    orion_summary,
)

ORION = default_gavel_path().parents[1] / "orion-kernels"


def _gavel_or_skip() -> Path:
    path = default_gavel_path()
    if not path.is_file():
        pytest.skip(f"Gavel data absent: expected {path} (../shared/data relative to the project root)")
    return path


def test_loader_reads_every_feasible_pair_once() -> None:
    path = _gavel_or_skip()
    pairs = load_gavel_pairs()
    raw = json.loads(path.read_text())["v100"]
    feasible = {
        frozenset((a, b))
        for a in raw
        for b, v in raw[a].items()
        if b != "null" and not (v[0] == 0 and v[1] == 0)
    }
    assert len(pairs) == len(feasible) == 330
    assert len({frozenset((p.job_a, p.job_b)) for p in pairs}) == len(pairs)
    assert all(p.colocated_a > 0 and p.colocated_b > 0 for p in pairs)
    assert sum(p.job_a == p.job_b for p in pairs) > 0  # a job beside a copy of itself is a pair too


def test_slowdowns_and_clamps() -> None:
    _gavel_or_skip()
    pairs = {(p.job_a, p.job_b): p for p in load_gavel_pairs()}
    p = pairs[("A3C", "CycleGAN")]
    assert p.isolated_a == pytest.approx(7.479619707470718)
    assert p.colocated_a == pytest.approx(4.562135656281291)
    assert p.colocated_b == pytest.approx(3.1632656249608218)
    assert p.slowdown_a_pct == pytest.approx((7.479619707470718 / 4.562135656281291 - 1) * 100)
    assert p.slowdown_b_pct == pytest.approx((4.735589112139888 / 3.1632656249608218 - 1) * 100)
    assert not p.clamped
    clamped = [q for q in pairs.values() if q.clamped]
    assert clamped
    assert all(q.slowdown_a_pct <= 0 or q.slowdown_b_pct <= 0 for q in clamped)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GavelDataMissing, match="not found"):
        load_gavel_pairs(tmp_path / "absent.json")


def test_isolated_throughputs_match_the_data() -> None:
    _gavel_or_skip()
    measured: dict[str, float] = {}
    for p in load_gavel_pairs():
        measured[p.job_a] = p.isolated_a
        measured[p.job_b] = p.isolated_b
    assert measured == pytest.approx(GAVEL_ISOLATED_STEPS_PER_S)


def test_every_job_has_a_valid_profile() -> None:
    jobs = gavel_jobs()
    assert len(jobs) == 26
    for job in jobs.values():
        assert 0 < job.duty_cycle <= 1
        assert 0 < job.sm_share <= 1
        assert 0 <= job.dram_intensity <= 1
        assert job.kernel_time_us > 0
        assert {"step", "duty_cycle", "sm_share", "dram_intensity", "kernel_time_us"} <= set(job.basis)
        profile = job.profile()
        assert profile.phases[0].duration_s == pytest.approx(job.step_time_ms / 1000)
        assert profile.provenance.source == ("profiled" if job.grounded else "declared")


@pytest.mark.parametrize(
    ("trace", "kernels", "memory_bound"),
    [
        ("resnet50_32_fb1", ORION_RESNET50_KERNELS, ORION_RESNET50_MEMORY_BOUND),
        ("transformer_xl_8_fb1", ORION_TRANSFORMER_KERNELS, ORION_TRANSFORMER_MEMORY_BOUND),
    ],
)
def test_orion_constants_match_the_traces(trace: str, kernels: int, memory_bound: float) -> None:
    path = ORION / f"{trace}.csv"
    if not path.is_file():
        pytest.skip(f"Orion kernel traces absent: expected {path}")
    summary = orion_summary(path)
    assert summary["kernels"] == kernels
    assert summary["memory_bound"] == pytest.approx(memory_bound, abs=0.002)
    if trace == "resnet50_32_fb1":
        assert summary["busy_ms"] == pytest.approx(ORION_RESNET50_BUSY_MS, abs=0.01)
    for (name, scale), share in ORION_SM_SHARE.items():
        if name == trace:
            assert orion_summary(path, batch_scale=scale)["sm_share"] == pytest.approx(share, abs=0.001)
