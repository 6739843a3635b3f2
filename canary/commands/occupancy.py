"""``canary occupancy`` — theoretical occupancy of one kernel configuration on a catalog device.

NVIDIA devices use the rules of ``cuda_occupancy.h`` (``--regs``, ``--threads``, shared memory,
``--carveout``); AMD CDNA devices use LLVM's AMDGPU rules (``--vgprs``, ``--agprs``, ``--sgprs``,
``--lds``, ``--threads`` as the workgroup size). The device decides which; flags of the other
vendor are refused. Sizes accept units: ``49152``, ``48KiB``, ``48K``, ``1MiB``, ``48kB``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from canary.errors import EXIT_ADMIT, InputError

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.occupancy import CdnaOccupancyResult, OccupancyResult

_CUDA_FIELDS = (
    "compute_capability",
    "registers_per_sm",
    "registers_per_block",
    "warp_size",
    "max_threads_per_sm",
    "max_threads_per_block",
    "max_blocks_per_sm",
    "shared_memory_per_sm_bytes",
    "shared_memory_per_block_bytes",
    "shared_memory_per_block_optin_bytes",
    "reserved_shared_memory_per_block_bytes",
)
_CDNA_FIELDS = (
    "warp_size",
    "max_threads_per_block",
    "cdna.simds_per_cu",
    "cdna.max_waves_per_simd",
    "cdna.vgprs_per_simd",
    "cdna.vgpr_alloc_granule",
    "cdna.max_arch_vgprs",
    "cdna.max_vgprs_per_wave",
    "cdna.agpr_base_alignment",
    "cdna.sgprs_per_simd",
    "cdna.sgpr_alloc_granule",
    "cdna.max_sgprs_per_wave",
    "cdna.lds_per_cu_bytes",
    "cdna.lds_alloc_granule_bytes",
    "cdna.max_workgroup_size",
    "cdna.max_workgroup_barrier_slots",
)


def parse_size_bytes(text: str, option: str) -> int:
    """Bytes from ``49152``, ``48KiB``, ``48K``, ``1MiB`` or ``48kB`` (the on-chip reading of
    :func:`canary.units.parse_bytes`); ``InputError`` naming ``option`` otherwise."""
    from canary.units import parse_bytes

    try:
        return parse_bytes(text, on_chip=True)
    except ValueError as exc:
        raise InputError(str(exc), field=option) from None


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "occupancy",
        help="theoretical occupancy of a kernel configuration on a catalog device",
        description=(
            "Blocks per SM (NVIDIA, the rules of cuda_occupancy.h) or workgroups per CU (AMD CDNA, "
            "LLVM's AMDGPU rules) and the resources that limit them."
        ),
    )
    parser.add_argument(
        "--device", required=True, help="catalog name, alias, NVML name or PCI id (e.g. h100, 0x2330)"
    )
    parser.add_argument(
        "--threads", required=True, type=int, help="threads per block (AMD: work-items per workgroup)"
    )
    nvidia = parser.add_argument_group("NVIDIA devices")
    nvidia.add_argument("--regs", type=int, help="registers per thread")
    nvidia.add_argument("--static-smem", default=None, help="static shared memory per block (default 0)")
    nvidia.add_argument("--dynamic-smem", default=None, help="dynamic shared memory per block (default 0)")
    nvidia.add_argument(
        "--carveout", type=int, default=None, help="shared-memory carveout percent, -1 (default) to 100"
    )
    nvidia.add_argument(
        "--barriers", type=int, default=None, help="block barriers the kernel uses (default 1)"
    )
    amd = parser.add_argument_group("AMD CDNA devices")
    amd.add_argument("--vgprs", type=int, help="architectural VGPRs per wave")
    amd.add_argument("--agprs", type=int, default=None, help="accumulation VGPRs per wave (default 0)")
    amd.add_argument("--sgprs", type=int, default=None, help="SGPRs per wave (default 0)")
    amd.add_argument("--lds", default=None, help="LDS per workgroup (default 0)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def _refuse(args: argparse.Namespace, names: tuple[str, ...], vendor: str) -> None:
    for name in names:
        if getattr(args, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} applies to {vendor} devices only", field=flag)


def _pct(value: float) -> str:
    """A percentage with up to four decimals, trailing zeros dropped (one kept): an exact fraction of
    the warp slots reads exactly (6.25%, 1.5625%, 100.0%), a repeating one to 4 places (2.0833%)."""
    text = f"{value:.4f}".rstrip("0")
    return (text + "0" if text.endswith(".") else text) + "%"


def _limit_text(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def _limits_table(
    column: str, rows: tuple[tuple[str, str, int | None], ...], limiting: tuple[str, ...], active: str
) -> list[str]:
    """What limits the blocks (NVIDIA) or workgroups (AMD) per multiprocessor, one row a resource,
    the limiting ones marked, then the active count."""
    width = len(column) + 1
    lines = [f"{'limit':<16}{column:>{width}}"]
    for label, key, value in rows:
        mark = "  <- limiting" if key in limiting else ""
        lines.append(f"{label:<16}{_limit_text(value):>{width}}{mark}")
    lines.append(f"{'active':<16}{active}")
    return lines


def _render_cuda(
    spec: DeviceSpec, args: argparse.Namespace, sizes: dict[str, int], result: OccupancyResult
) -> str:
    from canary.occupancy import CUDA_OCC_HEADER_VERSION, explain_register_limit

    assert spec.compute_capability is not None
    major, minor = spec.compute_capability
    carveout = "default" if args.carveout in (None, -1) else f"{args.carveout}%"
    lines = [
        f"{spec.name} (cc {major}.{minor}): {args.regs} regs/thread, {args.threads} threads/block, "
        f"static {sizes['static']} B, dynamic {sizes['dynamic']} B, carveout {carveout}",
        "",
    ]
    rows = (
        ("registers", "registers", result.block_limit_registers),
        ("shared memory", "shared_memory", result.block_limit_shared_memory),
        ("warps", "warps", result.block_limit_warps),
        ("blocks", "blocks", result.block_limit_blocks),
        ("barriers", "barriers", result.block_limit_barriers),
    )
    lines += _limits_table(
        "blocks/SM", rows, tuple(result.limiting),
        f"{result.active_blocks_per_sm:>10}  ({result.active_warps_per_sm} of {result.max_warps_per_sm} warps, "
        f"{_pct(result.occupancy_pct)} occupancy)",
    )
    lines += ["", *explain_register_limit(spec, args.regs, result)]
    lines += [
        f"allocated per block: {result.registers_counted_per_block} registers for the per-block check"
        + (f" ({result.allocated_registers_per_block} unrounded)"
           if result.allocated_registers_per_block != result.registers_counted_per_block else "")
        + f", {result.allocated_shared_memory_per_block} B shared memory; SM carveout "
        + ("n/a" if result.shared_memory_config_bytes is None else f"{result.shared_memory_config_bytes} B"),
        f"rules: {CUDA_OCC_HEADER_VERSION}; device numbers: catalog (see --json for sources)",
    ]
    return "\n".join(lines)


def _render_cdna(spec: DeviceSpec, args: argparse.Namespace, lds: int, result: CdnaOccupancyResult) -> str:
    lines = [
        f"{spec.name} ({spec.architecture}): {args.vgprs} VGPRs, {args.agprs or 0} AGPRs, {args.sgprs or 0} SGPRs, "
        f"LDS {lds} B, workgroup {args.threads} ({result.waves_per_workgroup} waves)",
        "",
    ]
    rows = (
        ("VGPRs", "vgprs", result.workgroup_limit_vgprs),
        ("SGPRs", "sgprs", result.workgroup_limit_sgprs),
        ("LDS", "lds", result.workgroup_limit_lds),
        ("wave slots", "waves", result.workgroup_limit_waves),
        ("barrier slots", "workgroup_slots", result.workgroup_limit_workgroup_slots),
    )
    lines += _limits_table(
        "workgroups/CU", rows, tuple(result.limiting),
        f"{result.workgroups_per_cu:>14}  ({result.waves_per_cu} of {result.max_waves_per_cu} waves, "
        f"{result.waves_per_simd} per SIMD, {_pct(result.occupancy_pct)} occupancy)",
    )
    lines += [
        "rules: LLVM AMDGPU (gfx90a/gfx942); device numbers: catalog (see --json for sources)",
    ]
    return "\n".join(lines)


# Library argument names → the command-line flags a user typed.
_FLAGS = {
    "registers_per_thread": "--regs",
    "threads_per_block": "--threads",
    "workgroup_size": "--threads",
    "static_shared_bytes": "--static-smem",
    "dynamic_shared_bytes": "--dynamic-smem",
    "carveout_pct": "--carveout",
    "barriers": "--barriers",
    "vgprs": "--vgprs",
    "agprs": "--agprs",
    "sgprs": "--sgprs",
    "lds_bytes": "--lds",
    "device": "--device",
}


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except InputError as exc:
        flag = _FLAGS.get(exc.field or "")
        if flag is None:
            raise
        raise InputError(exc.problem, file=exc.file, field=flag) from exc


def _run(args: argparse.Namespace) -> int:
    from canary.catalog import lookup
    from canary.occupancy import (
        CUDA_OCC_HEADER_VERSION,
        cdna_occupancy,
        check_cdna_launch,
        check_cuda_launch,
        cuda_occupancy,
    )

    spec = lookup(args.device)
    payload: dict[str, Any]
    if spec.vendor == "nvidia":
        _refuse(args, ("vgprs", "agprs", "sgprs", "lds"), "AMD")
        if args.regs is None:
            raise InputError(f"{spec.name} is an NVIDIA device: --regs is required", field="--regs")
        sizes = {
            "static": 0 if args.static_smem is None else parse_size_bytes(args.static_smem, "--static-smem"),
            "dynamic": 0
            if args.dynamic_smem is None
            else parse_size_bytes(args.dynamic_smem, "--dynamic-smem"),
        }
        # Bad input, not "0 blocks": a configuration no launch on this device can have (limits from the catalog).
        check_cuda_launch(spec, registers_per_thread=args.regs, threads_per_block=args.threads,
                          static_shared_bytes=sizes["static"], dynamic_shared_bytes=sizes["dynamic"])
        result = cuda_occupancy(
            spec,
            registers_per_thread=args.regs,
            threads_per_block=args.threads,
            static_shared_bytes=sizes["static"],
            dynamic_shared_bytes=sizes["dynamic"],
            carveout_pct=args.carveout,
            barriers=1 if args.barriers is None else args.barriers,
        )
        payload = {"device": spec.name, **result.to_json()}
        payload["sources"] = {**spec.sources(_CUDA_FIELDS), "rules": CUDA_OCC_HEADER_VERSION}
        text = _render_cuda(spec, args, sizes, result)
    else:
        _refuse(args, ("regs", "static_smem", "dynamic_smem", "carveout", "barriers"), "NVIDIA")
        if args.vgprs is None:
            raise InputError(f"{spec.name} is an AMD device: --vgprs is required", field="--vgprs")
        lds = 0 if args.lds is None else parse_size_bytes(args.lds, "--lds")
        check_cdna_launch(spec, workgroup_size=args.threads, lds_bytes=lds)
        cdna_result = cdna_occupancy(
            spec,
            vgprs=args.vgprs,
            agprs=args.agprs or 0,
            sgprs=args.sgprs or 0,
            lds_bytes=lds,
            workgroup_size=args.threads,
        )
        payload = {"device": spec.name, **cdna_result.to_json()}
        payload["sources"] = {
            **spec.sources(_CDNA_FIELDS),
            "rules": "LLVM AMDGPUBaseInfo.cpp (gfx90a/gfx942)",
        }
        text = _render_cdna(spec, args, lds, cdna_result)
    if args.json:
        json.dump(payload, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text + "\n")
    return EXIT_ADMIT
