"""canary: may this GPU workload share this GPU now, within a stated risk? And why.

The public Python API. Names are re-exported lazily so that ``import canary`` (and so ``gpu-fit``)
stays fast: nothing below is imported until it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "CanaryError": "canary.errors",
    "Certificate": "canary.certificate",
    "DeviceSnapshot": "canary.snapshot",
    "Finding": "canary.certificate",
    "HardFit": "canary.certificate",
    "InputError": "canary.errors",
    "KernelSpec": "canary.profile",
    "MemoryEnvelope": "canary.profile",
    "OperationalError": "canary.errors",
    "Policy": "canary.policy",
    "Resident": "canary.snapshot",
    "RiskBudget": "canary.policy",
    "WorkloadProfile": "canary.profile",
    "admit": "canary.admission",
    "fit": "canary.admission",
    "load_policy": "canary.policy",
    "load_profile": "canary.profile",
    "load_snapshot": "canary.snapshot",
    "lookup_device": "canary.catalog",
    "occupancy": "canary.occupancy",
}

__all__ = [
    "CanaryError",
    "Certificate",
    "DeviceSnapshot",
    "Finding",
    "HardFit",
    "InputError",
    "KernelSpec",
    "MemoryEnvelope",
    "OperationalError",
    "Policy",
    "Resident",
    "RiskBudget",
    "WorkloadProfile",
    "__version__",
    "admit",
    "fit",
    "load_policy",
    "load_profile",
    "load_snapshot",
    "lookup_device",
    "occupancy",
]

_RENAMES = {"lookup_device": "lookup", "occupancy": "cuda_occupancy"}

if TYPE_CHECKING:
    from canary.admission import admit, fit
    from canary.catalog import lookup as lookup_device
    from canary.certificate import Certificate, Finding, HardFit
    from canary.errors import CanaryError, InputError, OperationalError
    from canary.occupancy import cuda_occupancy as occupancy
    from canary.policy import Policy, RiskBudget, load_policy
    from canary.profile import KernelSpec, MemoryEnvelope, WorkloadProfile, load_profile
    from canary.snapshot import DeviceSnapshot, Resident, load_snapshot


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'canary' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
