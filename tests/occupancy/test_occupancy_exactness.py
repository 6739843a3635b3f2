"""Exactness: canary.occupancy against the real cuda_occupancy.h, compiled here with g++.

The harness (tests/harness/occupancy_ref.cpp) is built in a temporary directory at test time and
reads one configuration per line. 12,000 seeded random configurations cover every CUDA device of
the catalog; registers 0-256, blocks 1-1100, static and dynamic shared memory up to (and past)
the opt-in limit, carveouts -1/0/25/50/100/random and 0-3 (or 16) barriers. Every field of the
header's result that canary reports is compared, including the limiting-factor set and the
allocated registers and shared memory.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from canary.catalog import DeviceSpec, all_devices, lookup
from canary.errors import InputError
from canary.occupancy import cuda_occupancy
from tests.harness.occupancy_reference import (
    FLAG_BITS,
    canary_row,
    compile_reference,
    missing_reason,
    reference_line,
    run_reference,
)

SEED = 20261130
CASES = 12_000
_FLAG_BITS = FLAG_BITS


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(f"{reason}: the exactness sweep needs it")
    return compile_reference(tmp_path_factory.mktemp("occref"))


_line = reference_line
_run_reference = run_reference


def _random_cases(
    rng: random.Random, spec: DeviceSpec, count: int
) -> list[tuple[int, int, int, int, int, int]]:
    optin = spec.shared_memory_per_block_optin_bytes
    cases = []
    for _ in range(count):
        regs = rng.choice(
            (rng.randint(1, 255), rng.randint(1, 64), rng.randint(16, 128), rng.choice((0, 255, 256)))
        )
        block = rng.choice(
            (rng.randint(1, 1024), 32 * rng.randint(1, 8), 32 * rng.randint(1, 32), rng.randint(1000, 1100))
        )
        static = rng.choice(
            (0, 0, 0, rng.randint(0, 16 * 1024), rng.randint(0, 48 * 1024), rng.randint(0, optin + 2048))
        )
        dynamic = rng.choice(
            (
                0,
                0,
                rng.randint(0, 48 * 1024),
                rng.randint(0, optin),
                rng.randint(0, optin + 4096),
                1024 * rng.randint(0, optin // 1024),
            )
        )
        carveout = rng.choice((-1, 0, 25, 50, 100, rng.randint(-1, 100)))
        barriers = rng.choice((1, 1, 1, 0, 2, 3, 16))
        cases.append((regs, block, static, dynamic, carveout, barriers))
    return cases


def _cuda_devices() -> list[DeviceSpec]:
    # The 13.0 header models cc >= 7.0 only; the older catalog GPUs (P100, K80) are there for the
    # simulator, and canary's occupancy refuses them (tested in tests/sim).
    return [
        spec
        for spec in all_devices()
        if spec.vendor == "nvidia" and spec.compute_capability is not None and spec.compute_capability >= (7, 0)
    ]


def test_sweep_matches_header_on_every_cuda_device(reference: Path) -> None:
    rng = random.Random(SEED)
    devices = _cuda_devices()
    per_device = -(-CASES // len(devices))
    lines: list[str] = []
    configs: list[tuple[DeviceSpec, tuple[int, int, int, int, int, int]]] = []
    for spec in devices:
        for case in _random_cases(rng, spec, per_device):
            lines.append(_line(spec, *case))
            configs.append((spec, case))
    assert len(configs) >= 10_000
    rows = _run_reference(reference, lines)
    mismatches = []
    zero_blocks = 0
    for (spec, (regs, block, static, dynamic, carveout, barriers)), expected in zip(
        configs, rows, strict=True
    ):
        assert expected[0] == 0, (
            f"reference error {expected[0]} for {spec.name} {regs, block, static, dynamic, carveout, barriers}"
        )
        got = canary_row(spec, regs, block, static, dynamic, carveout, barriers)
        zero_blocks += expected[1] == 0
        if got != expected:
            mismatches.append((spec.name, (regs, block, static, dynamic, carveout, barriers), expected, got))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    # The sweep must exercise both launchable and unlaunchable configurations.
    assert len(configs) // 10 < zero_blocks < len(configs) // 2


def test_every_catalog_limit_combination_appears(reference: Path) -> None:
    """The sweep is only as good as its coverage: each limiting factor must occur."""
    rng = random.Random(SEED + 1)
    seen: set[str] = set()
    for spec in _cuda_devices():
        for regs, block, static, dynamic, carveout, barriers in _random_cases(rng, spec, 300):
            result = cuda_occupancy(
                spec,
                registers_per_thread=regs,
                threads_per_block=block,
                static_shared_bytes=static,
                dynamic_shared_bytes=dynamic,
                carveout_pct=carveout,
                barriers=barriers,
            )
            seen |= result.limiting
    assert seen == set(_FLAG_BITS)


@pytest.mark.parametrize("cc", [(10, 7), (12, 2), (11, 2), (13, 0)])
def test_compute_capabilities_unknown_to_the_header(reference: Path, cc: tuple[int, int]) -> None:
    """The 13.0 header has no tables for these; canary refuses instead of guessing."""
    spec = dataclasses.replace(lookup("b200"), compute_capability=cc)
    (row,) = _run_reference(reference, [_line(spec, 32, 256, 0, 0, -1, 1)])
    assert row[0] == 2  # CUDA_OCC_ERROR_UNKNOWN_DEVICE
    with pytest.raises(InputError):
        cuda_occupancy(spec, registers_per_thread=32, threads_per_block=256)


@pytest.mark.parametrize("cc", [(10, 1), (10, 3), (11, 0), (12, 0), (12, 1), (8, 7)])
def test_other_compute_capabilities_the_header_knows(reference: Path, cc: tuple[int, int]) -> None:
    """Rules for parts not in the catalog (yet) agree with the header too, on a B200-shaped SM."""
    rng = random.Random(SEED + cc[0] * 10 + cc[1])
    base = lookup("b200") if cc[0] >= 10 else lookup("a100")
    smem = 102400 if cc[0] == 12 else base.shared_memory_per_sm_bytes
    spec = dataclasses.replace(
        base,
        compute_capability=cc,
        shared_memory_per_sm_bytes=smem,
        shared_memory_per_block_optin_bytes=smem - 1024,
    )
    cases = _random_cases(rng, spec, 300)
    rows = _run_reference(reference, [_line(spec, *case) for case in cases])
    for (regs, block, static, dynamic, carveout, barriers), expected in zip(cases, rows, strict=True):
        got = canary_row(spec, regs, block, static, dynamic, carveout, barriers)
        assert got == expected, (cc, regs, block, static, dynamic, carveout, barriers)


def test_catalog_block_limits_agree_with_the_header_tables() -> None:
    """The catalog's max_blocks_per_sm is a citation of the header's table; they must agree."""
    for spec in _cuda_devices():
        result = cuda_occupancy(spec, registers_per_thread=1, threads_per_block=1)
        assert result.block_limit_blocks == spec.max_blocks_per_sm, spec.name
