"""Fixtures for the simulator tests: device specs from the catalog and a profile factory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from canary.catalog import DeviceSpec, lookup
from canary.profile import KernelSpec, MemoryEnvelope, Phase, Slo, WorkloadProfile

GiB = 1 << 30

ProfileFactory = Callable[..., WorkloadProfile]


@pytest.fixture
def v100() -> DeviceSpec:
    return lookup("v100-sxm2-16gb")


@pytest.fixture
def a100() -> DeviceSpec:
    return lookup("a100-80gb")


def build_profile(
    name: str = "w",
    *,
    workload_class: str = "batch",
    duty_cycle: float | None = 1.0,
    dram_intensity: float | None = 0.0,
    sm_share: float | None = None,
    peak_gib: float = 1.0,
    p99_ms: float | None = None,
    kernels: tuple[KernelSpec, ...] = (),
    phases: tuple[Phase, ...] = (),
) -> WorkloadProfile:
    """A profile; ``sm_share`` becomes a one-phase profile (the phase carries the share)."""
    peak = int(peak_gib * GiB)
    extra: dict[str, Any] = {}
    if sm_share is not None and not phases:
        phases = (
            Phase(
                name="steady",
                duration_s=0.05,
                duty_cycle=duty_cycle if duty_cycle is not None else 1.0,
                dram_intensity=dram_intensity or 0.0,
                sm_share=sm_share,
            ),
        )
        duty_cycle = None
        dram_intensity = None
    if p99_ms is not None:
        extra["slo"] = Slo(latency_p99_ms=p99_ms)
    return WorkloadProfile(
        name=name,
        version="1.0.0",
        workload_class=workload_class,  # type: ignore[arg-type]
        memory=MemoryEnvelope(reserved_bytes=peak, peak_bytes=peak),
        duty_cycle=duty_cycle,
        dram_intensity=dram_intensity,
        kernels=kernels,
        phases=phases,
        **extra,
    )


@pytest.fixture
def make_profile() -> ProfileFactory:
    return build_profile
