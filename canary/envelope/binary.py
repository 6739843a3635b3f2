"""A profile draft from a CUDA binary: kernels from cuobjdump, identity from the file's digest.

A binary says what each kernel needs per thread and per block (registers, static shared memory,
stack), but not how it is launched (threads per block, grid, dynamic shared memory) nor how much
device memory the workload holds. Those are asked for explicitly — ``--threads``/``--launch`` and
``--memory-peak`` — rather than guessed: a draft that validates is a profile canary will act on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from canary.envelope.cuobjdump import ElfResources, KernelResources, read_binary
from canary.errors import InputError
from canary.profile import KernelSpec, MemoryEnvelope, Provenance, WorkloadProfile

_LAUNCH = re.compile(r"^(?P<name>[^=]+)=(?P<threads>\d+)(?::(?P<grid>\d+))?(?::(?P<dyn>[^:]+))?$")


@dataclass(frozen=True)
class Launch:
    """How one kernel is launched: ``THREADS[:GRID[:DYNAMIC_SMEM]]``."""

    threads_per_block: int
    grid_blocks: int | None = None
    dynamic_shared_bytes: int = 0


def parse_launch(text: str) -> tuple[str, Launch]:
    """``NAME=THREADS[:GRID[:DYNAMIC_SMEM]]`` (sizes accept units: ``48KiB``)."""
    from canary.units import parse_bytes

    match = _LAUNCH.match(text.strip())
    if not match:
        raise InputError(f"expected NAME=THREADS[:GRID[:DYNAMIC_SMEM]], got {text!r}", field="--launch")
    try:
        dyn = parse_bytes(match.group("dyn")) if match.group("dyn") else 0
    except ValueError as exc:
        raise InputError(str(exc), field="--launch") from None
    grid = int(match.group("grid")) if match.group("grid") else None
    return match.group("name"), Launch(int(match.group("threads")), grid, dyn)


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of the file: the workload version (evidence never crosses binaries)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def parse_arch(text: str) -> int:
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)[a-z]?", text.strip())
    if not match:
        raise InputError(f"expected an architecture such as sm_90, got {text!r}", field="--arch")
    return int(match.group(1))


def select_arch(elves: Sequence[ElfResources], arch: int | None, file: str) -> list[KernelResources]:
    """The kernels for one architecture; several architectures and no ``--arch`` is an error."""
    available = sorted({e.arch for e in elves if e.arch is not None and e.kernels})
    if not available:
        raise InputError("no kernels with machine code (SASS) in this binary (PTX only?)", file=file)
    if arch is None:
        if len(available) > 1:
            names = ", ".join(f"sm_{a}" for a in available)
            raise InputError(
                f"the binary holds code for {names}; choose one with --arch", file=file, field="--arch"
            )
        arch = available[0]
    if arch not in available:
        names = ", ".join(f"sm_{a}" for a in available)
        raise InputError(f"no sm_{arch} code in the binary (it has {names})", file=file, field="--arch")
    kernels: dict[str, KernelResources] = {}
    for elf in elves:
        if elf.arch == arch:
            for kernel in elf.kernels:
                kernels.setdefault(kernel.name, kernel)
    return list(kernels.values())


def kernel_note(kernel: KernelResources) -> str:
    parts = [f"sm_{kernel.arch}", f"stack {kernel.stack_bytes} B"]
    if kernel.stack_bytes:
        parts.append("spilled registers live in the stack frame")
    if kernel.local_bytes:
        parts.append(f"local {kernel.local_bytes} B")
    if kernel.shared_bytes_reported != kernel.static_shared_bytes:
        parts.append(f"cuobjdump SHARED {kernel.shared_bytes_reported} B includes the 1 KiB sm_90+ reserve")
    return "; ".join(parts)


def from_binary(
    path: str | Path,
    *,
    memory_peak_bytes: int,
    memory_reserved_bytes: int | None = None,
    arch: int | None = None,
    name: str | None = None,
    threads_per_block: int | None = None,
    launches: Mapping[str, Launch] | None = None,
    kernels: Sequence[str] | None = None,
    created: dt.datetime | None = None,
) -> WorkloadProfile:
    """Build a validated profile draft from a binary.

    Every kernel needs a block size: from ``launches[name]``, else ``threads_per_block``; a kernel
    with neither is an ``InputError`` naming it. ``kernels`` restricts the profile to those names."""
    file = Path(path)
    elves = read_binary(file)
    found = select_arch(elves, arch, str(path))
    launches = dict(launches or {})
    if kernels:
        wanted = set(kernels)
        missing = sorted(wanted - {k.name for k in found})
        if missing:
            raise InputError(
                f"no kernel named {', '.join(missing)} in the binary", file=str(path), field="--kernel"
            )
        found = [k for k in found if k.name in wanted]
    unknown_launch = sorted(set(launches) - {k.name for k in found})
    if unknown_launch:
        have = ", ".join(k.name for k in found)
        raise InputError(
            f"--launch names {', '.join(unknown_launch)}, not in the binary (kernels: {have})",
            field="--launch",
        )
    without = [k.name for k in found if k.name not in launches and threads_per_block is None]
    if without:
        raise InputError(
            f"the binary does not say how kernels are launched; give --threads N or --launch NAME=THREADS for: "
            f"{', '.join(without)}",
            field="--threads",
        )
    specs = []
    for kernel in found:
        launch = launches.get(kernel.name) or Launch(threads_per_block or 0)
        specs.append(
            KernelSpec(
                name=kernel.name,
                registers_per_thread=kernel.registers_per_thread,
                threads_per_block=launch.threads_per_block,
                static_shared_bytes=kernel.static_shared_bytes,
                dynamic_shared_bytes=launch.dynamic_shared_bytes,
                grid_blocks=launch.grid_blocks,
                source="cubin",
                note=kernel_note(kernel),
            )
        )
    reserved = memory_reserved_bytes if memory_reserved_bytes is not None else memory_peak_bytes
    if reserved > memory_peak_bytes:
        raise InputError("--memory-reserved is larger than --memory-peak", field="--memory-reserved")
    return WorkloadProfile(
        name=name or file.stem,
        version=file_digest(file),
        memory=MemoryEnvelope(reserved_bytes=reserved, peak_bytes=memory_peak_bytes, source="declared"),
        kernels=tuple(specs),
        provenance=Provenance(
            source="cubin",
            tool="cuobjdump --dump-resource-usage",
            created=created,
            notes=(
                f"from {file.name}: registers and static shared memory read from the binary; block sizes, "
                "grid and memory declared on the command line"
            ),
        ),
    )


def profile_yaml(profile: WorkloadProfile) -> str:
    """The profile as YAML that ``load_profile`` reads back unchanged (defaults left out)."""
    import yaml

    data = profile.model_dump(mode="json", exclude_defaults=True)
    header = (
        "# Profile draft written by `canary envelope`. Kernel resources come from the binary;\n"
        "# check the launch shapes and memory, then add phases, duty cycle, SLO and sharing modes.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False)
