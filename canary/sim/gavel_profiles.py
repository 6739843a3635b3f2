"""A simulator profile for each of Gavel's 26 job types (V100, and any device via
:func:`gavel_jobs_on`), with the basis of every number.

Each job is a training loop: one step = one GPU burst (``duty_cycle`` of the step) followed by host
work (data loading, Python, optimizer bookkeeping) while the GPU idles. The simulator needs four
numbers per job besides its measured step time:

- ``duty_cycle``: GPU-busy fraction of a step;
- ``sm_share``: time-weighted fraction of the V100's 80 SMs its kernels' grids cover;
- ``dram_intensity``: time fraction spent in memory-bound kernels;
- ``kernel_time_us``: mean kernel duration (busy time per step / kernels per step).

**Grounded** numbers come from ``canary/sim/data/orion-kernels`` (per-kernel V100 traces of the same
model: columns ``Profile`` 1 = compute-bound, 0 = memory-bound, −1 = unclassified; ``SM_usage`` =
SMs the grid needs; ``Duration`` in ns) and from Gavel's isolated step times. **Declared** numbers
(no kernel trace of that model exists in the data) are estimates from the model's architecture,
and each basis says so. :func:`orion_summary` recomputes the Orion-derived constants; a test checks
them against the data.

Memory: Gavel records none; every profile declares 1 GiB so every measured pair fits (the
infeasible ``[0, 0]`` pairs are excluded by the loader). Memory is not part of the calibration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from canary.profile import MemoryEnvelope, Phase, Provenance, SharingModes, WorkloadProfile

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec

V100_SM_COUNT = 80
# Every step launches kernels and waits for some: the GPU part of a step is never below this
# fraction of the isolated step, even where the fixed host time exceeds a faster host's step
# (used here and by canary.sim.pair_model, which imports it from here).
MIN_GPU_FRACTION = 0.05

# Isolated throughput (steps/s) of each job on a V100, from Gavel's file ('null' entries).
GAVEL_ISOLATED_STEPS_PER_S: dict[str, float] = {
    "A3C": 7.479619707470718,
    "CycleGAN": 4.735589112139888,
    "LM (batch size 5)": 114.11092944480009,
    "LM (batch size 10)": 81.65163491883021,
    "LM (batch size 20)": 64.74245099960703,
    "LM (batch size 40)": 50.04898767272388,
    "LM (batch size 80)": 31.6895965843242,
    "Recommendation (batch size 512)": 253.62997501442302,
    "Recommendation (batch size 1024)": 150.53937584057948,
    "Recommendation (batch size 2048)": 88.20699311038362,
    "Recommendation (batch size 4096)": 45.84989816146732,
    "Recommendation (batch size 8192)": 22.24682308518159,
    "ResNet-18 (batch size 16)": 32.353384328946916,
    "ResNet-18 (batch size 32)": 29.947157347732464,
    "ResNet-18 (batch size 64)": 24.093231895382736,
    "ResNet-18 (batch size 128)": 22.37157036353171,
    "ResNet-18 (batch size 256)": 11.949277372202666,
    "ResNet-50 (batch size 16)": 12.21691492060599,
    "ResNet-50 (batch size 32)": 7.930372537553422,
    "ResNet-50 (batch size 64)": 4.525762041224065,
    "ResNet-50 (batch size 128)": 2.5301133768088104,
    "Transformer (batch size 16)": 11.06408721300405,
    "Transformer (batch size 32)": 9.682863271706568,
    "Transformer (batch size 64)": 8.209555577759708,
    "Transformer (batch size 128)": 5.642201972497628,
    "Transformer (batch size 256)": 1.5951407072133263,
}

# Orion, resnet50_32_fb1.csv (ResNet-50 training, batch 32): 946 kernels, 95.28 ms of kernel time
# per iteration; 34.6% of it memory-bound, 0.8% unclassified.
ORION_RESNET50_KERNELS = 946
ORION_RESNET50_BUSY_MS = 95.28
ORION_RESNET50_MEMORY_BOUND = 0.346 + 0.008 / 2  # unclassified counted half
# Orion, transformer_xl_8_fb1.csv (Transformer-XL training, batch 8): 4354 kernels; 42.1% of kernel
# time memory-bound, 6.4% unclassified.
ORION_TRANSFORMER_KERNELS = 4354
ORION_TRANSFORMER_MEMORY_BOUND = 0.421 + 0.064 / 2

# Time-weighted SM share, Σ d·min(1, SM_usage·scale/80) / Σ d over the trace's kernels, with the
# grid scaled linearly by batch (scale = batch / traced batch). Recomputed by orion_summary().
ORION_SM_SHARE: dict[tuple[str, float], float] = {
    # ResNet-50: scale = b/32
    ("resnet50_32_fb1", 16 / 32): 0.815,
    ("resnet50_32_fb1", 32 / 32): 0.906,
    ("resnet50_32_fb1", 64 / 32): 0.952,
    ("resnet50_32_fb1", 128 / 32): 0.977,
    # ResNet-18 on CIFAR-10 via the ResNet-50 trace: 32×32 inputs without the ImageNet stem give
    # ~1/3 of ResNet-50's 56×56 activations per sample, so scale = b/96.
    ("resnet50_32_fb1", 16 / 96): 0.576,
    ("resnet50_32_fb1", 32 / 96): 0.743,
    ("resnet50_32_fb1", 64 / 96): 0.861,
    ("resnet50_32_fb1", 128 / 96): 0.933,
    ("resnet50_32_fb1", 256 / 96): 0.965,
    # Transformer (translation; b sentences of ~25 tokens) via Transformer-XL (8 × 128 tokens):
    # scale = 25b / 1024 ≈ b/40.
    ("transformer_xl_8_fb1", 16 / 40): 0.773,
    ("transformer_xl_8_fb1", 32 / 40): 0.857,
    ("transformer_xl_8_fb1", 64 / 40): 0.900,
    ("transformer_xl_8_fb1", 128 / 40): 0.919,
    ("transformer_xl_8_fb1", 256 / 40): 0.932,
}

# ResNet-18 (CIFAR-10): host time per step = intercept of the least-squares line through Gavel's
# five isolated step times (30.9, 33.4, 41.5, 44.7, 83.7 ms at b = 16..256): 25.7 ms. CIFAR's
# CPU-side augmentation dominates small batches.
RESNET18_HOST_MS = 25.7
# Recommendation (autoencoder): the same line through Gavel's five step times (3.9 .. 45.0 ms at
# b = 512..8192) has intercept 0.8 ms.
RECOMMENDATION_HOST_MS = 0.8
# ResNet-50: host time = Gavel's step time at b = 32 (126.1 ms) − Orion's kernel time at b = 32.
RESNET50_HOST_MS = 1000.0 / 7.930372537553422 - ORION_RESNET50_BUSY_MS


@dataclass(frozen=True)
class GavelJob:
    """One Gavel job type with its simulator numbers and where each came from."""

    name: str
    family: str
    batch_size: int | None
    step_time_ms: float
    duty_cycle: float
    sm_share: float
    dram_intensity: float
    kernel_time_us: float
    grounded: bool  # True where an Orion trace of the same model backs the kernel numbers
    basis: dict[str, str] = field(default_factory=dict)

    def profile(self) -> WorkloadProfile:
        """The job as a training ``WorkloadProfile``: one phase = one step."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return WorkloadProfile(
            name=f"gavel-{slug}",
            version="gavel-c4fa400",
            shape_family=f"bs={self.batch_size}" if self.batch_size is not None else "any",
            workload_class="training",
            memory=MemoryEnvelope(reserved_bytes=1 << 30, peak_bytes=1 << 30, source="declared"),
            phases=(
                Phase(
                    name="step",
                    duration_s=self.step_time_ms / 1000.0,
                    duty_cycle=self.duty_cycle,
                    dram_intensity=self.dram_intensity,
                    sm_share=self.sm_share,
                ),
            ),
            sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=100),
            provenance=Provenance(
                source="profiled" if self.grounded else "declared",
                tool="canary.sim.gavel_profiles",
                notes="; ".join(f"{k}: {v}" for k, v in self.basis.items()),
            ),
        )


def _batch(name: str) -> int | None:
    match = re.search(r"batch size (\d+)", name)
    return int(match.group(1)) if match else None


def _job(name: str) -> GavelJob:
    step_ms = 1000.0 / GAVEL_ISOLATED_STEPS_PER_S[name]
    family = name.split(" (")[0]
    b = _batch(name)
    step_basis = f"Gavel V100 isolated throughput {GAVEL_ISOLATED_STEPS_PER_S[name]:.3f} steps/s"
    if family == "ResNet-50":
        assert b is not None
        duty = 1.0 - RESNET50_HOST_MS / step_ms
        busy_ms = step_ms * duty
        return GavelJob(
            name,
            family,
            b,
            step_ms,
            duty,
            sm_share=ORION_SM_SHARE[("resnet50_32_fb1", b / 32)],
            dram_intensity=ORION_RESNET50_MEMORY_BOUND,
            kernel_time_us=busy_ms * 1000.0 / ORION_RESNET50_KERNELS,
            grounded=True,
            basis={
                "step": step_basis,
                "duty_cycle": f"1 - host/step; host {RESNET50_HOST_MS:.1f} ms = Gavel step at b=32 - Orion kernel time at b=32",
                "sm_share": "Orion resnet50_32_fb1, grids scaled by b/32",
                "dram_intensity": "Orion resnet50_32_fb1 memory-bound time fraction",
                "kernel_time_us": "busy time per step / Orion's 946 kernels per step",
            },
        )
    if family == "ResNet-18":
        assert b is not None
        duty = max(0.02, 1.0 - RESNET18_HOST_MS / step_ms)
        return GavelJob(
            name,
            family,
            b,
            step_ms,
            duty,
            sm_share=ORION_SM_SHARE[("resnet50_32_fb1", b / 96)],
            dram_intensity=ORION_RESNET50_MEMORY_BOUND,
            # ResNet-18 has 21 conv/fc layers to ResNet-50's 53: Orion's kernel count scaled so.
            kernel_time_us=step_ms * duty * 1000.0 / (ORION_RESNET50_KERNELS * 21 / 53),
            grounded=False,
            basis={
                "step": step_basis,
                "duty_cycle": f"1 - host/step; host {RESNET18_HOST_MS} ms = intercept of Gavel's step-time line",
                "sm_share": "proxy: Orion resnet50_32_fb1 grids scaled by b/96 (CIFAR activations ~1/3 of ImageNet's)",
                "dram_intensity": "proxy: Orion resnet50_32_fb1",
                "kernel_time_us": "busy time / (Orion ResNet-50 kernel count x 21/53 layers)",
            },
        )
    if family == "Transformer":
        assert b is not None
        duty = 0.9
        return GavelJob(
            name,
            family,
            b,
            step_ms,
            duty,
            sm_share=ORION_SM_SHARE[("transformer_xl_8_fb1", b / 40)],
            dram_intensity=ORION_TRANSFORMER_MEMORY_BOUND,
            kernel_time_us=step_ms * duty * 1000.0 / ORION_TRANSFORMER_KERNELS,
            grounded=True,
            basis={
                "step": step_basis,
                "duty_cycle": "declared 0.9: step time is nearly flat from b=16 to 64 (launch-bound: the GPU runs "
                "thousands of small kernels back to back)",
                "sm_share": "Orion transformer_xl_8_fb1, grids scaled by 25b/1024 tokens",
                "dram_intensity": "Orion transformer_xl_8_fb1 memory-bound time fraction",
                "kernel_time_us": "busy time / Orion's 4354 kernels per step",
            },
        )
    if family == "LM":
        assert b is not None
        duty = 0.9
        sm = min(1.0, 0.25 + 0.55 * math.log2(b / 5) / 4)
        return GavelJob(
            name,
            family,
            b,
            step_ms,
            duty,
            sm_share=sm,
            dram_intensity=0.6,
            kernel_time_us=step_ms * duty * 1000.0 / 1500,
            grounded=False,
            basis={
                "step": step_basis,
                "duty_cycle": "declared 0.9: step time grows 3.6x for 16x batch (launch-bound LSTM cells)",
                "sm_share": "declared: LSTM GEMMs with b rows; 0.25 at b=5 rising to 0.8 at b=80 (log scale)",
                "dram_intensity": "declared 0.6: small-batch LSTM cells are weight-streaming (GEMV-like)",
                "kernel_time_us": "busy time / 1500 kernels (2 layers x 35 BPTT steps x fwd+bwd x ~10 kernels)",
            },
        )
    if family == "Recommendation":
        assert b is not None
        duty = 1.0 - RECOMMENDATION_HOST_MS / step_ms
        return GavelJob(
            name,
            family,
            b,
            step_ms,
            duty,
            sm_share=min(1.0, b / 2048),
            dram_intensity=0.7,
            kernel_time_us=step_ms * duty * 1000.0 / 60,
            grounded=False,
            basis={
                "step": step_basis,
                "duty_cycle": f"1 - host/step; host {RECOMMENDATION_HOST_MS} ms = intercept of Gavel's step-time line",
                "sm_share": "declared: dense-layer grids grow with batch rows, full at b=2048",
                "dram_intensity": "declared 0.7: sparse rating vectors, bandwidth-bound layers",
                "kernel_time_us": "busy time / 60 kernels (6-layer autoencoder fwd+bwd+optimizer)",
            },
        )
    if family == "A3C":
        duty = 0.3
        return GavelJob(
            name,
            family,
            None,
            step_ms,
            duty,
            sm_share=0.2,
            dram_intensity=0.3,
            kernel_time_us=step_ms * duty * 1000.0 / 100,
            grounded=False,
            basis={
                "step": step_basis,
                "duty_cycle": "declared 0.3: Atari environments step on the CPU between small GPU updates",
                "sm_share": "declared 0.2: 84x84 frames, small conv grids",
                "dram_intensity": "declared 0.3",
                "kernel_time_us": "busy time / 100 kernels",
            },
        )
    if family == "CycleGAN":
        duty = 0.9
        return GavelJob(
            name,
            family,
            None,
            step_ms,
            duty,
            sm_share=0.95,
            dram_intensity=0.5,
            kernel_time_us=step_ms * duty * 1000.0 / 1000,
            grounded=False,
            basis={
                "step": step_basis,
                "duty_cycle": "declared 0.9: two generators and two discriminators on 256x256 images",
                "sm_share": "declared 0.95: 256x256 convolutions fill the device",
                "dram_intensity": "declared 0.5: instance norm and residual blocks",
                "kernel_time_us": "busy time / 1000 kernels",
            },
        )
    raise KeyError(f"no simulator profile for Gavel job {name!r}")


def gavel_jobs() -> dict[str, GavelJob]:
    """Every Gavel V100 job type with its simulator numbers, keyed by Gavel's job name."""
    return {name: _job(name) for name in GAVEL_ISOLATED_STEPS_PER_S}


def gavel_jobs_on(spec: DeviceSpec, isolated_steps_per_s: Mapping[str, float]) -> dict[str, GavelJob]:
    """Gavel's job types on another device, from that device's measured isolated throughputs.

    Per job: the step time is the one measured on ``spec``; the host time per step is held at its
    V100 value (a property of the job and the host, not of the GPU), so the GPU-busy time and duty
    cycle follow (the GPU part at least ``MIN_GPU_FRACTION`` of the step); grids keep their block
    counts, so the SM share scales by 80 / ``spec.sm_count`` (capped at 1); the mean kernel time
    scales with the GPU-busy time. Job types with no V100 profile are left out (the caller says
    so); a device with no SM count in the catalog cannot be profiled (``KeyError`` from lookup)."""
    out: dict[str, GavelJob] = {}
    for name, tput in isolated_steps_per_s.items():
        if name not in GAVEL_ISOLATED_STEPS_PER_S or tput <= 0:
            continue
        v100 = _job(name)
        host_ms = v100.step_time_ms * (1.0 - v100.duty_cycle)
        step_ms = 1000.0 / tput
        gpu_ms = max(step_ms - host_ms, MIN_GPU_FRACTION * step_ms)
        v100_gpu_ms = v100.step_time_ms * v100.duty_cycle
        out[name] = replace(
            v100,
            step_time_ms=step_ms,
            duty_cycle=gpu_ms / step_ms,
            sm_share=min(1.0, v100.sm_share * V100_SM_COUNT / spec.sm_count),
            kernel_time_us=v100.kernel_time_us * gpu_ms / v100_gpu_ms,
            basis={
                **v100.basis,
                "step": f"Gavel {spec.name} isolated throughput {tput:.3f} steps/s",
                "duty_cycle": f"1 - host/step; host {host_ms:.1f} ms held at its V100 value",
                "sm_share": f"{v100.basis.get('sm_share', '')}; x 80/{spec.sm_count} SMs (same grids)",
                "kernel_time_us": "V100 mean kernel time x (GPU time here / GPU time on V100)",
            },
        )
    return out


def orion_summary(
    csv_path: str | Path, *, batch_scale: float = 1.0, sm_count: int = V100_SM_COUNT
) -> dict[str, float]:
    """Recompute the Orion-derived numbers of one trace: ``kernels``, ``busy_ms``, ``memory_bound``
    (memory-bound time fraction, unclassified counted half) and ``sm_share`` (grids scaled by
    ``batch_scale``). Raises ``FileNotFoundError`` when the trace is absent."""
    import csv

    with Path(csv_path).open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    durations = [float(r["Duration"]) for r in rows]
    total = sum(durations)
    memory = sum(d for r, d in zip(rows, durations, strict=True) if r["Profile"] == "0")
    unclassified = sum(d for r, d in zip(rows, durations, strict=True) if r["Profile"] not in ("0", "1"))
    share = sum(
        d * min(1.0, float(r["SM_usage"]) * batch_scale / sm_count)
        for r, d in zip(rows, durations, strict=True)
    )
    return {
        "kernels": float(len(rows)),
        "busy_ms": total / 1e6,
        "memory_bound": (memory + unclassified / 2) / total,
        "sm_share": share / total,
    }
