"""`envelope from-binary` on real binaries: examples/kernels/*.cu compiled with nvcc at test time.

The reference is ptxas itself (``nvcc -Xptxas -v``): registers, shared memory ("bytes smem") and
stack frame (where spills live) must match what the profile says, for sm_80 and sm_90 — on sm_90
cuobjdump adds the 1 KiB shared-memory reserve, which the profile must not carry (gpu-facts §6).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from canary.envelope.binary import from_binary, parse_launch, profile_yaml
from canary.envelope.cuobjdump import cubin_arch, parse_resource_usage
from canary.errors import InputError
from canary.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("stream", "compute", "smem_persistent", "candidate_smem", "spill")
NVCC = shutil.which("nvcc")
Compiled = dict[tuple[str, int], tuple[Path, dict[str, dict[str, int]]]]
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: cannot compile the example kernels")

_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)' for 'sm_(\d+)'")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_report(log: str) -> dict[str, dict[str, int]]:
    """kernel → registers, smem, stack, spill_stores from ``-Xptxas -v`` output."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = m.group(1)
            out[current] = {"smem": 0}
        elif current and (m := _PTXAS_STACK.search(line)):
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)))
        elif current and (m := _PTXAS_USED.search(line)):
            out[current].update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
    return out


@pytest.fixture(scope="module")
def compiled(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, int], tuple[Path, dict[str, dict[str, int]]]]:
    if NVCC is None:
        pytest.skip("nvcc not on PATH")
    work = tmp_path_factory.mktemp("cubins")
    result = {}
    for kernel in KERNELS:
        for arch in (80, 90):
            cubin = work / f"{kernel}.sm_{arch}.cubin"
            done = subprocess.run(
                [
                    NVCC,
                    "-cubin",
                    f"-arch=sm_{arch}",
                    "-Xptxas",
                    "-v",
                    "-o",
                    str(cubin),
                    str(ROOT / "examples/kernels" / f"{kernel}.cu"),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            result[(kernel, arch)] = (cubin, ptxas_report(done.stdout + done.stderr))
    return result


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("kernel", KERNELS)
def test_profile_matches_ptxas(compiled: Compiled, kernel: str, arch: int) -> None:
    cubin, reference = compiled[(kernel, arch)]
    assert cubin_arch(cubin.read_bytes()) == arch
    profile = from_binary(cubin, memory_peak_bytes=1 << 30, threads_per_block=256)
    assert profile.version.startswith("sha256:") and len(profile.version) == 7 + 64
    assert profile.provenance.source == "cubin"
    assert len(profile.kernels) == 1
    spec = profile.kernels[0]
    ptxas = reference[spec.name]
    assert spec.registers_per_thread == ptxas["registers"]
    assert spec.static_shared_bytes == ptxas["smem"], (
        "the profile carries ptxas's number, without the sm_90 reserve"
    )
    assert spec.source == "cubin"
    assert f"stack {ptxas['stack']} B" in (spec.note or "")


@pytest.mark.slow
@needs_nvcc
def test_spill_kernel_really_spills(compiled: Compiled) -> None:
    for arch in (80, 90):
        _, reference = compiled[("spill", arch)]
        assert reference["spill_heavy"]["spill_stores"] > 0
        assert reference["spill_heavy"]["stack"] > 0


@pytest.mark.slow
@needs_nvcc
def test_sm90_module_without_shared_memory_reports_zero(compiled: Compiled) -> None:
    # compute.cu uses no shared memory: cuobjdump says SHARED:0 and nothing is subtracted
    profile = from_binary(compiled[("compute", 90)][0], memory_peak_bytes=1 << 30, threads_per_block=128)
    assert profile.kernels[0].static_shared_bytes == 0
    assert "reserve" not in (profile.kernels[0].note or "")


@pytest.mark.slow
@needs_nvcc
def test_fatbin_object_and_shared_library(tmp_path: Path) -> None:
    src = ROOT / "examples/kernels/candidate_smem.cu"
    gencode = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=[sm_90,compute_90]",
    ]
    fatbin, obj, lib = tmp_path / "k.fatbin", tmp_path / "k.o", tmp_path / "libk.so"
    assert NVCC is not None
    subprocess.run([NVCC, "-fatbin", *gencode, "-o", str(fatbin), str(src)], check=True, timeout=120)
    subprocess.run(
        [NVCC, "-c", *gencode, "-Xcompiler", "-fPIC", "-o", str(obj), str(src)], check=True, timeout=120
    )
    subprocess.run(
        [NVCC, "-shared", *gencode, "-Xcompiler", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=120
    )
    for binary in (fatbin, obj, lib):
        with pytest.raises(InputError, match="sm_80, sm_90; choose one with --arch"):
            from_binary(binary, memory_peak_bytes=1 << 30, threads_per_block=256)
        for arch in (80, 90):
            profile = from_binary(binary, memory_peak_bytes=1 << 30, threads_per_block=256, arch=arch)
            (kernel,) = profile.kernels
            assert (kernel.name, kernel.registers_per_thread, kernel.static_shared_bytes) == (
                "tiled_candidate",
                10,
                40960,
            )


@pytest.mark.slow
@needs_nvcc
def test_written_draft_loads_and_launches_apply(compiled: Compiled, tmp_path: Path) -> None:
    cubin, _ = compiled[("smem_persistent", 90)]
    name, launch = parse_launch("persistent_smem_sleeper=256:132:200KiB")
    profile = from_binary(
        cubin,
        memory_peak_bytes=4 << 30,
        memory_reserved_bytes=1 << 30,
        launches={name: launch},
        name="sleeper",
    )
    out = tmp_path / "profile.yaml"
    out.write_text(profile_yaml(profile))
    loaded = load_profile(out)
    assert loaded == profile
    (kernel,) = loaded.kernels
    assert (kernel.threads_per_block, kernel.grid_blocks, kernel.dynamic_shared_bytes) == (
        256,
        132,
        200 * 1024,
    )
    assert loaded.memory.reserved_bytes == 1 << 30 and loaded.memory.peak_bytes == 4 << 30


@pytest.mark.slow
@needs_nvcc
def test_cli_without_block_size_is_exit_2(compiled: Compiled, tmp_path: Path) -> None:
    cubin, _ = compiled[("stream", 90)]
    base = [sys.executable, "-m", "canary.cli", "envelope", "from-binary", str(cubin), "--memory-peak", "1Gi"]
    done = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--threads" in done.stderr and "Traceback" not in done.stderr
    out = tmp_path / "p.yaml"
    done = subprocess.run(
        [*base, "--threads", "512", "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert load_profile(out).kernels[0].threads_per_block == 512


def test_not_a_cuda_binary_is_input_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not an ELF at all")
    with pytest.raises(InputError) as caught:
        from_binary(junk, memory_peak_bytes=1 << 30, threads_per_block=128)
    assert caught.value.file == str(junk)


def test_parse_recorded_fatbin_output() -> None:
    # cuobjdump 13.x output for a two-architecture fatbin (gpu-facts §6), PTX entry included
    text = """
Fatbin elf code:
================
arch = sm_80
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function spill_heavy:
  REG:32 STACK:3024 SHARED:4096 LOCAL:0 CONSTANT[0]:368 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function _Z4gemmPfi:
  REG:128 STACK:0 SHARED:50176 LOCAL:0 CONSTANT[0]:544 CONSTANT[2]:8 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z4axpyPfi:
  REG:16 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin ptx code:
================
arch = sm_90
code version = [9,0]
"""
    sm80, sm90 = parse_resource_usage(text)
    assert sm80.arch == 80 and not sm80.shared_reserve_subtracted
    assert sm80.kernels[0].static_shared_bytes == 4096 and sm80.kernels[0].stack_bytes == 3024
    assert sm90.shared_reserve_subtracted
    assert [
        (k.name, k.registers_per_thread, k.static_shared_bytes, k.constant_bytes) for k in sm90.kernels
    ] == [
        ("_Z4gemmPfi", 128, 49152, 552),
        ("_Z4axpyPfi", 16, 0, 544),
    ]


def _reference_blocks(spec: object, regs: int, threads: int, static_smem: int, dyn_smem: int) -> int:
    """cuda_occupancy.h steps 1–5 and 8 (gpu-facts §2) written out directly, carveout default."""
    s = spec
    warp = s.warp_size  # type: ignore[attr-defined]
    warps = math.ceil(threads / warp)
    per_warp = math.ceil(regs * warp / 256) * 256
    by_regs = 10**9 if per_warp == 0 else ((s.registers_per_sm // 4) // per_warp) * 4 // warps  # type: ignore[attr-defined]
    by_warps = (s.max_threads_per_sm // warp) // warps  # type: ignore[attr-defined]
    reserved = s.reserved_shared_memory_per_block_bytes  # type: ignore[attr-defined]
    alloc = math.ceil((static_smem + reserved + dyn_smem) / 128) * 128
    by_smem = s.shared_memory_per_sm_bytes // alloc if alloc else 10**9  # type: ignore[attr-defined]
    blocks = min(by_regs, by_warps, by_smem, s.max_blocks_per_sm)  # type: ignore[attr-defined]
    cc = s.compute_capability  # type: ignore[attr-defined]
    if cc is not None and cc[0] >= 9:
        blocks = min(blocks, s.max_blocks_per_sm * 2)  # type: ignore[attr-defined]
    return int(blocks)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize(("device", "arch"), [("a100-80gb", 80), ("h100-sxm", 90), ("h200", 90)])
@pytest.mark.parametrize("kernel", KERNELS)
def test_occupancy_of_the_profile_matches_reference(
    compiled: Compiled, device: str, arch: int, kernel: str
) -> None:
    occupancy = pytest.importorskip("canary.occupancy")
    from canary.catalog import lookup

    spec = lookup(device)
    cubin, ptxas = compiled[(kernel, arch)]
    profile = from_binary(cubin, memory_peak_bytes=1 << 30, threads_per_block=256)
    (k,) = profile.kernels
    expected = _reference_blocks(spec, ptxas[k.name]["registers"], 256, ptxas[k.name]["smem"], 0)
    result = occupancy.cuda_occupancy(
        spec,
        registers_per_thread=k.registers_per_thread,
        threads_per_block=k.threads_per_block,
        static_shared_bytes=k.static_shared_bytes,
        dynamic_shared_bytes=k.dynamic_shared_bytes,
    )
    assert result.active_blocks_per_sm == expected
