"""The bridge to NVIDIA's reference occupancy calculator: compile ``occupancy_ref.cpp`` against
``cuda_occupancy.h``, feed it configurations, and put canary's results in the same row form.
Used by the exactness tests and by ``benchmarks/occupancy_sweep.py``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from canary.catalog import DeviceSpec
from canary.occupancy import OccupancyResult, cuda_occupancy

HEADER_DIR = Path("/usr/local/cuda/include")
HARNESS = Path(__file__).resolve().parent / "occupancy_ref.cpp"
INT_MAX = 2**31 - 1
FLAG_BITS = {"warps": 0x01, "registers": 0x02, "shared_memory": 0x04, "blocks": 0x08, "barriers": 0x10}


def missing_reason() -> str | None:
    """Why the reference cannot be built here, or ``None`` when it can."""
    if not (HEADER_DIR / "cuda_occupancy.h").is_file():
        return f"cuda_occupancy.h not found under {HEADER_DIR}: install the CUDA toolkit headers"
    if shutil.which("g++") is None:
        return "g++ not found: the reference is cuda_occupancy.h compiled with g++"
    return None


def compile_reference(directory: Path, *, optimize: str = "-O1") -> Path:
    """Build the harness into ``directory``; call ``missing_reason()`` first."""
    compiler = shutil.which("g++")
    assert compiler is not None
    binary = directory / "occupancy_ref"
    subprocess.run([compiler, optimize, "-Wall", "-Werror", f"-I{HEADER_DIR}", "-o", str(binary), str(HARNESS)],
                   check=True, capture_output=True, timeout=120)
    return binary


def reference_line(spec: DeviceSpec, regs: int, block: int, static: int, dynamic: int, carveout: int,
                   barriers: int) -> str:
    """One configuration in the harness's input format (the kernel opts in to the maximum dynamic smem)."""
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
    return " ".join(str(v) for v in values)


def run_reference(binary: Path, lines: list[str]) -> list[list[int]]:
    completed = subprocess.run([str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                               check=True, timeout=300)
    rows = [[int(x) for x in row.split()] for row in completed.stdout.splitlines()]
    assert len(rows) == len(lines)
    return rows


def as_reference_row(result: OccupancyResult) -> list[int]:
    """canary's result in the harness's output form (error code 0, unlimited as INT_MAX)."""

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


def canary_row(spec: DeviceSpec, regs: int, block: int, static: int, dynamic: int, carveout: int,
               barriers: int) -> list[int]:
    """canary.occupancy on one configuration, as a reference row."""
    return as_reference_row(cuda_occupancy(
        spec,
        registers_per_thread=regs,
        threads_per_block=block,
        static_shared_bytes=static,
        dynamic_shared_bytes=dynamic,
        carveout_pct=carveout,
        barriers=barriers,
    ))
