"""`canary fit` / `gpu-fit` through real subprocesses: exit codes, JSON, bad input, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def run(tmp_path: Path, *args: str, prog: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prog or canary_cmd()), *args], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)


def gpu_fit() -> list[str]:
    script = Path(sys.executable).parent / "gpu-fit"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from canary.cli import gpu_fit_main; raise SystemExit(gpu_fit_main())"]


def test_idle_catalog_device_admits(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "h100", PROFILE, "--json")
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)
    assert cert["verdict"] == "admit" and cert["decided_by"] == "hard-fit" and cert["simulated"] is True
    assert cert["device"]["type"] == "h100-sxm"


def test_gpu_fit_is_the_same_command(tmp_path: Path) -> None:
    a = run(tmp_path, "h100", PROFILE, "--json", prog=gpu_fit())
    b = run(tmp_path, "fit", "h100", PROFILE, "--json")
    assert a.returncode == b.returncode == 0
    strip = lambda c: {k: v for k, v in json.loads(c).items() if k not in ("issued_at", "expiry_or_revalidation_trigger")}  # noqa: E731
    assert strip(a.stdout) == strip(b.stdout)


def test_resident_flag_adds_residents(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "h100", PROFILE, "--resident", str(EXAMPLES / "profiles" / "llm-decode.yaml"),
               "--json")
    assert proc.returncode == 3, proc.stderr  # fits; interference unknown until probed
    cert = json.loads(proc.stdout)
    assert cert["hard_fit"] == "yes" and cert["verdict"] == "unknown"
    assert "interference is not yet known" in cert["reason"]


def test_terminal_table_marks_the_limiting_resource(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", str(EXAMPLES / "snapshots" / "b-idle-hbm-held.yaml"),
               str(EXAMPLES / "profiles" / "resnet50-training.yaml"))
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if x.startswith("> "))
    assert "hbm" in line and "NO" in line and "GiB" in line
    assert "limiting resource: hbm" in proc.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["fit", "h1000", PROFILE], "h100"),  # suggestion
    (["fit", "h100", "/nonexistent.yaml"], "file not found"),
    (["fit", "h100", PROFILE, "--regime", "quantum"], "unknown regime"),
    (["fit", "h100", PROFILE, "--policy", "nope"], "no policy named"),
    (["fit", "foo:1", PROFILE], "unknown device"),
    (["fit"], "required"),
])
def test_bad_input_exits_2_without_traceback(tmp_path: Path, args: list[str], words: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert words in proc.stderr


def test_bad_profile_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: '1'\nmemory: {reserved_bytes: 1Gi, peak_bytes: -2Gi}\n")
    proc = run(tmp_path, "fit", "h100", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "memory.peak_bytes" in proc.stderr


def test_live_device_without_driver_exits_4(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "nvml:0", PROFILE)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "NVIDIA" in proc.stderr


def test_schema_command_prints_json_schema(tmp_path: Path) -> None:
    for kind in ("profile", "snapshot", "policy", "certificate"):
        proc = run(tmp_path, "schema", kind)
        assert proc.returncode == 0
        assert json.loads(proc.stdout)["type"] == "object"


def test_gpu_fit_imports_no_sqlalchemy_or_cuda(tmp_path: Path) -> None:
    code = (f"import sys; from canary.cli import gpu_fit_main; rc = gpu_fit_main(['h100', {PROFILE!r}, '--json']); "
            "heavy = [m for m in ('sqlalchemy', 'alembic', 'pynvml', 'cuda', 'amdsmi') if m in sys.modules]; "
            "sys.stderr.write(repr(heavy)); raise SystemExit(10 if heavy else rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
