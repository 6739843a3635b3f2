"""scripts/gpu-check as a subprocess: without a GPU it says so, prints the table of skipped steps and
exits 0 (the path CI runs); its JSON output lists every step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the no-GPU path cannot be exercised")
def test_no_gpu_path(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [str(SCRIPT), "--json", str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("no GPU: NVML cannot start")
    assert lines[1].split() == ["check", "result", "detail"]
    assert [line.split()[0] for line in lines[2:]] == ["snapshot", "occupancy", "corun", "hardfit"]
    assert all("skipped" in line for line in lines[2:])
    data = json.loads(out.read_text())
    assert data["gpu"] is False and len(data["rows"]) == 4


def test_bad_option_is_usage_error() -> None:
    done = subprocess.run([str(SCRIPT), "--only", "nonsense"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_script_is_executable() -> None:
    assert SCRIPT.stat().st_mode & 0o111


# --------------------------------------------------------------------------------------------------
# A dry run of the GPU path on recorded library returns (tests/support/fake_cuda.py and fake_nvml.py
# in cuda-python's and pynvml's shapes), with real nvcc and cuobjdump: every step must produce rows
# without raising. The numbers are the fakes', not a GPU's; docs/gpu-validation.md holds real ones.

import importlib.util  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

from tests.support.fake_cuda import FakeCudaDriverWithModules  # noqa: E402
from tests.support.fake_nvml import FakeNvml  # noqa: E402


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cubin_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    script = _load_script()
    result: dict[str, Path] = script._compile("sm_90", tmp_path_factory.mktemp("cubins"))
    return result


@pytest.fixture
def recorded_gpu(monkeypatch: pytest.MonkeyPatch, cubin_cache: dict[str, Path]) -> Any:
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", FakeCudaDriverWithModules())
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(processes=[]))
    script = _load_script()
    monkeypatch.setattr(script, "_compile", lambda arch, work: dict(cubin_cache))
    return script


@pytest.mark.slow
@pytest.mark.parametrize("step", ["snapshot", "occupancy", "corun", "hardfit"])
def test_gpu_steps_dry_run(recorded_gpu: Any, step: str) -> None:
    rows = recorded_gpu.STEP_FUNCTIONS[step](0)
    assert rows and all({"check", "result", "detail"} <= set(row) for row in rows)
    results = {row["check"]: row["result"] for row in rows}
    if step == "snapshot":
        assert results["catalog vs device"] == "ok"
        assert results["stream priorities"] == "ok"
    elif step == "occupancy":
        assert results["driver vs canary occupancy"] == "ok"
        assert all(results[f"attrs {name}"] == "ok" for name in ("stream", "compute", "spill"))
    elif step == "corun":
        assert [c for c in results if c.startswith("co-run")] == [
            "co-run stream+stream",
            "co-run stream+compute",
            "co-run compute+stream",
        ]
        assert all(r == "ok" for c, r in results.items() if c.startswith("co-run")), rows
    else:
        assert results["hard fit (canary)"] == "no fit", rows
