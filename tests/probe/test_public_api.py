"""The package's face: explicit re-exports, sorted ``__all__``, every name resolves, light import."""

from __future__ import annotations

import subprocess
import sys

import canary.probe


def test_all_is_sorted_and_resolves() -> None:
    assert canary.probe.__all__ == sorted(canary.probe.__all__)
    for name in canary.probe.__all__:
        assert getattr(canary.probe, name) is not None


def test_importing_the_package_does_not_load_the_orchestrator_or_http() -> None:
    code = "import sys, canary.probe; print(sorted(m for m in ('httpx', 'canary.probe.orchestrator') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == "[]"
