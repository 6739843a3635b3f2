"""Stage-1 speed: one check of a 20-kernel candidate against 8 residents of 20 kernels each, and
`gpu-fit` whole-process time as a ratio to `python -c pass` and to `python -c "import pydantic"`,
every figure measured in this run (the processes are run in interleaved rounds, so a machine that
gets busier mid-run slows every command alike; the medians are compared).

    .venv/bin/python benchmarks/hardfit.py [--checks 2000] [--processes 20]

Targets: median ≤ 1 ms per check; gpu-fit ≤ 4× `python -c pass` and ≤ 1.6× the bare pydantic
import, with no SQLAlchemy or CUDA library imported on that path. For scale the run also times the
floor of any pydantic-validated command: import ``BaseModel``, define a one-field model, validate
one value.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from canary.catalog import lookup  # noqa: E402
from canary.hardfit import check, parse_regime  # noqa: E402
from canary.hardfit import compute as compute_module  # noqa: E402
from canary.policy import load_policy  # noqa: E402
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile  # noqa: E402
from canary.quantiles import quantile  # noqa: E402
from canary.snapshot import DeviceSnapshot, MigState, MpsState, Resident  # noqa: E402

GiB = 1 << 30


def _kernels(rng: random.Random, prefix: str, persistent_every: int) -> tuple[KernelSpec, ...]:
    out = []
    for i in range(20):
        out.append(KernelSpec(
            name=f"{prefix}{i}", registers_per_thread=rng.choice([16, 24, 32, 40, 64, 96, 128]),
            threads_per_block=rng.choice([64, 128, 256, 512]),
            static_shared_bytes=rng.choice([0, 256, 2048, 8192]), grid_blocks=rng.choice([8, 16, 32, 132, 1024]),
            persistent=persistent_every > 0 and i % persistent_every == 0,
        ))
    return tuple(out)


def workload(rng: random.Random, name: str, persistent_every: int, latency_critical: bool) -> WorkloadProfile:
    return WorkloadProfile(name=name, version="1", memory=MemoryEnvelope(reserved_bytes=GiB, peak_bytes=2 * GiB),
                           kernels=_kernels(rng, name, persistent_every), latency_critical=latency_critical,
                           sharing=SharingModes(mps_active_thread_pct=25))


def percentile(values: list[float], q: float) -> float:
    result = quantile(values, q)
    assert result is not None
    return result


def bench_check(n: int) -> dict[str, float]:
    rng = random.Random(7)
    spec = lookup("h100-sxm")
    policy = load_policy("default")
    residents = tuple(Resident(name=f"r{i}", profile=workload(rng, f"r{i}_", 10, False),
                               observed_memory_bytes=GiB) for i in range(8))
    snap = DeviceSnapshot(device_type="h100-sxm", compute_mode="DEFAULT", mig=MigState(enabled=False),
                          mps=MpsState(running=True, clients=8, max_clients=48, pinned_memory_limit_bytes=40 * GiB),
                          memory_total_bytes=80 * GiB, memory_used_bytes=8 * GiB, memory_reserved_bytes=GiB,
                          residents=residents)
    cand = workload(rng, "c", 0, True)
    regime = parse_regime("mps:25")
    out: dict[str, float] = {}
    for label, clear in (("cold", True), ("warm", False)):
        times = []
        for _ in range(n):
            if clear:
                compute_module._CACHE.clear()
            t0 = time.perf_counter()
            hard = check(snap, spec, cand, policy, regime)
            times.append((time.perf_counter() - t0) * 1000)
        out[f"{label}_median_ms"] = statistics.median(times)
        out[f"{label}_p99_ms"] = percentile(times, 0.99)
    out["findings"] = len(hard.findings)
    return out


PYDANTIC_FLOOR = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)\n"


def bench_process(n: int) -> dict[str, float]:
    gpu_fit = Path(sys.executable).parent / "gpu-fit"
    profile = str(ROOT / "examples" / "profiles" / "embedding-service.yaml")
    commands = {
        "python_pass_ms": [sys.executable, "-c", "pass"],
        "pydantic_import_ms": [sys.executable, "-c", "import pydantic"],
        "pydantic_floor_ms": [sys.executable, "-c", PYDANTIC_FLOOR],
        "gpu_fit_ms": [str(gpu_fit), "h100", profile, "--no-store"],
        "gpu_fit_with_store_lookup_ms": [str(gpu_fit), "h100", profile],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(n):  # interleaved rounds: a load change hits every command alike
        for name, argv in commands.items():
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=120)
            times[name].append((time.perf_counter() - t0) * 1000)
    out: dict[str, float] = {name: statistics.median(values) for name, values in times.items()}
    imports = subprocess.run([sys.executable, "-X", "importtime", "-c",
                              f"from canary.cli import gpu_fit_main; gpu_fit_main(['h100', {profile!r}, '--json'])"],
                             capture_output=True, text=True, timeout=120)
    heavy = sorted({line.split("|")[-1].strip().split(".")[0] for line in imports.stderr.splitlines()
                    if line.startswith("import time:") and line.split("|")[-1].strip().split(".")[0]
                    in ("sqlalchemy", "alembic", "pynvml", "cuda", "amdsmi", "numpy")})
    base, pyd = out["python_pass_ms"], out["pydantic_import_ms"]
    out.update(ratio=out["gpu_fit_ms"] / base, ratio_with_store=out["gpu_fit_with_store_lookup_ms"] / base,
               ratio_pydantic=out["gpu_fit_ms"] / pyd, floor_ratio_pydantic=out["pydantic_floor_ms"] / pyd)
    return {**out, "heavy_imports": heavy}  # type: ignore[dict-item]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=20)
    args = parser.parse_args()
    c = bench_check(args.checks)
    print(f"stage-1 check, 20-kernel latency-critical candidate vs 8 residents x 20 kernels (mps:25, h100-sxm), "
          f"{int(c['findings'])} findings, {args.checks} checks")
    print(f"  cold occupancy cache (every kernel seen for the first time): median {c['cold_median_ms']:.3f} ms  p99 {c['cold_p99_ms']:.3f} ms  "
          f"(target median <= 1 ms: {'met' if c['cold_median_ms'] <= 1 else 'MISSED'})")
    print(f"  warm occupancy cache: median {c['warm_median_ms']:.3f} ms  p99 {c['warm_p99_ms']:.3f} ms  "
          f"(target median <= 1 ms: {'met' if c['warm_median_ms'] <= 1 else 'MISSED'}; a process that checks "
          "many pairs sees each kernel shape once)")
    p = bench_process(args.processes)
    print(f"whole process, median of {args.processes}:")
    print(f"  python -c pass                {p['python_pass_ms']:.1f} ms  (baseline)")
    print(f"  python -c 'import pydantic'   {p['pydantic_import_ms']:.1f} ms  (pydantic baseline)")
    print(f"  one pydantic model validated  {p['pydantic_floor_ms']:.1f} ms  = {p['floor_ratio_pydantic']:.2f}x "
          "pydantic baseline (the floor of any command that validates with a pydantic model)")
    print(f"  gpu-fit h100 (no store)       {p['gpu_fit_ms']:.1f} ms  = {p['ratio']:.2f}x baseline "
          f"(target <= 4x: {'met' if p['ratio'] <= 4 else 'MISSED'}) = {p['ratio_pydantic']:.2f}x pydantic baseline "
          f"(target <= 1.6x: {'met' if p['ratio_pydantic'] <= 1.6 else 'MISSED'})")
    print(f"  gpu-fit h100                  {p['gpu_fit_with_store_lookup_ms']:.1f} ms  = {p['ratio_with_store']:.2f}x baseline")
    print(f"  heavy modules imported on the gpu-fit path: {p['heavy_imports'] or 'none'}")


if __name__ == "__main__":
    main()
