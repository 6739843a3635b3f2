"""``canary occupancy`` says how the register rule reached its number, with the numbers it used.

Rule (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit; /work reference gpu-facts §2, step 2):
W = ceil(threads/32); per warp = roundup(regs x 32, 256); the per-block check counts roundup(W, 4)
warps (registers are allocated per sub-partition, a block's warps spread over the SM's 4) and
compares per warp x that with regsPerBlock (65,536 on H100 and A100); if it passes, a
sub-partition holds floor(floor(65,536 / 4) / per warp) warps and the limit is floor(4 x that / W).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from canary.commands.occupancy import _pct
from tests.support.paths import canary_cmd


def _occupancy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), "occupancy", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_a_zero_block_register_answer_says_why() -> None:
    """H100, 800 threads x 80 registers: 80 x 32 = 2,560 per warp (already a multiple of 256);
    W = 25; counted as ceil(25/4) = 7 per sub-partition x 4 = 28 warps; 28 x 2,560 = 71,680 > 65,536
    (per sub-partition 7 x 2,560 = 17,920 > 16,384): 0 blocks. The unrounded 25 x 2,560 = 64,000 is under
    65,536 and must not be shown as the allocation."""
    done = _occupancy("--device", "h100", "--threads", "800", "--regs", "80")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rows["registers"].split()[1] == "0" and "limiting" in rows["registers"]
    assert "= 2560 per warp" in out
    assert "ceil(25/4) = 7 per sub-partition" in out
    assert "counted as 28 warps: 28 x 2560 = 71680 registers (25 x 2560 = 64000 before rounding)" in out
    assert "71680 > 65536 registers a block may hold (per sub-partition: 7 x 2560 = 17920 > 16384)" in out
    assert "allocated per block: 71680 registers for the per-block check (64000 unrounded)" in out
    assert "allocated per block: 64000" not in out


def test_the_json_carries_the_counted_allocation_beside_the_headers_field() -> None:
    done = _occupancy("--device", "h100", "--threads", "800", "--regs", "80", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["block_limit_registers"] == 0
    assert payload["allocated_registers_per_block"] == 64000  # cudaOccResult's field: 25 x 2,560
    assert (payload["registers_per_warp"], payload["register_warps_per_block"],
            payload["registers_counted_per_block"]) == (2560, 28, 71680)


def test_a_nonzero_register_limit_shows_its_arithmetic() -> None:
    """A100, 96 threads x 33 registers: 33 x 32 = 1,056 per warp, rounded to 1,280; W = 3, counted as
    4 (ceil(3/4) = 1 per sub-partition): 5,120 <= 65,536; a sub-partition holds 16,384 // 1,280 = 12
    warps, the SM 48; 48 // 3 = 16 blocks (16 x 3 = 48 of 64 warps, 75%)."""
    done = _occupancy("--device", "a100", "--threads", "96", "--regs", "33")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "33/thread x 32 threads = 1056 per warp, allocated 1280" in out
    assert "counted as 4 warps: 4 x 1280 = 5120 registers (3 x 1280 = 3840 before rounding)" in out
    assert "a sub-partition holds 16384 // 1280 = 12 warps, the SM 48: 48 // 3 = 16 blocks" in out
    assert "16  (48 of 64 warps, 75.0% occupancy)" in out


def test_an_exact_quarter_percent_is_not_rounded_away() -> None:
    """A100, 128 threads with 100 KiB dynamic shared memory: one block (4 warps) per SM; 4 / 64 = 6.25%."""
    done = _occupancy("--device", "a100", "--regs", "32", "--threads", "128", "--dynamic-smem", "100KiB")
    assert done.returncode == 0, done.stderr
    assert "(4 of 64 warps, 6.25% occupancy)" in done.stdout


@pytest.mark.parametrize(("value", "text"), [
    pytest.param(100.0, "100.0%", id="whole"),
    pytest.param(6.25, "6.25%", id="4-of-64"),
    pytest.param(100 / 64, "1.5625%", id="1-of-64"),
    pytest.param(100 / 48, "2.0833%", id="1-of-48-repeating"),
    pytest.param(0.0, "0.0%", id="zero"),
])
def test_percentages_keep_exact_fractions(value: float, text: str) -> None:
    assert _pct(value) == text
