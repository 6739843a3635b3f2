"""Co-residency truth of the ``hard-sm`` scenarios from NVIDIA's compiled occupancy calculator.

The benchmark's hard-fit truth must not come from the code it checks. For SM co-residency the
per-block allocations (registers after allocation granularity, shared memory with the per-block
reservation) and the blocks per SM a persistent kernel holds are taken from ``cuda_occupancy.h``
itself, compiled with g++ through the harness in ``tests/harness`` — not from ``canary.occupancy``.
Compiling needs g++ and the CUDA headers, which a machine running ``canary bench`` may lack, so the
results are precomputed into ``data/coresidency_truth.json`` (in this package) by::

    python -m canary.bench.coresidency_table --write     # from the repository root

and :func:`load` reads that file. The file records the header's path and the inputs of every row, so
a reader can repeat the computation; a scenario missing from it is an error, never a guess.

The co-residency rule applied on top of the calculator's numbers: with the resident's persistent
blocks on every SM (blocks per SM = the calculator's active blocks, capped by the grid), one block of
each candidate kernel must fit beside them — registers, shared memory, warps and block slots per SM
against the device's per-SM limits (CUDA Programming Guide, "Compute Capabilities", table of
technical specifications). The resource named is the first shortfall in the order registers, shared
memory, warps, blocks.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parent / "data" / "coresidency_truth.json"
ORDER = ("registers", "shared_memory", "warps", "blocks")


def load() -> dict[str, Any]:
    """The precomputed table: ``{"header": …, "scenarios": {id: {"fits": bool, "resource": str | None, …}}}``."""
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


def _kernel_rows(spec: Any, kernels: list[Any]) -> list[str]:
    from tests.harness.occupancy_reference import reference_line

    return [
        reference_line(spec, k.registers_per_thread, k.threads_per_block, k.static_shared_bytes,
                       k.dynamic_shared_bytes, 100, k.barriers)
        for k in kernels
    ]


def compute() -> dict[str, Any]:
    """Compile the reference and evaluate every ``hard-sm`` scenario (needs g++ and cuda_occupancy.h)."""
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from canary.bench.scenarios import _hard_fit
    from tests.harness.occupancy_reference import HEADER_DIR, compile_reference, missing_reason, run_reference

    why = missing_reason()
    if why is not None:
        raise SystemExit(f"cannot build NVIDIA's occupancy calculator here: {why}")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = compile_reference(Path(tmp))
        for sc in _hard_fit():
            if sc.family != "hard-sm":
                continue
            spec = sc.spec
            held = [k for r in sc.snapshot.residents if r.profile is not None for k in r.profile.kernels
                    if k.persistent]
            guests = list(sc.candidate.kernels)
            rows = run_reference(binary, _kernel_rows(spec, held + guests))
            used = {"registers": 0, "shared_memory": 0, "warps": 0, "blocks": 0}
            held_doc = []
            for k, row in zip(held, rows[: len(held)], strict=True):
                active, regs, smem = row[1], row[8], row[9]
                blocks = active if k.grid_blocks is None else min(active, math.ceil(k.grid_blocks / spec.sm_count))
                warps = math.ceil(k.threads_per_block / spec.warp_size)
                used["registers"] += blocks * regs
                used["shared_memory"] += blocks * smem
                used["warps"] += blocks * warps
                used["blocks"] += blocks
                held_doc.append({"kernel": k.name, "reference_row": row, "blocks_per_sm": blocks})
            limits = {
                "registers": spec.registers_per_sm,
                "shared_memory": spec.shared_memory_per_sm_bytes,
                "warps": spec.max_threads_per_sm // spec.warp_size,
                "blocks": spec.max_blocks_per_sm,
            }
            failing: dict[str, str] = {}
            guest_doc = []
            for k, row in zip(guests, rows[len(held):], strict=True):
                need = {"registers": row[8], "shared_memory": row[9],
                        "warps": math.ceil(k.threads_per_block / spec.warp_size), "blocks": 1}
                guest_doc.append({"kernel": k.name, "reference_row": row})
                for resource in ORDER:
                    if used[resource] + need[resource] > limits[resource] and resource not in failing:
                        failing[resource] = (f"kernel {k.name}: {resource} per SM {used[resource]} held + "
                                             f"{need[resource]} > {limits[resource]}")
            limiting = next((r for r in ORDER if r in failing), None)
            out[sc.id] = {
                "device": spec.name,
                "fits": limiting is None,
                "resource": limiting,
                "detail": "; ".join(failing[r] for r in ORDER if r in failing) or "one block of every kernel fits",
                "held_per_sm": used,
                "limits_per_sm": limits,
                "resident_kernels": held_doc,
                "candidate_kernels": guest_doc,
            }
    return {
        "generated_by": "python -m canary.bench.coresidency_table --write",
        "header": str(HEADER_DIR / "cuda_occupancy.h"),
        "reference_row": "status, active blocks/SM, limiting flags, block limits (regs, smem, warps, blocks, "
                         "barriers), allocated registers/block, allocated shared memory/block (bytes)",
        "scenarios": out,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.name} (else print)")
    args = parser.parse_args(argv)
    doc = compute()
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.write:
        TABLE.parent.mkdir(parents=True, exist_ok=True)
        TABLE.write_text(text, encoding="utf-8")
        print(f"wrote {TABLE} ({len(doc['scenarios'])} scenarios)")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
