"""`envelope record`: the pure summary on recorded samples, and a real subprocess sampled through a
recorded NVML (pynvml shapes, tests/support/fake_nvml.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pynvml
import pytest

from canary.envelope.record import Sample, process_tree, record, summarize
from canary.errors import InputError
from tests.support.fake_nvml import FakeNvml

GIB = 1 << 30


def test_summary_memory_duty_and_phases() -> None:
    # 1 s loading (idle, 2 GiB), 2 s busy (10 GiB, 95%), 1 s idle tail; one noisy sample inside
    utils = [0.0] * 10 + [95.0] * 9 + [5.0] + [95.0] * 10 + [0.0] * 10
    mems = [2 * GIB] * 10 + [10 * GIB] * 20 + [10 * GIB] * 10
    samples = [
        Sample(t_s=i * 0.1, memory_bytes=m, utilization_pct=u)
        for i, (u, m) in enumerate(zip(utils, mems, strict=True))
    ]
    profile = summarize(samples, name="job", version="1.0", interval_s=0.1, notes="n")
    assert (profile.memory.reserved_bytes, profile.memory.peak_bytes) == (2 * GIB, 10 * GIB)
    assert profile.memory.source == "profiled"
    assert [p.name.split("-", 1)[1] for p in profile.phases] == ["idle", "busy", "idle"]
    assert profile.phases[1].duration_s == pytest.approx(2.0)
    assert profile.duty_cycle == pytest.approx(sum(utils) / len(utils) / 100)
    assert profile.provenance.coverage == 1.0


def test_missing_readings_lower_coverage_and_no_memory_is_an_error() -> None:
    samples = [
        Sample(0.0, GIB, 50.0),
        Sample(0.1, None, 50.0),
        Sample(0.2, GIB, None),
        Sample(0.3, GIB, 50.0),
    ]
    assert summarize(samples, name="j", version="1", interval_s=0.1, notes="").provenance.coverage == 0.5
    with pytest.raises(InputError, match="no device memory"):
        summarize(
            [Sample(0.0, None, 10.0), Sample(0.1, 0, 10.0)], name="j", version="1", interval_s=0.1, notes=""
        )


class ChildrenOnGpu(FakeNvml):
    """Every child of this test process holds 3 GiB."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        out = []
        for pid in process_tree(os.getpid()) - {os.getpid()}:
            info = pynvml.c_nvmlProcessInfo_v2_t()
            info.pid, info.usedGpuMemory = pid, 3 * GIB
            out.append(pynvml.nvmlStructToFriendlyObject(info))
        return out


def test_record_a_real_subprocess() -> None:
    command = [sys.executable, "-c", "import time; time.sleep(0.6)"]
    profile, status = record(command, interval_ms=50, module=ChildrenOnGpu(), name="sleeper", version="v1")
    assert status == 0
    assert profile.memory.peak_bytes == 3 * GIB
    assert profile.duty_cycle == pytest.approx(0.97)
    assert profile.provenance.source == "profiled" and "samples every 50 ms" in (
        profile.provenance.notes or ""
    )


def test_cli_record_without_gpu_exits_4_before_running() -> None:
    marker = f"/tmp/canary-record-{os.getpid()}"
    done = subprocess.run(
        [sys.executable, "-m", "canary.cli", "envelope", "record", "--", "touch", marker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 0:  # pragma: no cover - GPU machine
        pytest.skip("this machine has an NVIDIA GPU")
    assert done.returncode == 4 and "libnvidia-ml" in done.stderr and "Traceback" not in done.stderr
    assert not os.path.exists(marker), "the command must not run when NVML is unavailable"
