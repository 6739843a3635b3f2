"""Occupancy sweep: canary.occupancy against cuda_occupancy.h on many configurations.

Prints, for the same seeded configurations on every CUDA device of the catalog: the number of
mismatches against the header (compiled here with g++), the Python throughput, the header
harness throughput (the baseline, measured in the same run, process start and parsing included)
and their ratio.

    .venv/bin/python benchmarks/occupancy_sweep.py [--cases 100000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from canary.catalog import DeviceSpec, all_devices
from canary.occupancy import cuda_occupancy

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "harness" / "occupancy_ref.cpp"
HEADER_DIR = Path("/usr/local/cuda/include")
INT_MAX = 2**31 - 1
FLAG_BITS = {"warps": 0x01, "registers": 0x02, "shared_memory": 0x04, "blocks": 0x08, "barriers": 0x10}

Case = tuple[DeviceSpec, int, int, int, int, int, int]


def make_cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    devices = [spec for spec in all_devices() if spec.vendor == "nvidia"]
    cases: list[Case] = []
    for index in range(count):
        spec = devices[index % len(devices)]
        optin = spec.shared_memory_per_block_optin_bytes
        cases.append(
            (
                spec,
                rng.randint(0, 256),
                rng.randint(1, 1100),
                rng.choice((0, rng.randint(0, 48 * 1024), rng.randint(0, optin))),
                rng.choice((0, rng.randint(0, optin))),
                rng.choice((-1, 0, 25, 50, 100, rng.randint(-1, 100))),
                rng.choice((0, 1, 1, 2, 3)),
            )
        )
    return cases


def reference_line(case: Case) -> str:
    spec, regs, block, static, dynamic, carveout, barriers = case
    assert spec.compute_capability is not None
    values = (
        *spec.compute_capability,
        spec.max_threads_per_block,
        spec.max_threads_per_sm,
        spec.registers_per_block,
        spec.registers_per_sm,
        spec.warp_size,
        spec.shared_memory_per_block_bytes,
        spec.shared_memory_per_sm_bytes,
        spec.sm_count,
        spec.shared_memory_per_block_optin_bytes,
        spec.reserved_shared_memory_per_block_bytes,
        regs,
        block,
        static,
        dynamic,
        max(spec.shared_memory_per_block_optin_bytes - static, 0),
        carveout,
        barriers,
    )
    return " ".join(map(str, values))


def python_row(case: Case) -> list[int]:
    spec, regs, block, static, dynamic, carveout, barriers = case
    result = cuda_occupancy(
        spec,
        registers_per_thread=regs,
        threads_per_block=block,
        static_shared_bytes=static,
        dynamic_shared_bytes=dynamic,
        carveout_pct=carveout,
        barriers=barriers,
    )

    def c(value: int | None) -> int:
        return INT_MAX if value is None else value

    return [
        0,
        result.active_blocks_per_sm,
        sum(FLAG_BITS[name] for name in result.limiting),
        c(result.block_limit_registers),
        c(result.block_limit_shared_memory),
        result.block_limit_warps,
        result.block_limit_blocks,
        c(result.block_limit_barriers),
        result.allocated_registers_per_block,
        result.allocated_shared_memory_per_block,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    compiler = shutil.which("g++")
    if compiler is None or not (HEADER_DIR / "cuda_occupancy.h").is_file():
        sys.stderr.write("needs g++ and /usr/local/cuda/include/cuda_occupancy.h\n")
        return 4
    cases = make_cases(args.cases, args.seed)
    lines = [reference_line(case) for case in cases]
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "occupancy_ref"
        subprocess.run([compiler, "-O2", f"-I{HEADER_DIR}", "-o", str(binary), str(HARNESS)], check=True)
        start = time.perf_counter()
        done = subprocess.run(
            [str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
        )
        reference_s = time.perf_counter() - start
    expected = [[int(x) for x in row.split()] for row in done.stdout.splitlines()]
    start = time.perf_counter()
    got = [python_row(case) for case in cases]
    python_s = time.perf_counter() - start
    mismatches = sum(1 for a, b in zip(expected, got, strict=True) if a != b)
    devices = len({case[0].name for case in cases})
    print(f"configurations:            {len(cases)} on {devices} CUDA devices (seed {args.seed})")
    print(f"mismatches vs header:      {mismatches}")
    print(
        f"header harness (baseline): {len(cases) / reference_s:12.0f} configs/s  ({reference_s * 1e3:.1f} ms)"
    )
    print(f"canary.occupancy:          {len(cases) / python_s:12.0f} configs/s  ({python_s * 1e3:.1f} ms)")
    print(
        f"per call:                  {python_s / len(cases) * 1e6:.2f} us (Python), ratio Python/header time {python_s / reference_s:.1f}x"
    )
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
