"""Kernel resources from a CUDA binary with ``cuobjdump --dump-resource-usage``.

Works on cubins, fatbins, relocatable objects (``.o``), executables and shared libraries. For a
fatbin each embedded ELF is preceded by a header naming its ``arch``; a bare cubin has none, so its
architecture is read from the ELF header.

**The sm_90+ shared-memory reserve.** From sm_90 on, when any kernel of a module uses shared memory
(static or dynamic), cuobjdump reports every kernel's ``SHARED`` as ptxas's number + 1024 (a dynamic-only kernel shows ``SHARED:1024``; a module
with no shared memory shows 0). The occupancy rules add the 1 KiB per-block reserve themselves, so
the profile's ``static_shared_bytes`` is ptxas's number: the reserve is subtracted here.

**Spills.** Spilled registers live in the stack frame: cuobjdump's ``STACK`` equals ptxas's "bytes
stack frame" and ``LOCAL`` stays 0, so ``stack_bytes`` is what to look at for spills.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from canary.errors import InputError, OperationalError

SM90_SHARED_RESERVE_BYTES = 1024
_EM_CUDA = 190

_ARCH = re.compile(r"^arch\s*=\s*sm_(\d+)([a-z]?)\s*$")
_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_FIELDS = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


@dataclass(frozen=True)
class KernelResources:
    """One kernel in one architecture's code. ``static_shared_bytes`` is ptxas's number (no reserve);
    ``shared_bytes_reported`` is cuobjdump's ``SHARED`` as printed."""

    name: str
    arch: int
    registers_per_thread: int
    static_shared_bytes: int
    shared_bytes_reported: int
    stack_bytes: int
    local_bytes: int
    constant_bytes: int


@dataclass(frozen=True)
class ElfResources:
    arch: int | None
    kernels: tuple[KernelResources, ...]
    shared_reserve_subtracted: bool


def find_cuobjdump() -> str:
    """The cuobjdump binary: the ``nvidia-cuda-cuobjdump`` wheel, else ``$CUDA_HOME`` or ``PATH``."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("cuobjdump")
        if found:
            return str(found)
    except ImportError:
        pass  # cuda-python absent: the PATH is the only other place to look
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    raise OperationalError(
        "cuobjdump not found: pip install nvidia-cuda-cuobjdump (or install the CUDA toolkit and put it on PATH)"
    )


def cubin_arch(image: bytes) -> int | None:
    """The SM version an ELF cubin was built for (90 for sm_90), from ``e_flags``; ``None`` if not a cubin."""
    if len(image) < 52 or image[:4] != b"\x7fELF" or image[4] != 2:
        return None
    (e_machine,) = struct.unpack_from("<H", image, 18)
    if e_machine != _EM_CUDA:
        return None
    (e_flags,) = struct.unpack_from("<I", image, 48)
    # CUDA ELF ABI: OS/ABI 0x33 keeps the SM in the low byte; the newer ABI (OS/ABI 0x41) in bits 8–15.
    if image[7] == 0x41:
        return int((e_flags >> 8) & 0xFF)
    return int(e_flags & 0xFF)


def dump_resource_usage(path: Path, *, timeout_s: float = 60.0) -> str:
    """Run cuobjdump; an unreadable or non-CUDA file is ``InputError`` naming it."""
    tool = find_cuobjdump()
    try:
        done = subprocess.run(
            [tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise OperationalError(f"cuobjdump took longer than {timeout_s:.0f} s on {path}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        reason = message[-1] if message else f"exit status {done.returncode}"
        raise InputError(
            f"cuobjdump cannot read it: {reason.removeprefix('cuobjdump fatal   : ')}", file=str(path)
        )
    return done.stdout


def parse_resource_usage(text: str, *, bare_arch: int | None = None) -> list[ElfResources]:
    """Parse ``--dump-resource-usage`` output into one entry per embedded ELF.

    ``bare_arch`` is a bare cubin's architecture (it has no ``Fatbin elf code`` headers). The reserve
    is recognised per ELF: on sm_90+ a module shows either 0 for every kernel (no shared memory
    anywhere) or ≥ 1024 for every kernel (the reserve is there). The ``.nv.shared.reserved.0`` section
    itself is no sign: nvcc 13 emits it, empty, in modules without shared memory too."""
    blocks: list[tuple[int | None, list[tuple[str, dict[str, int]]]]] = []
    arch: int | None = bare_arch
    in_ptx = False
    current: list[tuple[str, dict[str, int]]] | None = None
    pending_function: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Fatbin elf code"):
            in_ptx, arch, current = False, None, None
            continue
        if line.startswith("Fatbin ptx code"):
            in_ptx, current = True, None
            continue
        arch_match = _ARCH.match(line)
        if arch_match:
            arch = int(arch_match.group(1))
            continue
        if in_ptx:
            continue
        if line.startswith("Resource usage:"):
            current = []
            blocks.append((arch, current))
            continue
        function = _FUNCTION.match(raw)
        if function and current is not None:
            pending_function = function.group(1)
            continue
        if pending_function is not None and current is not None and "REG:" in line:
            current.append((pending_function, {k: int(v) for k, v in _FIELDS.findall(line)}))
            pending_function = None
    result = []
    for block_arch, kernels in blocks:
        subtract = False
        if block_arch is not None and block_arch >= 90 and kernels:
            shared = [fields.get("SHARED", 0) for _, fields in kernels]
            subtract = any(s > 0 for s in shared)
            if subtract and min(shared) < SM90_SHARED_RESERVE_BYTES:
                raise InputError(
                    f"sm_{block_arch} code reports SHARED below the 1 KiB reserve ({min(shared)} B) in a module "
                    "that uses shared memory; this cuobjdump output is not understood"
                )
        parsed = []
        for name, fields in kernels:
            reported = fields.get("SHARED", 0)
            constant = sum(v for k, v in fields.items() if k.startswith("CONSTANT"))
            parsed.append(
                KernelResources(
                    name=name,
                    arch=block_arch if block_arch is not None else 0,
                    registers_per_thread=fields.get("REG", 0),
                    static_shared_bytes=reported - SM90_SHARED_RESERVE_BYTES if subtract else reported,
                    shared_bytes_reported=reported,
                    stack_bytes=fields.get("STACK", 0),
                    local_bytes=fields.get("LOCAL", 0),
                    constant_bytes=constant,
                )
            )
        result.append(
            ElfResources(arch=block_arch, kernels=tuple(parsed), shared_reserve_subtracted=subtract)
        )
    return result


#: Largest binary read: far above a real CUDA executable or library (a few hundred MiB with every
#: architecture's cubins), far below what would exhaust a machine's memory or time.
MAX_BINARY_BYTES = 2 * 1024**3
#: Bytes of the file's start read to tell a bare cubin (its ELF header) from anything else.
_ELF_HEADER_BYTES = 64


def check_binary_file(path: str | Path, *, option: str = "FILE") -> Path:
    """``path`` when it is (links resolved) a regular file of at most ``MAX_BINARY_BYTES``; else
    ``InputError`` naming the option and the file. A device never ends (``/dev/zero``) and opening a FIFO
    blocks, so both are refused before anything opens them."""
    import os
    import stat

    file = str(path)
    try:
        info = os.stat(path)  # follows links: the file a link names is what would be read
    except FileNotFoundError:
        raise InputError("file not found", file=file, field=option) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=file, field=option) from None
    except ValueError:
        raise InputError("not a file name (holds a NUL character)", file=file, field=option) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError("is a directory, expected a CUDA binary", file=file, field=option)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            "not a regular file (a device, FIFO or socket), expected a CUDA binary", file=file, field=option
        )
    if info.st_size > MAX_BINARY_BYTES:
        raise InputError(
            f"{info.st_size} bytes, larger than {MAX_BINARY_BYTES // 1024**3} GiB "
            "(limit MAX_BINARY_BYTES); not a CUDA binary canary reads",
            file=file,
            field=option,
        )
    return Path(path)


def read_binary(path: str | Path) -> list[ElfResources]:
    """Resources of every ELF in ``path`` (PTX-only entries have none and are skipped); ``InputError``
    when ``path`` is not a regular file of at most ``MAX_BINARY_BYTES`` (``check_binary_file``)."""
    file = check_binary_file(path)
    try:
        with file.open("rb") as handle:
            head = handle.read(_ELF_HEADER_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(path)) from None
    text = dump_resource_usage(file)
    arch = cubin_arch(head)
    is_cubin = arch is not None and "Fatbin elf code" not in text
    return parse_resource_usage(text, bare_arch=arch if is_cubin else None)
