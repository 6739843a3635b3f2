"""The 13 test vectors of gpu-facts §2 (taken from cuda_occupancy.h 13.0), and argument checks."""

from __future__ import annotations

import dataclasses

import pytest

from canary.catalog import lookup
from canary.errors import InputError
from canary.occupancy import block_footprint, cuda_occupancy

_FLAG_BITS = {"warps": 0x01, "registers": 0x02, "shared_memory": 0x04, "blocks": 0x08, "barriers": 0x10}

# device, regs, block, static, dynamic -> blocks, limiting flags, allocated shared memory
VECTORS = [
    ("h100-sxm", 32, 256, 0, 0, 8, 0x03, 1024),
    ("h100-sxm", 40, 128, 0, 0, 12, 0x02, 1024),
    ("h100-sxm", 255, 1024, 0, 0, 0, 0x02, 1024),
    ("h100-sxm", 32, 128, 0, 49152, 4, 0x04, 50176),
    ("h100-sxm", 32, 128, 0, 102400, 2, 0x04, 103424),
    ("h100-sxm", 16, 32, 0, 0, 32, 0x08, 1024),
    ("a100-80gb", 32, 256, 16384, 0, 8, 0x03, 17408),
    ("a100-80gb", 32, 128, 0, 102400, 1, 0x04, 103424),
    ("a10", 32, 256, 0, 0, 6, 0x01, 1024),
    ("l4", 32, 256, 16384, 0, 5, 0x04, 17408),
    ("l4", 16, 32, 0, 0, 24, 0x08, 1024),
    ("t4", 32, 128, 0, 49152, 1, 0x04, 49152),
    ("v100-sxm2-16gb", 32, 256, 16384, 0, 6, 0x04, 16384),
]


def _flags(limiting: frozenset[str]) -> int:
    return sum(_FLAG_BITS[name] for name in limiting)


@pytest.mark.parametrize(("device", "regs", "block", "static", "dynamic", "blocks", "flags", "smem"), VECTORS)
def test_header_vector(
    device: str, regs: int, block: int, static: int, dynamic: int, blocks: int, flags: int, smem: int
) -> None:
    result = cuda_occupancy(
        lookup(device),
        registers_per_thread=regs,
        threads_per_block=block,
        static_shared_bytes=static,
        dynamic_shared_bytes=dynamic,
    )
    assert (
        result.active_blocks_per_sm,
        _flags(result.limiting),
        result.allocated_shared_memory_per_block,
    ) == (
        blocks,
        flags,
        smem,
    )


def test_h100_full_result() -> None:
    result = cuda_occupancy(lookup("h100"), registers_per_thread=32, threads_per_block=256)
    assert result.block_limit_registers == 8
    assert result.block_limit_warps == 8
    assert result.block_limit_blocks == 32
    assert result.block_limit_shared_memory == 228  # 233472 // 1024
    assert result.block_limit_barriers == 64  # 32 blocks x 2 barriers on cc 9.x, 1 barrier used
    assert result.allocated_registers_per_block == 8192
    assert result.shared_memory_config_bytes == 233472
    assert result.occupancy_pct == 100.0
    payload = result.to_json()
    assert payload["limiting"] == ["registers", "warps"]


def test_unlimited_limits_are_none_not_zero() -> None:
    # cc 7.0 reserves no shared memory per block, so a kernel without shared memory and without
    # registers is limited by neither: the header reports INT_MAX, we report None.
    result = cuda_occupancy(lookup("v100"), registers_per_thread=0, threads_per_block=64)
    assert result.block_limit_registers is None
    assert result.block_limit_shared_memory is None
    assert result.block_limit_barriers is None  # no barrier rule before cc 9.0
    assert result.active_blocks_per_sm == 32
    assert result.limiting == frozenset({"warps", "blocks"})


def test_barriers_limit_on_hopper() -> None:
    result = cuda_occupancy(lookup("h100"), registers_per_thread=16, threads_per_block=32, barriers=3)
    assert result.block_limit_barriers == 21  # (32 x 2) // 3
    assert result.active_blocks_per_sm == 21
    # The header sets the bits of the first minimum (blocks: 32) before it applies the barrier
    # limit, and never clears them: both are reported.
    assert result.limiting == frozenset({"blocks", "barriers"})


def test_carveout_limits_shared_memory() -> None:
    spec = lookup("h100")
    default = cuda_occupancy(spec, registers_per_thread=32, threads_per_block=128, dynamic_shared_bytes=16384)
    small = cuda_occupancy(
        spec, registers_per_thread=32, threads_per_block=128, dynamic_shared_bytes=16384, carveout_pct=25
    )
    assert default.shared_memory_config_bytes == 233472
    # 25% of 228 KiB = 58368 B, rounded up to the 64 KiB carveout step.
    assert small.shared_memory_config_bytes == 65536
    assert small.block_limit_shared_memory == 65536 // 17408


def test_too_much_shared_memory_is_zero_blocks_not_an_error() -> None:
    spec = lookup("a100")
    result = cuda_occupancy(spec, registers_per_thread=32, threads_per_block=128, dynamic_shared_bytes=166913)
    assert result.active_blocks_per_sm == 0
    assert result.block_limit_shared_memory == 0
    assert result.shared_memory_config_bytes is None


def test_block_larger_than_device_limit_is_zero_blocks() -> None:
    result = cuda_occupancy(lookup("h100"), registers_per_thread=16, threads_per_block=1025)
    assert result.block_limit_warps == 0
    assert result.active_blocks_per_sm == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"registers_per_thread": -1, "threads_per_block": 32}, "registers_per_thread"),
        ({"registers_per_thread": 32, "threads_per_block": 0}, "threads_per_block"),
        (
            {"registers_per_thread": 32, "threads_per_block": 32, "dynamic_shared_bytes": -5},
            "dynamic_shared_bytes",
        ),
        ({"registers_per_thread": 32, "threads_per_block": 32, "carveout_pct": 101}, "carveout_pct"),
        ({"registers_per_thread": 32, "threads_per_block": 32, "carveout_pct": -2}, "carveout_pct"),
        ({"registers_per_thread": 32, "threads_per_block": 32, "barriers": -1}, "barriers"),
    ],
)
def test_invalid_arguments_raise_input_error(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InputError) as info:
        cuda_occupancy(lookup("h100"), **kwargs)
    assert info.value.field == field


def test_amd_device_is_refused_with_a_pointer_to_the_cdna_path() -> None:
    with pytest.raises(InputError, match="cdna_occupancy"):
        cuda_occupancy(lookup("mi300x"), registers_per_thread=32, threads_per_block=256)


@pytest.mark.parametrize("cc", [(10, 7), (12, 2), (13, 0), (6, 1)])
def test_unknown_compute_capability_raises(cc: tuple[int, int]) -> None:
    spec = dataclasses.replace(lookup("b200"), compute_capability=cc)
    with pytest.raises(InputError, match="not modelled"):
        cuda_occupancy(spec, registers_per_thread=32, threads_per_block=256)


def test_block_footprint_matches_allocation_rules() -> None:
    spec = lookup("h100")
    footprint = block_footprint(
        spec,
        registers_per_thread=37,
        threads_per_block=200,
        static_shared_bytes=1000,
        dynamic_shared_bytes=100,
    )
    assert footprint.warps == 7
    assert footprint.registers_per_warp == 1280  # 37 x 32 = 1184, rounded up to 256
    assert footprint.registers == 1280 * 7
    assert footprint.shared_memory_bytes == 2176  # 1000 + 1024 reserved + 100 = 2124 -> 128-byte granules
    assert footprint.threads == 200
    assert footprint.barriers == 1
    occupancy = cuda_occupancy(
        spec,
        registers_per_thread=37,
        threads_per_block=200,
        static_shared_bytes=1000,
        dynamic_shared_bytes=100,
    )
    assert occupancy.allocated_registers_per_block == footprint.registers
    assert occupancy.allocated_shared_memory_per_block == footprint.shared_memory_bytes


def test_block_footprint_volta_granularity_and_no_reservation() -> None:
    footprint = block_footprint(
        lookup("v100"), registers_per_thread=8, threads_per_block=33, static_shared_bytes=1
    )
    assert footprint.warps == 2
    assert footprint.registers_per_warp == 256
    assert footprint.shared_memory_bytes == 256
