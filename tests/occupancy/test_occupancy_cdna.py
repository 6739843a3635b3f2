"""CDNA3 (MI300X, gfx942) occupancy: the tables of gpu-facts §4 and LLVM's AMDGPU rules."""

from __future__ import annotations

import pytest

from canary.catalog import DeviceSpec, lookup
from canary.errors import InputError
from canary.occupancy import cdna_occupancy, cdna_sgpr_waves_per_simd, cdna_vgpr_waves_per_simd


@pytest.fixture(scope="module")
def mi300x() -> DeviceSpec:
    return lookup("mi300x")


# unified VGPRs (arch + acc) -> waves per SIMD (gpu-facts §4; LLVM getNumWavesPerEUWithNumVGPRs)
@pytest.mark.parametrize(
    ("vgprs", "agprs", "waves"),
    [
        (0, 0, 8),
        (1, 0, 8),
        (64, 0, 8),
        (65, 0, 7),
        (72, 0, 7),
        (73, 0, 6),
        (128, 0, 4),
        (256, 0, 2),
        (256, 256, 1),
        (128, 128, 2),
        (62, 2, 7),  # arch 62 -> AGPR base 64, total 66 -> granule 72 -> 7
    ],
)
def test_waves_per_simd_from_vgprs(mi300x: DeviceSpec, vgprs: int, agprs: int, waves: int) -> None:
    result = cdna_occupancy(mi300x, vgprs=vgprs, agprs=agprs, workgroup_size=256)
    assert result.vgpr_waves_per_simd == waves
    assert result.waves_per_simd == waves
    assert result.workgroups_per_cu == (4 * waves) // 4


def test_sgpr_waves_equal_llvm_table(mi300x: DeviceSpec) -> None:
    def llvm(sgprs: int) -> int:  # getOccupancyWithNumSGPRs, VOLCANIC_ISLANDS..GFX9
        table = 10 if sgprs <= 80 else 9 if sgprs <= 88 else 8 if sgprs <= 100 else 7
        return min(table, 8)

    assert mi300x.cdna is not None
    for sgprs in range(0, 113):
        assert cdna_sgpr_waves_per_simd(mi300x.cdna, sgprs) == llvm(sgprs), sgprs


def test_vgpr_helper_matches_formula(mi300x: DeviceSpec) -> None:
    assert mi300x.cdna is not None
    for total in range(0, 513):
        expected = 8 if total < 8 else min(max(512 // (-(-total // 8) * 8), 1), 8)
        assert cdna_vgpr_waves_per_simd(mi300x.cdna, total) == expected


@pytest.mark.parametrize(
    ("lds", "workgroups", "allocated"),
    [
        (65536, 1, 65536),
        (32768, 2, 32768),
        (16384, 4, 16384),
        (100, 16, 512),  # 512-byte granule: 128 by LDS, but 16 barrier slots for 4-wave workgroups
        (65537, 0, 66048),  # more than a CU has: cannot launch
    ],
)
def test_lds_limits(mi300x: DeviceSpec, lds: int, workgroups: int, allocated: int) -> None:
    result = cdna_occupancy(mi300x, vgprs=32, lds_bytes=lds, workgroup_size=256)
    assert result.workgroups_per_cu == min(workgroups, 8)
    assert result.allocated_lds_per_workgroup_bytes == allocated
    if lds > 1024:
        assert "lds" in result.limiting


def test_lds_granule_rounds_up(mi300x: DeviceSpec) -> None:
    result = cdna_occupancy(mi300x, vgprs=16, lds_bytes=13000, workgroup_size=64)
    assert result.allocated_lds_per_workgroup_bytes == 13312  # 26 x 512
    assert result.workgroup_limit_lds == 65536 // 13312


def test_single_wave_workgroups_use_no_barrier_slot(mi300x: DeviceSpec) -> None:
    single = cdna_occupancy(mi300x, vgprs=16, workgroup_size=64)
    assert single.workgroup_limit_workgroup_slots is None
    assert single.workgroups_per_cu == 32
    two_waves = cdna_occupancy(mi300x, vgprs=16, workgroup_size=128)
    assert two_waves.workgroup_limit_workgroup_slots == 16
    assert two_waves.workgroups_per_cu == 16
    # Ties are all reported, as cuda_occupancy.h does: 16 VGPRs and no SGPRs also allow exactly 16.
    assert two_waves.limiting == frozenset({"vgprs", "sgprs", "waves", "workgroup_slots"})
    heavy = cdna_occupancy(mi300x, vgprs=128, workgroup_size=128)
    assert heavy.workgroups_per_cu == 8
    assert heavy.limiting == frozenset({"vgprs"})


def test_full_workgroup(mi300x: DeviceSpec) -> None:
    result = cdna_occupancy(mi300x, vgprs=64, workgroup_size=1024)
    assert result.waves_per_workgroup == 16
    assert result.workgroups_per_cu == 2
    assert result.occupancy_pct == 100.0
    too_big = cdna_occupancy(mi300x, vgprs=64, workgroup_size=1025)
    assert too_big.workgroups_per_cu == 0
    assert "waves" in too_big.limiting


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"vgprs": 257, "workgroup_size": 64}, "vgprs"),
        ({"vgprs": 16, "agprs": 257, "workgroup_size": 64}, "agprs"),
        ({"vgprs": 16, "sgprs": 113, "workgroup_size": 64}, "sgprs"),
        ({"vgprs": 16, "workgroup_size": 0}, "workgroup_size"),
        ({"vgprs": -1, "workgroup_size": 64}, "vgprs"),
    ],
)
def test_invalid_arguments(mi300x: DeviceSpec, kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InputError) as info:
        cdna_occupancy(mi300x, **kwargs)
    assert info.value.field == field


def test_nvidia_device_is_refused() -> None:
    with pytest.raises(InputError, match="cuda_occupancy"):
        cdna_occupancy(lookup("h100"), vgprs=32, workgroup_size=256)
