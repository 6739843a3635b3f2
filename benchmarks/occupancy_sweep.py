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
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from canary.catalog import DeviceSpec, all_devices  # noqa: E402
from tests.harness.occupancy_reference import (  # noqa: E402
    canary_row,
    compile_reference,
    missing_reason,
    reference_line,
    run_reference,
)

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


def python_row(case: Case) -> list[int]:
    return canary_row(*case)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    reason = missing_reason()
    if reason is not None:
        sys.stderr.write(f"{reason}\n")
        return 4
    cases = make_cases(args.cases, args.seed)
    lines = [reference_line(*case) for case in cases]
    with tempfile.TemporaryDirectory() as tmp:
        binary = compile_reference(Path(tmp), optimize="-O2")
        start = time.perf_counter()
        expected = run_reference(binary, lines)
        reference_s = time.perf_counter() - start
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
