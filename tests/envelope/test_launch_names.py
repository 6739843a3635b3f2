"""``--launch NAME=…`` and ``--kernel NAME`` with the names a user writes.

cuobjdump prints a C++ kernel under its Itanium-ABI symbol (``_Z11gemm_kernelPfi``); a user writes
``gemm_kernel``. A name is the kernel cuobjdump prints under exactly that name, else the only kernel
whose C++ name (without parameters or template arguments) it is; one that matches several kernels is
an error listing them. Expected names below follow the Itanium C++ ABI's mangling rules
(``_Z <encoding>``, ``N … E`` nesting, ``<length><identifier>`` parts, ``I … E`` template arguments,
``_GLOBAL__N`` for the anonymous namespace, ``L`` for internal linkage), not canary's output.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from canary.envelope.binary import base_name, resolve_kernel
from canary.envelope.cuobjdump import KernelResources
from canary.errors import InputError
from canary.profile import load_profile
from tests.conftest import canary_cmd, cli_env

NVCC = shutil.which("nvcc")


@pytest.mark.parametrize(("symbol", "want"), [
    pytest.param("_Z11gemm_kernelPKfS0_Pfiii", "gemm_kernel", id="plain"),
    pytest.param("_Z11gemm_kernelILi128EEvPKfPfi", "gemm_kernel", id="template"),
    pytest.param("_ZN4cute6detail4gemmILi128EEEvPf", "cute::detail::gemm", id="nested-template"),
    pytest.param("_ZN2ns6kernelEPf", "ns::kernel", id="namespace"),
    pytest.param("_ZN12_GLOBAL__N_16kernelEv", "(anonymous namespace)::kernel", id="anonymous-namespace"),
    pytest.param("_ZL6staticPf", "static", id="internal-linkage"),
    pytest.param("gemm_kernel", None, id="extern-c"),
    pytest.param("_Z99short", None, id="length-past-the-end"),
    pytest.param("_Zx", None, id="not-understood"),
])
def test_base_name(symbol: str, want: str | None) -> None:
    assert base_name(symbol) == want


def _k(name: str) -> KernelResources:
    return KernelResources(name=name, arch=90, registers_per_thread=32, static_shared_bytes=0,
                           shared_bytes_reported=0, stack_bytes=0, local_bytes=0, constant_bytes=0)


KERNELS = [_k("_Z11gemm_kernelPKfPfi"), _k("_Z4axpyILi64EEvPf"), _k("_Z4axpyILi128EEvPf"), _k("axpy_c")]


@pytest.mark.parametrize(("name", "want"), [
    pytest.param("gemm_kernel", "_Z11gemm_kernelPKfPfi", id="demangled-unique"),
    pytest.param("_Z4axpyILi64EEvPf", "_Z4axpyILi64EEvPf", id="as-cuobjdump-prints-it"),
    pytest.param("axpy_c", "axpy_c", id="extern-c"),
])
def test_resolve_kernel(name: str, want: str) -> None:
    assert resolve_kernel(name, KERNELS, option="--launch").name == want


def test_a_name_of_several_kernels_is_an_error_listing_them() -> None:
    with pytest.raises(InputError) as caught:
        resolve_kernel("axpy", KERNELS, option="--launch")
    assert caught.value.field == "--launch"
    assert "_Z4axpyILi64EEvPf" in caught.value.problem and "_Z4axpyILi128EEvPf" in caught.value.problem


def test_an_unknown_name_lists_the_kernels_with_their_cxx_names() -> None:
    with pytest.raises(InputError) as caught:
        resolve_kernel("gemm", KERNELS, option="--kernel")
    assert caught.value.field == "--kernel"
    assert "_Z11gemm_kernelPKfPfi (gemm_kernel)" in caught.value.problem


GEMM = r"""
__global__ void gemm_kernel(const float* a, const float* b, float* c, int n) {
  extern __shared__ float tile[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = a[i] * b[i];
  __syncthreads();
  if (i < n) c[i] = tile[threadIdx.x] + tile[(threadIdx.x + 1) % blockDim.x];
}
template <int N> __global__ void axpy(float* x) { x[blockIdx.x * N + threadIdx.x] *= 2.0f; }
template __global__ void axpy<64>(float*);
template __global__ void axpy<128>(float*);
"""


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: cannot compile the kernels")
def test_the_documented_command_works_on_a_cxx_fatbin(tmp_path: Path) -> None:
    """docs/devices.md's command, on a fatbin whose kernels are C++ (mangled) names."""
    src = tmp_path / "model.cu"
    src.write_text(GEMM)
    fatbin = tmp_path / "model.fatbin"
    subprocess.run([str(NVCC), "-fatbin", "-arch=sm_90", "-o", str(fatbin), str(src)], check=True,
                   capture_output=True, timeout=180)
    out = tmp_path / "profile.yaml"
    base = [*canary_cmd(), "envelope", "from-binary", str(fatbin), "--arch", "sm_90", "--memory-peak", "40Gi",
            "--threads", "256"]
    done = subprocess.run([*base, "--launch", "gemm_kernel=128:528:96KiB", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    kernels = {k.name: k for k in load_profile(out).kernels}
    gemm = kernels["_Z11gemm_kernelPKfS0_Pfi"]  # (const float*, const float*, float*, int)
    assert (gemm.threads_per_block, gemm.grid_blocks, gemm.dynamic_shared_bytes) == (128, 528, 96 * 1024)
    assert {k.threads_per_block for n, k in kernels.items() if n != gemm.name} == {256}
    ambiguous = subprocess.run([*base, "--launch", "axpy=64"], capture_output=True, text=True, timeout=120,
                               env=cli_env(tmp_path))
    assert ambiguous.returncode == 2 and "Traceback" not in ambiguous.stderr
    assert "_Z4axpyILi64EEvPf" in ambiguous.stderr and "_Z4axpyILi128EEvPf" in ambiguous.stderr
