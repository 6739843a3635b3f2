"""Models: sizes with units, strictness, errors that name file and field, policies, public API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import canary
from canary.errors import InputError
from canary.policy import available_policies, load_policy
from canary.profile import load_profile
from canary.snapshot import load_snapshot
from canary.units import parse_bytes
from tests.support.paths import EXAMPLES


@pytest.mark.parametrize(("text", "value"), [
    ("18Gi", 18 * 2**30), ("18GiB", 18 * 2**30), ("40GB", 40 * 10**9), ("512Mi", 512 * 2**20),
    ("4096", 4096), (4096, 4096), ("1.5Gi", 3 * 2**29), ("0", 0),
    ("4k", 4000), ("2.5kB", 2500), ("1TiB", 2**40), (" 7 MiB ", 7 * 2**20),
])
def test_sizes_with_units(text: object, value: int) -> None:
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["-1", -5, "abc", "18 parsecs", "100TiB", True, 1.5,
                                  "40GB extra", "0.3B", "1.0000001Ki", "8bit"])
def test_bad_sizes(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


BASE = "name: x\nversion: '1'\nmemory: {reserved_bytes: 1Gi, peak_bytes: 2Gi}\n"


@pytest.mark.parametrize(("body", "field", "words"), [
    (BASE + "kernels:\n  - {name: k, registers_per_thread: 32, threads_per_blok: 128}\n",
     "kernels[0].threads_per_block", "missing"),
    (BASE + "kernels:\n  - {name: k, registers_per_thread: '32', threads_per_block: 128}\n",
     "kernels[0].registers_per_thread", "integer"),
    (BASE + "kernels:\n  - {name: k, registers_per_thread: 300, threads_per_block: 128}\n",
     "kernels[0].registers_per_thread", "255"),
    ("name: x\nversion: '1'\nmemory: {reserved_bytes: -1Gi, peak_bytes: 2Gi}\n", "memory.reserved_bytes", "size"),
    ("name: x\nversion: '1'\nmemory: {reserved_bytes: 3Gi, peak_bytes: 2Gi}\n", "memory", "peak_bytes"),
    ("name: x\nversion: '1'\n", "memory", "missing"),
    (BASE + "duty_cycle: 1.5\n", "duty_cycle", "1"),
    (BASE + "workload_class: realtime\n", "workload_class", "online-inference"),
    (BASE + "canary: {executor: process}\n", "canary", "command"),
])
def test_profile_errors_name_file_and_field(tmp_path: Path, body: str, field: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(body)
    with pytest.raises(InputError) as err:
        load_profile(path)
    assert err.value.field == field
    assert str(path) in str(err.value)
    assert words in str(err.value)


@pytest.mark.parametrize(("body", "words"), [
    ("name: [unclosed\n", "malformed YAML/JSON at line"),
    ("", "empty"),
    ("- a\n- b\n", "mapping"),
    ('{"name": "x", ', "malformed"),
])
def test_malformed_documents(tmp_path: Path, body: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match=words):
        load_profile(path)


def test_missing_file() -> None:
    with pytest.raises(InputError, match="file not found"):
        load_profile("/nonexistent/profile.yaml")


def test_every_example_profile_loads_and_json_round_trips() -> None:
    for path in sorted((EXAMPLES / "profiles").glob("*.yaml")):
        p = load_profile(path)
        assert type(p).model_validate_json(p.model_dump_json()) == p


def test_snapshot_resolves_resident_profiles_relative_to_itself() -> None:
    snap = load_snapshot(EXAMPLES / "snapshots" / "a-persistent-35pct.yaml")
    assert snap.residents[0].profile is not None
    assert snap.residents[0].profile.kernels[0].persistent


def test_snapshot_with_missing_resident_profile(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("device_type: h100-sxm\nresidents:\n  - {name: r, profile: nope.yaml}\n")
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    assert err.value.field == "residents[0].profile"


def test_snapshot_used_more_than_total(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("device_type: h100-sxm\nmemory_total_bytes: 80Gi\nmemory_used_bytes: 81Gi\n")
    with pytest.raises(InputError, match="exceeds"):
        load_snapshot(path)


def test_policies_load_and_differ_where_documented() -> None:
    assert {"default", "online-inference", "batch", "training"} <= set(available_policies())
    online, batch = load_policy("online-inference"), load_policy("batch")
    assert online.budget_for("online-inference").required_confidence > batch.budget_for("online-inference").required_confidence
    assert batch.allow_cross_driver_evidence and not online.allow_cross_driver_evidence
    with pytest.raises(InputError, match="no policy named"):
        load_policy("nope")


def test_policy_without_every_class_fails_at_load(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nrisk_budgets:\n  batch: {max_probe_time_s: 10, max_requests_exposed: 10, "
                    "max_resident_slowdown_pct: 10, required_confidence: 0.9}\n")
    with pytest.raises(InputError, match="online-inference"):
        load_policy(path)


def test_public_api_is_sorted_and_importable() -> None:
    assert canary.__all__ == sorted(canary.__all__)
    for name in canary.__all__:
        assert getattr(canary, name) is not None


def test_import_canary_is_light() -> None:
    code = ("import sys, canary, canary.cli, canary.commands.fit; "
            "bad = [m for m in ('sqlalchemy', 'alembic', 'pynvml', 'cuda', 'amdsmi', 'numpy', 'anyio') if m in sys.modules]; "
            "print(bad); raise SystemExit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_example_snapshot_passes_the_consistency_checks() -> None:
    from canary.backends import resolve_device

    paths = sorted((EXAMPLES / "snapshots").glob("*.yaml"))
    assert len(paths) >= 10
    for path in paths:
        device = resolve_device(str(path))  # raises InputError on an impossible snapshot
        assert device.snapshot.device_type
