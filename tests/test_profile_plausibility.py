"""A profile document's GPU memory sizes under 1 MiB (a unit left off: ``5`` for ``5Gi``) and MIG
profile names no catalog device has (``1g.10g``) are refused, naming the field; both were accepted and
decided on (an ADMIT with 512 MiB of context as the whole demand; a MIG profile never matched)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from canary.errors import InputError
from canary.profile import MemoryEnvelope, SharingModes, load_profile
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PROFILE: dict[str, Any] = {"name": "x", "version": "1", "memory": {"reserved_bytes": "4Gi", "peak_bytes": "6Gi"}}


def _load(tmp_path: Path, **changes: Any) -> None:
    doc = json.loads(json.dumps(PROFILE))
    for dotted, value in changes.items():
        node = doc
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    load_profile(path)


@pytest.mark.parametrize(("changes", "field", "words"), [
    pytest.param({"memory__reserved_bytes": 5, "memory__peak_bytes": 6}, "memory.reserved_bytes",
                 "check the unit (5 bytes; did you mean 5Gi?)", id="bare-integer"),
    pytest.param({"memory__peak_bytes": "6"}, "memory.peak_bytes", "(6 bytes; did you mean 6Gi?)", id="bare-text"),
    pytest.param({"memory__reserved_bytes": "512KiB"}, "memory.reserved_bytes", "check the unit (524288 bytes)",
                 id="small-unit"),
    pytest.param({"memory__reclaimable_bytes": 100}, "memory.reclaimable_bytes", "did you mean 100Gi?",
                 id="reclaimable"),
    pytest.param({"phases": [{"name": "p", "duration_s": 1, "duty_cycle": 0.5, "memory_bytes": 18}]},
                 "phases[0].memory_bytes", "did you mean 18Gi?", id="phase-memory"),
    pytest.param({"sharing": {"mig_profiles": ["1g.10gb", "1g.10g"]}}, "sharing.mig_profiles",
                 "'1g.10g' is not a MIG profile of any catalog device; closest: 1g.10gb", id="mig-typo"),
    pytest.param({"sharing": {"mig_profiles": ["9g.1tb"]}}, "sharing.mig_profiles",
                 "not a MIG profile of any catalog device", id="mig-unknown"),
])
def test_implausible_profile_values_are_refused(tmp_path: Path, changes: dict[str, Any], field: str,
                                                words: str) -> None:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, **changes)
    assert caught.value.field == field
    assert words in caught.value.problem


@pytest.mark.parametrize("changes", [
    pytest.param({"memory__reserved_bytes": 0}, id="zero-memory"),
    pytest.param({"memory__reserved_bytes": 2**20}, id="exactly-1-MiB"),
    pytest.param({"memory__reserved_bytes": "1MiB"}, id="1-MiB-with-unit"),
    pytest.param({"kernels": [{"name": "k", "registers_per_thread": 32, "threads_per_block": 128,
                               "static_shared_bytes": 4096}]}, id="small-on-chip-size-is-not-gpu-memory"),
    pytest.param({"sharing": {"mig_profiles": ["3g.40gb", "MIG 1g.10gb", "19", "7G.80GB"]}},
                 id="mig-names-aliases-and-ids"),
])
def test_plausible_profile_values_still_load(tmp_path: Path, changes: dict[str, Any]) -> None:
    _load(tmp_path, **changes)


def test_sizes_a_program_computes_are_not_second_guessed() -> None:
    """A recorded run or a trace gives what was measured: only documents are checked."""
    assert MemoryEnvelope(reserved_bytes=5, peak_bytes=6).peak_bytes == 6
    assert SharingModes(mig_profiles=("1g.10g",)).mig_profiles == ("1g.10g",)


def test_fit_refuses_memory_without_its_unit(tmp_path: Path) -> None:
    text = (EXAMPLES / "profiles" / "embedding-service.yaml").read_text()
    lines = [("memory: {reserved_bytes: 5, peak_bytes: 6}" if line.startswith("memory:") else line)
             for line in text.splitlines()]
    assert any(line.startswith("memory: {reserved_bytes: 5") for line in lines)
    profile = tmp_path / "unitless.yaml"
    profile.write_text("\n".join(lines) + "\n")
    out = subprocess.run([*canary_cmd(), "fit", "h100", str(profile)], capture_output=True, text=True, timeout=60,
                         env=cli_env(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert f"{profile}: field 'memory.reserved_bytes'" in out.stderr
    assert "check the unit (5 bytes; did you mean 5Gi?)" in out.stderr and "Traceback" not in out.stderr
