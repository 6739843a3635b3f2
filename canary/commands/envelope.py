"""``canary envelope from-binary|record``: build a workload profile draft from evidence."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from canary._model import check_cli_name
from canary.errors import InputError

if TYPE_CHECKING:
    from canary.profile import WorkloadProfile


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "envelope",
        help="build a workload profile draft from a CUDA binary or a recorded run",
        description="Build a workload profile draft from a CUDA binary (cuobjdump) or from a run sampled with NVML.",
    )
    sub = parser.add_subparsers(dest="envelope_command", metavar="SUBCOMMAND")

    binary = sub.add_parser(
        "from-binary",
        help="kernels from a cubin, fatbin, .o or .so",
        description=(
            "Read registers, static shared memory and stack of every kernel with cuobjdump. The binary "
            "does not say how kernels are launched or how much memory the workload holds, so --memory-peak "
            "and a block size (--threads or --launch) are required."
        ),
    )
    binary.add_argument("file", metavar="FILE", help="the executable, shared library, cubin or fatbin to read")
    binary.add_argument("--arch", help="architecture to read (sm_90); needed when the binary holds several")
    binary.add_argument("--name", help="profile name (default: the file name)")
    binary.add_argument("--out", metavar="PROFILE", help="write the draft here instead of standard output")
    binary.add_argument(
        "--memory-peak", required=True, metavar="SIZE", help="most device memory it holds (40Gi)"
    )
    binary.add_argument("--memory-reserved", metavar="SIZE", help="memory taken at start (default: the peak)")
    binary.add_argument("--threads", type=int, metavar="N", help="threads per block for every kernel")
    binary.add_argument(
        "--launch",
        action="append",
        default=[],
        metavar="NAME=THREADS[:GRID[:DYN_SMEM]]",
        help="one kernel's launch shape (repeatable); overrides --threads. NAME as cuobjdump prints it "
        "(_Z11gemm_kernelPfi), or a C++ kernel's name without parameters (gemm_kernel, ns::gemm_kernel) "
        "when only one kernel has it",
    )
    binary.add_argument(
        "--kernel", action="append", default=[], metavar="NAME",
        help="keep only these kernels (repeatable; names as for --launch)"
    )
    binary.set_defaults(handler=run_from_binary)

    rec = sub.add_parser(
        "record",
        help="sample NVML while a command runs",
        description="Run COMMAND and sample its device memory and the GPU's utilisation through NVML.",
    )
    rec.add_argument("--index", type=int, default=0, help="NVIDIA GPU index (default 0)")
    rec.add_argument("--interval-ms", type=float, default=100.0, help="sampling interval (default 100)")
    rec.add_argument("--name", help="profile name (default: the command's name)")
    rec.add_argument("--version", dest="workload_version", help="workload version (digest or semver)")
    rec.add_argument("--out", metavar="PROFILE", help="write the draft here instead of standard output")
    rec.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND …",
                     help="the workload to run and record, after --")
    rec.set_defaults(handler=run_record)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _size(text: str | None, option: str) -> int | None:
    from canary.units import parse_bytes

    if text is None:
        return None
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise InputError(str(exc), field=option) from None


def _emit(profile: WorkloadProfile, out: str | None) -> None:
    from pathlib import Path

    from canary.envelope.binary import profile_yaml
    from canary.profile import load_profile

    text = profile_yaml(profile)
    if out is None:
        sys.stdout.write(text)
        return
    Path(out).write_text(text, encoding="utf-8")
    load_profile(out)  # the draft must load as written; fail loudly here rather than at admission
    sys.stderr.write(f"wrote {out} ({len(profile.kernels)} kernels)\n")


def run_from_binary(args: argparse.Namespace) -> int:
    import datetime as dt

    from canary.envelope.binary import from_binary, parse_arch, parse_launch

    launches = {}
    for text in args.launch:
        name, launch = parse_launch(text)
        if name in launches:
            raise InputError(f"{name} is given twice", field="--launch")
        launches[name] = launch
    peak = _size(args.memory_peak, "--memory-peak")
    assert peak is not None  # argparse requires it
    if args.name is not None:
        check_cli_name(args.name, option="--name")
    if args.threads is not None and not 1 <= args.threads <= 1024:
        raise InputError("threads per block must be between 1 and 1024", field="--threads")
    profile = from_binary(
        args.file,
        memory_peak_bytes=peak,
        memory_reserved_bytes=_size(args.memory_reserved, "--memory-reserved"),
        arch=parse_arch(args.arch) if args.arch else None,
        name=args.name,
        threads_per_block=args.threads,
        launches=launches,
        kernels=args.kernel or None,
        created=dt.datetime.now(dt.UTC),
    )
    _emit(profile, args.out)
    return 0


def run_record(args: argparse.Namespace) -> int:
    from canary.envelope.record import record

    if args.name is not None:
        check_cli_name(args.name, option="--name")
    if args.workload_version is not None:
        check_cli_name(args.workload_version, option="--version")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    profile, status = record(
        command, index=args.index, interval_ms=args.interval_ms, name=args.name, version=args.workload_version
    )
    _emit(profile, args.out)
    if status != 0:
        sys.stderr.write(
            f"canary: note: the command exited with status {status}; the draft covers what ran\n"
        )
    return 0
