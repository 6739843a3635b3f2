"""``canary occupancy`` through a real subprocess: JSON output, terminal table, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from canary.commands.occupancy import parse_size_bytes
from canary.errors import InputError

_SCRIPT = Path(sys.executable).with_name("canary")
_COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "canary.cli"]
_CUDA_KEYS = {
    "active_blocks_per_sm",
    "limiting",
    "block_limit_registers",
    "block_limit_shared_memory",
    "block_limit_warps",
    "block_limit_blocks",
    "allocated_registers_per_block",
    "allocated_shared_memory_per_block",
    "device",
    "occupancy_pct",
    "sources",
}


def _canary(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_COMMAND, "occupancy", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_json_output_for_a_cuda_device() -> None:
    done = _canary(
        "--device",
        "NVIDIA A100-SXM4-80GB",
        "--regs",
        "32",
        "--threads",
        "128",
        "--dynamic-smem",
        "100KiB",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert set(payload) >= _CUDA_KEYS
    assert payload["device"] == "a100-80gb"
    assert payload["active_blocks_per_sm"] == 1
    assert payload["limiting"] == ["shared_memory"]
    assert payload["allocated_shared_memory_per_block"] == 103424
    assert payload["block_limit_barriers"] is None
    assert payload["occupancy_pct"] == pytest.approx(6.25)
    assert payload["sources"]["max_blocks_per_sm"].startswith("[H13.0]")
    assert all(isinstance(v, str) and v for v in payload["sources"].values())


def test_json_unlimited_is_null() -> None:
    done = _canary("--device", "v100", "--regs", "0", "--threads", "64", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["block_limit_registers"] is None
    assert payload["block_limit_shared_memory"] is None
    assert payload["limiting"] == ["blocks", "warps"]


def test_terminal_table_marks_limiting_rows() -> None:
    done = _canary("--device", "h100", "--regs", "32", "--threads", "256")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "limiting" in rows["registers"] and "limiting" in rows["warps"]
    assert "limiting" not in rows["blocks"]
    assert "100.0% occupancy" in done.stdout


def test_amd_device_takes_the_cdna_path() -> None:
    done = _canary("--device", "mi300x", "--vgprs", "72", "--threads", "256", "--lds", "16KiB", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["device"] == "mi300x"
    assert payload["vgpr_waves_per_simd"] == 7
    assert payload["workgroups_per_cu"] == 4
    assert payload["limiting"] == ["lds"]
    assert "cdna.vgpr_alloc_granule" in payload["sources"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--device", "h10", "--regs", "32", "--threads", "256"), "closest: h100-sxm"),
        (("--device", "h100", "--regs", "-1", "--threads", "256"), "'--regs'"),
        (("--device", "h100", "--regs", "32", "--threads", "0"), "'--threads'"),
        (("--device", "h100", "--regs", "32", "--threads", "256", "--static-smem", "48KB"), "ambiguous"),
        (("--device", "h100", "--regs", "32", "--threads", "256", "--dynamic-smem", "lots"), "not a size"),
        (("--device", "h100", "--regs", "32", "--threads", "256", "--carveout", "150"), "'--carveout'"),
        (("--device", "h100", "--threads", "256"), "--regs is required"),
        (("--device", "h100", "--regs", "32", "--threads", "256", "--vgprs", "8"), "AMD devices only"),
        (("--device", "mi300x", "--regs", "32", "--threads", "256"), "NVIDIA devices only"),
        (("--device", "mi300x", "--vgprs", "300", "--threads", "256"), "'--vgprs'"),
        (("--device", "h100", "--regs", "x", "--threads", "256"), "invalid int value"),
    ],
)
def test_bad_input_exits_2_without_traceback(args: tuple[str, ...], message: str) -> None:
    done = _canary(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_sizes_with_units_equal_bytes() -> None:
    with_units = json.loads(
        _canary(
            "--device", "l4", "--regs", "32", "--threads", "256", "--static-smem", "16KiB", "--json"
        ).stdout
    )
    in_bytes = json.loads(
        _canary(
            "--device", "l4", "--regs", "32", "--threads", "256", "--static-smem", "16384", "--json"
        ).stdout
    )
    assert with_units == in_bytes
    assert with_units["active_blocks_per_sm"] == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("49152", 49152),
        ("48KiB", 49152),
        ("48K", 49152),
        ("48 KiB", 49152),
        ("48kib", 49152),
        ("1MiB", 1048576),
        ("2M", 2097152),
        ("48kB", 48000),
        ("100B", 100),
        ("0", 0),
        ("1.5KiB", 1536),
    ],
)
def test_parse_size_bytes(text: str, expected: int) -> None:
    assert parse_size_bytes(text, "--lds") == expected


@pytest.mark.parametrize("text", ["48KB", "1MB", "-5", "1.3KiB", "48GiB", "KiB", "", "48KiB extra"])
def test_parse_size_bytes_refuses(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_size_bytes(text, "--lds")
    assert info.value.field == "--lds"
