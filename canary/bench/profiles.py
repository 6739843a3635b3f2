"""Workload profiles the benchmark builds beyond ``examples/profiles``.

Each is a plausible workload written out with the numbers a profiler or ``ptxas -v`` would give.
They exist to pin one property the suite needs (a persistent kernel that exhausts one SM resource,
a DRAM-bound or compute-bound neighbour, a bursty or a narrow resident); the docstring of each
builder says which. Pure: no IO.
"""

from __future__ import annotations

from pathlib import Path

from canary.profile import (
    CanarySpec,
    KernelSpec,
    MemoryEnvelope,
    Phase,
    Provenance,
    SharingModes,
    Slo,
    WorkloadProfile,
    load_profile,
)

GIB = 1 << 30
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
_SIM_CANARY = CanarySpec(executor="sim", monitor="sim")

# Non-persistent kernels with the resources ptxas reports for these common kernel classes.
_PAGED_ATTENTION = KernelSpec(name="paged_attention_decode", registers_per_thread=32, threads_per_block=128,
                              static_shared_bytes=2688, grid_blocks=512, gpu_time_share=1.0, dram_intensity=0.6,
                              source="cubin")
_GATHER = KernelSpec(name="embedding_gather", registers_per_thread=32, threads_per_block=128, grid_blocks=66,
                     gpu_time_share=1.0, dram_intensity=0.6, source="cubin")
_RESIZE = KernelSpec(name="nv12_resize", registers_per_thread=24, threads_per_block=256, grid_blocks=66,
                     gpu_time_share=1.0, dram_intensity=0.65, source="cubin")
_UNET_CONV = KernelSpec(name="conv_implicit_gemm", registers_per_thread=128, threads_per_block=256,
                        static_shared_bytes=32768, grid_blocks=1056, gpu_time_share=1.0, dram_intensity=0.45,
                        source="cubin")
_CONV = KernelSpec(name="conv_implicit_gemm", registers_per_thread=128, threads_per_block=256,
                   static_shared_bytes=32768, grid_blocks=264, gpu_time_share=1.0, dram_intensity=0.4, source="cubin")


def example_profile(name: str) -> WorkloadProfile:
    """``examples/profiles/<name>.yaml`` (``InputError`` naming the file when absent or invalid)."""
    return load_profile(EXAMPLES_DIR / "profiles" / f"{name}.yaml")


def _persistent(
    name: str,
    kernel: KernelSpec,
    *,
    duty_cycle: float,
    memory_gib: int = 8,
) -> WorkloadProfile:
    return WorkloadProfile(
        name=name,
        version="1.0.0",
        shape_family="any",
        workload_class="online-inference",
        latency_critical=True,
        memory=MemoryEnvelope(reserved_bytes=(memory_gib - 1) * GIB, peak_bytes=memory_gib * GIB),
        kernels=(kernel,),
        duty_cycle=duty_cycle,
        sharing=SharingModes(timeslice=True, mps_active_thread_pct=100),
        slo=Slo(latency_p99_ms=20, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="cubin", coverage=1.0),
    )


def smem_persistent() -> WorkloadProfile:
    """A persistent fused-attention kernel: one 256-thread block per SM holding 200 KiB of shared
    memory (a large KV tile) but few registers — shared memory is what runs out for a neighbour."""
    return _persistent(
        "fused-attention-persistent",
        KernelSpec(name="persistent_flash_decode", registers_per_thread=32, threads_per_block=256,
                   dynamic_shared_bytes=200 * 1024, grid_blocks=132, persistent=True, gpu_time_share=1.0,
                   dram_intensity=0.3, source="cubin"),
        duty_cycle=0.3,
    )


def warps_persistent() -> WorkloadProfile:
    """A persistent scheduler kernel with two 1024-thread blocks per SM at 16 registers: all 64 warp
    slots of every SM are taken while half the register file stays free."""
    return _persistent(
        "warp-specialized-scheduler",
        KernelSpec(name="persistent_task_loop", registers_per_thread=16, threads_per_block=1024,
                   grid_blocks=264, persistent=True, gpu_time_share=1.0, dram_intensity=0.2, source="cubin"),
        duty_cycle=0.25,
    )


def blocks_persistent() -> WorkloadProfile:
    """A persistent event loop launched as 32 one-warp blocks per SM: every block slot is taken."""
    return _persistent(
        "one-warp-event-loop",
        KernelSpec(name="persistent_event_loop", registers_per_thread=16, threads_per_block=32,
                   grid_blocks=132 * 32, persistent=True, gpu_time_share=1.0, dram_intensity=0.1, source="cubin"),
        duty_cycle=0.2,
    )


def kv_cache_server(memory_gib: int) -> WorkloadProfile:
    """A serving engine that preallocates a large KV-cache pool and is mostly idle (low utilisation)."""
    return WorkloadProfile(
        name="kv-cache-server",
        version="0.6.1",
        shape_family="bs<=16,seq<=32768",
        workload_class="online-inference",
        latency_critical=True,
        memory=MemoryEnvelope(reserved_bytes=(memory_gib - 2) * GIB, peak_bytes=memory_gib * GIB),
        kernels=(_PAGED_ATTENTION,),
        duty_cycle=0.15,
        dram_intensity=0.6,
        sharing=SharingModes(timeslice=True, mps_active_thread_pct=50),
        slo=Slo(latency_p99_ms=80, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.9),
    )


def feature_store_serving() -> WorkloadProfile:
    """Online feature lookups: 40% busy, memory-bound gathers over half the SMs."""
    return WorkloadProfile(
        name="feature-store-serving",
        version="4.2.0",
        shape_family="bs<=256",
        workload_class="online-inference",
        memory=MemoryEnvelope(reserved_bytes=12 * GIB, peak_bytes=14 * GIB),
        kernels=(_GATHER,),
        phases=(Phase(name="serve", duration_s=1.0, duty_cycle=0.4, dram_intensity=0.6, sm_share=0.5),),
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=50),
        slo=Slo(latency_p99_ms=20, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.9),
    )


def video_decode_batch() -> WorkloadProfile:
    """A batch decode/resize pipeline: half busy, memory-bound, half the SMs."""
    return WorkloadProfile(
        name="video-decode-batch",
        version="1.3.0",
        shape_family="1080p",
        workload_class="batch",
        memory=MemoryEnvelope(reserved_bytes=6 * GIB, peak_bytes=8 * GIB),
        kernels=(_RESIZE,),
        phases=(Phase(name="decode", duration_s=1.0, duty_cycle=0.5, dram_intensity=0.65, sm_share=0.5),),
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=50),
        slo=Slo(max_slowdown_pct=25),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.9),
    )


def compute_batch(name: str = "dense-gemm-batch", *, duty_cycle: float = 0.5) -> WorkloadProfile:
    """A compute-bound batch job (tensor-core GEMMs, little DRAM traffic) that accepts an MPS cap."""
    return WorkloadProfile(
        name=name,
        version="2.0.0",
        shape_family="m,n,k<=8192",
        workload_class="batch",
        memory=MemoryEnvelope(reserved_bytes=6 * GIB, peak_bytes=8 * GIB),
        kernels=(KernelSpec(name="gemm_tile_128x128x32", registers_per_thread=128, threads_per_block=256,
                            static_shared_bytes=32768, grid_blocks=264, gpu_time_share=1.0, dram_intensity=0.1,
                            source="cubin"),),
        duty_cycle=duty_cycle,
        dram_intensity=0.1,
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=30),
        slo=Slo(max_slowdown_pct=30),
        canary=_SIM_CANARY,
        provenance=Provenance(source="cubin", coverage=1.0),
    )


def bursty_serving() -> WorkloadProfile:
    """Image generation served in bursts: 2 s at 95% on every SM, then 3 s idle (38% on average)."""
    return WorkloadProfile(
        name="bursty-image-gen",
        version="1.1.0",
        shape_family="1024x1024",
        workload_class="online-inference",
        memory=MemoryEnvelope(reserved_bytes=14 * GIB, peak_bytes=16 * GIB),
        kernels=(_UNET_CONV,),
        phases=(
            Phase(name="burst", duration_s=2.0, duty_cycle=0.95, dram_intensity=0.45, sm_share=1.0),
            Phase(name="gap", duration_s=3.0, duty_cycle=0.0, dram_intensity=0.0, sm_share=1.0),
        ),
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=50),
        slo=Slo(latency_p99_ms=400, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.9),
    )


def narrow_persistent() -> WorkloadProfile:
    """A narrow always-on stream pipeline (throughput-judged): a persistent kernel on 53 of 132 SMs
    (40% of the SMs) all the time."""
    return WorkloadProfile(
        name="narrow-stream-pipeline",
        version="3.0.2",
        shape_family="any",
        workload_class="batch",
        memory=MemoryEnvelope(reserved_bytes=6 * GIB, peak_bytes=8 * GIB),
        kernels=(KernelSpec(name="persistent_pipeline", registers_per_thread=64, threads_per_block=256,
                            static_shared_bytes=16384, grid_blocks=53, persistent=True, gpu_time_share=1.0,
                            dram_intensity=0.3, source="cubin"),),
        duty_cycle=1.0,
        dram_intensity=0.3,
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=40),
        slo=Slo(max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="cubin", coverage=1.0),
    )


def light_tokenizer() -> WorkloadProfile:
    """A light pre-processing service: 10% busy on a few SMs, almost no DRAM traffic."""
    return WorkloadProfile(
        name="light-tokenizer",
        version="0.3.0",
        shape_family="seq<=2048",
        workload_class="online-inference",
        memory=MemoryEnvelope(reserved_bytes=1 * GIB, peak_bytes=2 * GIB),
        kernels=(KernelSpec(name="tokenize_scan", registers_per_thread=32, threads_per_block=128, grid_blocks=16,
                            gpu_time_share=1.0, dram_intensity=0.05, source="cubin"),),
        duty_cycle=0.1,
        dram_intensity=0.05,
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=10,
                             mig_profiles=("1g.10gb", "1g.18gb", "1g.20gb")),
        slo=Slo(latency_p99_ms=10, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="cubin", coverage=1.0),
    )


def big_batch(name: str, memory_gib: int, *, duty_cycle: float = 0.15) -> WorkloadProfile:
    """A batch job that holds a lot of memory and computes little (low utilisation)."""
    return WorkloadProfile(
        name=name,
        version="1.0.0",
        shape_family="any",
        workload_class="batch",
        memory=MemoryEnvelope(reserved_bytes=(memory_gib - 2) * GIB, peak_bytes=memory_gib * GIB),
        kernels=(_CONV,),
        duty_cycle=duty_cycle,
        dram_intensity=0.4,
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=50),
        slo=Slo(max_slowdown_pct=25),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.9),
    )


def trace_serving(name: str, duty: tuple[float, ...], *, version: str, source: str) -> WorkloadProfile:
    """A diffusion serving resident whose phases replay a real pod's duty cycle, one phase a sample
    (one simulated second per sampled minute); kernels and DRAM use as ``bursty_serving``. ``version``
    must differ between patterns: evidence is keyed by it."""
    return WorkloadProfile(
        name=name,
        version=version,
        shape_family="1024x1024",
        workload_class="online-inference",
        memory=MemoryEnvelope(reserved_bytes=14 * GIB, peak_bytes=16 * GIB),
        kernels=(_UNET_CONV,),
        phases=tuple(Phase(name=f"minute-{i}", duration_s=1.0, duty_cycle=round(d, 4), dram_intensity=0.45,
                           sm_share=1.0) for i, d in enumerate(duty)),
        sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=50),
        slo=Slo(latency_p99_ms=400, max_slowdown_pct=10),
        canary=_SIM_CANARY,
        provenance=Provenance(source="profiled", coverage=0.8, notes=source),
    )
