"""``canary occupancy`` refuses a kernel configuration no launch on the device can have (exit 2, naming
the option, the value and the device's limit with its catalog source) instead of answering 0 blocks;
the limits are the catalog's numbers (``maxThreadsPerBlock``, the registers a thread may address,
``sharedMemPerBlock`` for static shared memory, ``sharedMemPerBlockOptin`` for all of a block's).
The library keeps the rules' 0 blocks: stage 1 reports such a profiled kernel as never launching."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from canary.catalog import lookup
from canary.occupancy import check_cdna_launch, check_cuda_launch, cuda_occupancy
from tests.support.cli import run_in_process
from tests.support.paths import canary_cmd, cli_env

H100 = lookup("h100")
MI300X = lookup("mi300x")


BAD = [
    # (arguments, the option it names, the value, the catalog field whose number is the limit)
    pytest.param(("--device", "h100", "--regs", "32", "--threads", "100000"),
                 "--threads", "100000", "max_threads_per_block", id="threads-100000"),
    pytest.param(("--device", "h100", "--regs", "32", "--threads", str(H100.max_threads_per_block + 1)),
                 "--threads", str(H100.max_threads_per_block + 1), "max_threads_per_block", id="threads-one-over"),
    pytest.param(("--device", "v100", "--regs", str(lookup("v100").max_registers_per_thread + 1), "--threads", "128"),
                 "--regs", str(lookup("v100").max_registers_per_thread + 1), "max_registers_per_thread",
                 id="regs-one-over"),
    pytest.param(("--device", "h100", "--regs", "32", "--threads", "128", "--static-smem",
                  str(H100.shared_memory_per_block_bytes + 1)),
                 "--static-smem", str(H100.shared_memory_per_block_bytes + 1), "shared_memory_per_block_bytes",
                 id="static-smem-one-over"),
    pytest.param(("--device", "h100", "--regs", "32", "--threads", "128", "--static-smem", "16KiB",
                  "--dynamic-smem", str(H100.shared_memory_per_block_optin_bytes - 16 * 1024 + 1)),
                 "--dynamic-smem", str(H100.shared_memory_per_block_optin_bytes + 1),
                 "shared_memory_per_block_optin_bytes", id="static-plus-dynamic-one-over"),
    pytest.param(("--device", "a100-80gb", "--regs", "32", "--threads", "128", "--dynamic-smem", "1MiB"),
                 "--dynamic-smem", str(1 << 20), "shared_memory_per_block_optin_bytes", id="dynamic-1MiB"),
    pytest.param(("--device", "mi300x", "--vgprs", "32", "--threads", str(MI300X.max_threads_per_block + 1)),
                 "--threads", str(MI300X.max_threads_per_block + 1), "max_threads_per_block", id="amd-workgroup"),
    pytest.param(("--device", "mi300x", "--vgprs", "32", "--threads", "256", "--lds", "128KiB"),
                 "--lds", str(128 * 1024), "shared_memory_per_block_bytes", id="amd-lds"),
]


@pytest.mark.parametrize(("args", "option", "value", "limit_field"), BAD)
def test_a_configuration_the_device_cannot_launch_is_bad_input(
    args: tuple[str, ...], option: str, value: str, limit_field: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    done = run_in_process(["occupancy", *args], capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    spec = lookup(args[1])
    limit = getattr(spec, limit_field)
    message = done.stderr
    assert f"field '{option}'" in message and value in message, message
    assert f"at most {limit} ({limit_field}" in message and spec.source(limit_field) in message, message


@pytest.mark.parametrize(("args", "option", "problem"), [
    pytest.param(("--threads", "0"), "--threads", "at least one thread", id="threads-0"),
    pytest.param(("--threads", "-1"), "--threads", "must not be negative, got -1", id="threads-negative"),
    pytest.param(("--threads", "128", "--regs", "-8"), "--regs", "must not be negative, got -8", id="regs-negative"),
    pytest.param(("--threads", "128", "--barriers", "-1"), "--barriers", "must not be negative", id="barriers-negative"),
])
def test_non_positive_counts_are_bad_input(
    args: tuple[str, ...], option: str, problem: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    argv = ["occupancy", "--device", "h100", *args]
    if "--regs" not in args:
        argv += ["--regs", "32"]
    done = run_in_process(argv, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert done.returncode == 2 and f"field '{option}'" in done.stderr and problem in done.stderr, done.stderr


@pytest.mark.parametrize("args", [
    pytest.param(("--device", "h100", "--regs", str(H100.max_registers_per_thread), "--threads",
                  str(H100.max_threads_per_block)), id="threads-and-regs-at-the-limit"),
    pytest.param(("--device", "h100", "--regs", "32", "--threads", "128", "--static-smem",
                  str(H100.shared_memory_per_block_bytes), "--dynamic-smem",
                  str(H100.shared_memory_per_block_optin_bytes - H100.shared_memory_per_block_bytes)),
                 id="shared-memory-at-the-opt-in-limit"),
    pytest.param(("--device", "v100", "--regs", "0", "--threads", "64"), id="no-registers-as-the-header-allows"),
    pytest.param(("--device", "mi300x", "--vgprs", "32", "--threads", str(MI300X.max_threads_per_block), "--lds",
                  str(MI300X.shared_memory_per_block_bytes)), id="amd-at-the-limit"),
])
def test_the_limits_themselves_are_accepted(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    done = run_in_process(["occupancy", *args, "--json"], capsys=capsys, monkeypatch=monkeypatch,
                          env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)


def test_a_real_subprocess_says_the_same(tmp_path: Path) -> None:
    done = subprocess.run([*canary_cmd(), "occupancy", "--device", "h100", "--regs", "32", "--threads", "100000"],
                          capture_output=True, text=True, env=cli_env(tmp_path), timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert "field '--threads': 100000 threads per block: h100-sxm allows at most 1024" in done.stderr, done.stderr


def test_the_library_checks_name_its_arguments_and_keep_the_rules_0_blocks() -> None:
    from canary.errors import InputError

    with pytest.raises(InputError) as info:
        check_cuda_launch(H100, registers_per_thread=32, threads_per_block=2048)
    assert info.value.field == "threads_per_block"
    with pytest.raises(InputError) as info:
        check_cdna_launch(MI300X, workgroup_size=256, lds_bytes=1 << 20)
    assert info.value.field == "lds_bytes"
    with pytest.raises(InputError, match="NVIDIA device"):
        check_cdna_launch(H100, workgroup_size=256)
    # cuda_occupancy still answers as cudaOccMaxActiveBlocksPerMultiprocessor does.
    assert cuda_occupancy(H100, registers_per_thread=32, threads_per_block=2048).active_blocks_per_sm == 0
