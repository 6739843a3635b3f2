"""Stage 2: the bounded canary (judge, orchestrator, executors, monitors; the budget it keeps is
``canary.policy.RiskBudget``).

Light to import: the orchestrator and its dependencies load on first use of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from canary.probe.factory import make_executor, make_monitor

if TYPE_CHECKING:
    from canary.probe.interfaces import Executor, ExposureGate, Journal, Monitor
    from canary.probe.judge import Judgment
    from canary.probe.orchestrator import ProbeProgress, ProbeResult, RollbackFailed, run_probe

__all__ = [
    "Executor",
    "ExposureGate",
    "Journal",
    "Judgment",
    "Monitor",
    "ProbeProgress",
    "ProbeResult",
    "RollbackFailed",
    "make_executor",
    "make_monitor",
    "run_probe",
]

_LAZY = {
    "Executor": "canary.probe.interfaces",
    "ExposureGate": "canary.probe.interfaces",
    "Journal": "canary.probe.interfaces",
    "Monitor": "canary.probe.interfaces",
    "Judgment": "canary.probe.judge",
    "ProbeProgress": "canary.probe.orchestrator",
    "ProbeResult": "canary.probe.orchestrator",
    "RollbackFailed": "canary.probe.orchestrator",
    "run_probe": "canary.probe.orchestrator",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'canary.probe' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
