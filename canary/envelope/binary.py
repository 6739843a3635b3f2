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

from canary._model import MAX_KERNEL_NAME_CHARS, name_problem, shorten
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


def base_name(symbol: str) -> str | None:
    """The qualified name of a C++ kernel without parameters or template arguments, read from its
    Itanium-ABI symbol (the name cuobjdump prints): ``_Z11gemm_kernelPKfS0_Pfiii`` → ``gemm_kernel``,
    ``_ZN4cute6detail4gemmILi128EEEvPf`` → ``cute::detail::gemm``. ``None`` for a name that is not
    mangled (``extern "C"`` kernels are named as written) or not understood here.

    A kernel is a namespace-scope function (``__global__`` cannot be a member), so its name is a
    sequence of ``<length><identifier>`` parts, nested in ``N…E`` when there are several; the
    parameter types and template arguments that follow are not read."""
    if not symbol.startswith("_Z"):
        return None
    i, n = 2, len(symbol)
    nested = symbol.startswith("_ZN")
    if nested:
        i += 1
    parts: list[str] = []
    while i < n:
        if symbol.startswith("St", i) and not parts:
            parts.append("std")
            i += 2
            continue
        if symbol[i] == "L" and not nested:  # internal linkage (a static function)
            i += 1
            continue
        j = i
        while j < n and symbol[j].isdigit():
            j += 1
        if j == i or symbol[i] == "0":
            return None
        length = int(symbol[i:j])
        if length > n - j:
            return None
        part = symbol[j:j + length]
        parts.append("(anonymous namespace)" if part.startswith("_GLOBAL__N") else part)
        i = j + length
        while symbol.startswith("B", i):  # ABI tag: [abi:NAME], not part of the name a user writes
            k = i + 1
            while k < n and symbol[k].isdigit():
                k += 1
            if k == i + 1:
                return None
            i = k + int(symbol[i + 1:k])
        if not nested or i >= n or symbol[i] in "EI":
            break
    return "::".join(parts) if parts else None


def resolve_kernel(name: str, kernels: Sequence[KernelResources], *, option: str) -> KernelResources:
    """The kernel ``name`` means: the one cuobjdump prints under that exact name, else the only one whose
    C++ name (``base_name``: qualified, without parameters or template arguments) is ``name``. A name
    that matches several kernels (overloads, template instances) is an error listing them."""
    for kernel in kernels:
        if kernel.name == name:
            return kernel
    matches = [k for k in kernels if base_name(k.name) == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = ", ".join(k.name for k in matches)
        raise InputError(f"{name!r} matches {len(matches)} kernels: {listed}; give the one meant as cuobjdump "
                         "prints it", field=option)
    have = ", ".join(_described(k.name) for k in kernels)
    raise InputError(f"no kernel named {name!r} in the binary (kernels: {have})", field=option)


def _described(symbol: str) -> str:
    base = base_name(symbol)
    return symbol if base is None else f"{symbol} ({base})"


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
    with neither is an ``InputError`` naming it. ``kernels`` restricts the profile to those names.
    Names in ``launches`` and ``kernels`` are resolved by ``resolve_kernel``: as cuobjdump prints
    them, or a C++ kernel's name without parameters when that names one kernel only."""
    file = Path(path)
    elves = read_binary(file)
    found = select_arch(elves, arch, str(path))
    if kernels:
        kept = {resolve_kernel(k, found, option="--kernel").name for k in kernels}
        found = [k for k in found if k.name in kept]
    by_kernel: dict[str, Launch] = {}
    given: dict[str, str] = {}
    for asked, launch in (launches or {}).items():
        kernel = resolve_kernel(asked, found, option="--launch")
        if kernel.name in by_kernel:
            raise InputError(f"--launch {given[kernel.name]!r} and {asked!r} both name {kernel.name}", field="--launch")
        by_kernel[kernel.name], given[kernel.name] = launch, asked
    without = [_described(k.name) for k in found if k.name not in by_kernel and threads_per_block is None]
    if without:
        raise InputError(
            f"the binary does not say how kernels are launched; give --threads N or --launch NAME=THREADS for: "
            f"{', '.join(without)}",
            field="--threads",
        )
    specs = []
    for kernel in found:
        launch = by_kernel.get(kernel.name) or Launch(threads_per_block or 0)
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
    if name is None:  # the file's name stands in for the profile's: it must be one
        name = file.stem
        problem = name_problem(name)
        if problem is not None:
            raise InputError(f"the file's name {problem}; give the profile a name with --name", file=str(path),
                             field="--name")
    for kernel in found:  # a hostile binary's symbol table may hold anything
        problem = name_problem(kernel.name, max_chars=MAX_KERNEL_NAME_CHARS)
        if problem is not None:
            raise InputError(f"kernel {shorten(kernel.name)!r}: its name {problem}", file=str(path))
    return WorkloadProfile(
        name=name,
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
