"""The scenario suite: pairs (device state, candidate, regime) in families, each with what makes it
a counterexample. Building the suite is pure apart from reading ``examples/`` and Gavel's data file.

Families (``FAMILIES``):

- ``hard-sm``, ``hard-hbm``, ``hard-mig``, ``hard-mode``: hard-fit counterexamples at low
  utilisation (registers, shared memory, warps, block slots; HBM; MIG placement; compute mode).
  Ground truth is the physical fit.
- ``dram``: one resident, two candidates with the same duty cycle and SM footprint but different
  DRAM intensity — the telemetry before admission is identical, the answers differ.
- ``temporal``: a bursty resident (40% on average, in 2 s bursts on every SM) and a persistent
  narrow one (40% of the SMs, always), each with a latency-critical and a batch candidate.
- ``benign``: high utilisation with room (MIG isolation, complementary resource use).
- ``unknown``: an unprofiled resident, missing counters.
- ``gavel``: Gavel's measured V100 co-location throughputs; ground truth is the measured slowdown.

A scenario marked ``repeat_of`` asks the same question again later, so the evidence cache answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from canary.bench import profiles as bp
from canary.catalog import lookup
from canary.regime import Regime, parse_regime
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState, Resident, load_snapshot

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.profile import WorkloadProfile
    from canary.sim.gavel import GavelPair

FAMILIES: tuple[str, ...] = (
    "hard-sm", "hard-hbm", "hard-mig", "hard-mode", "dram", "temporal", "benign", "unknown", "gavel",
)
HARD_FIT_FAMILIES: tuple[str, ...] = ("hard-sm", "hard-hbm", "hard-mig", "hard-mode")

TruthKind = Literal["physical", "simulated", "measured"]
# Telemetry a real scheduler reads; a scenario may lack some of it (a container without NVML
# access, a node without DCGM).
COUNTERS: tuple[str, ...] = ("utilization_gpu_pct", "sm_active_pct", "sm_occupancy_pct", "dram_active_pct")
DCGM_COUNTERS: tuple[str, ...] = ("sm_active_pct", "sm_occupancy_pct", "dram_active_pct")


@dataclass(frozen=True)
class Scenario:
    """One admission question with what the benchmark needs to score the answers.

    ``regime`` is always explicit, so every policy and the ground truth judge the same placement.
    ``missing_counters``: telemetry fields the scheduler cannot read in this scenario.
    ``gavel``: the measured pair (resident = ``job_a``) for the ``gavel`` family, else ``None``.
    """

    id: str
    family: str
    title: str
    snapshot: DeviceSnapshot
    candidate: WorkloadProfile
    regime: str
    truth_kind: TruthKind
    why: str
    missing_counters: tuple[str, ...] = ()
    gavel: GavelPair | None = None
    repeat_of: str | None = None
    quick: bool = False

    @property
    def spec(self) -> DeviceSpec:
        return lookup(self.snapshot.device_type)

    @property
    def placement(self) -> Regime:
        """``regime`` parsed by the one regime parser (``canary.regime.parse_regime``)."""
        return parse_regime(self.regime, field=f"scenario {self.id}: regime")


def _snapshot(
    device_type: str,
    residents: list[tuple[str, WorkloadProfile | None, int | None]],
    *,
    regime: str,
    compute_mode: Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"] = "DEFAULT",
    mig_instances: tuple[MigInstance, ...] = (),
    uuid: str,
) -> DeviceSnapshot:
    """A device as a backend reports it: residents' observed memory is what they hold now (their
    reserved memory, or the given figure for an unprofiled process)."""
    spec = lookup(device_type)
    kind = parse_regime(regime, field="scenario regime").kind
    mps = kind == "mps"
    res: list[Resident] = []
    for name, profile, observed in residents:
        memory = observed if observed is not None else (profile.memory.reserved_bytes if profile else None)
        res.append(Resident(name=name, profile=profile, observed_memory_bytes=memory,
                            mps_active_thread_pct=100 if mps else None,
                            mig_instance=next((f"{i.profile}@{i.start}" for i in mig_instances if i.holder == name), None)))
    used = sum(r.observed_memory_bytes or 0 for r in res)
    return DeviceSnapshot(
        device_type=spec.name,
        uuid=uuid,
        driver_version="580.95.05",
        cuda_driver_version="13.0",
        compute_mode=compute_mode,
        mig=MigState(enabled=bool(mig_instances) or kind == "mig", instances=mig_instances),
        mps=MpsState(running=mps, clients=len(res) if mps else 0, max_clients=48 if mps else None,
                     pinned_memory_limit_bytes=spec.memory_bytes if mps else None),
        memory_total_bytes=spec.memory_bytes,
        memory_used_bytes=used,
        memory_reserved_bytes=spec.driver_reserve_bytes,
        residents=tuple(res),
        source="simulated",
    )


def _example_snapshot(name: str) -> DeviceSnapshot:
    return load_snapshot(bp.EXAMPLES_DIR / "snapshots" / f"{name}.yaml")


def _uuid(n: int) -> str:
    return f"GPU-bench-{n:04d}"


def _hard_fit() -> list[Scenario]:
    ex = bp.example_profile
    out: list[Scenario] = []
    a = _example_snapshot("a-persistent-35pct")
    out.append(Scenario("sm-registers-llm-decode", "hard-sm", "persistent megakernel at 35% + LLM decode (MPS)",
                        a, ex("llm-decode"), "mps:50", "physical",
                        "example (a): one 1024-thread block per SM leaves too few registers for a GEMM block",
                        quick=True))
    out.append(Scenario("sm-registers-embedding", "hard-sm", "persistent megakernel + embedding service (MPS)",
                        a, ex("embedding-service"), "mps:30", "physical",
                        "33 regs x 1024 threads per SM + a 128-reg, 256-thread GEMM block exceed 64K registers"))
    out.append(Scenario("sm-smem-sd-unet", "hard-sm", "persistent megakernel + SD UNet (MPS)",
                        a, ex("sd-unet-serving"), "mps:50", "physical",
                        "220 KiB of shared memory per SM held; attention needs 16 KiB more than is left"))
    out.append(Scenario("sm-registers-prefill", "hard-sm", "persistent megakernel + LLM prefill (MPS)",
                        a, ex("llm-prefill"), "mps:60", "physical",
                        "a persistent resident never leaves the SMs, so even a non-latency-critical candidate must fit beside it"))
    smem = bp.smem_persistent()
    out.append(Scenario("sm-smem-embedding", "hard-sm", "persistent 200 KiB-smem kernel at 30% + embedding (MPS)",
                        _snapshot("h100-sxm", [("flash-decode", smem, None)], regime="mps:30", uuid=_uuid(1)),
                        ex("embedding-service"), "mps:30", "physical",
                        "201 KiB of shared memory held per SM; the GEMM tile's 33 KiB does not fit in the rest",
                        quick=True))
    warps = bp.warps_persistent()
    out.append(Scenario("sm-warps-embedding", "hard-sm", "persistent 2x1024-thread kernel at 25% + embedding (MPS)",
                        _snapshot("h100-sxm", [("scheduler", warps, None)], regime="mps:30", uuid=_uuid(2)),
                        ex("embedding-service"), "mps:30", "physical",
                        "all 64 warp slots of every SM held while half the register file is free", quick=True))
    blocks = bp.blocks_persistent()
    out.append(Scenario("sm-blocks-embedding", "hard-sm", "persistent 32 one-warp blocks per SM at 20% + embedding (MPS)",
                        _snapshot("h100-sxm", [("event-loop", blocks, None)], regime="mps:30", uuid=_uuid(3)),
                        ex("embedding-service"), "mps:30", "physical",
                        "all 32 block slots of every SM held by one-warp blocks", quick=True))

    b = _example_snapshot("b-idle-hbm-held")
    out.append(Scenario("hbm-idle-notebook", "hard-hbm", "idle notebook holds 76 GiB of an A100 at 2% + ResNet-50",
                        b, ex("resnet50-training"), "timeslice", "physical",
                        "example (b): HBM held by an idle process; 22 GiB peak does not fit in 3.5 GiB", quick=True))
    kv = bp.kv_cache_server(72)
    out.append(Scenario("hbm-kv-pool-etl", "hard-hbm", "KV-cache pool holds 72 GiB of an H100 at 15% + ETL batch",
                        _snapshot("h100-sxm", [("kv-server", kv, kv.memory.peak_bytes)], regime="timeslice",
                                  uuid=_uuid(4)),
                        ex("etl-transcode"), "timeslice", "physical",
                        "a preallocated KV pool: utilisation is low, memory is gone"))
    vis = bp.big_batch("vision-batch", 44)
    out.append(Scenario("hbm-batch-llm-decode", "hard-hbm", "44 GiB batch job at 15% on an A100-80GB + LLM decode",
                        _snapshot("a100-80gb", [("vision", vis, vis.memory.peak_bytes)], regime="timeslice",
                                  uuid=_uuid(5)),
                        ex("llm-decode"), "timeslice", "physical",
                        "44 GiB held + 42 GiB peak exceed 80 GiB"))

    d = _example_snapshot("d-mig-no-placement")
    # The candidate fits a 3g.40gb's memory (12.5 GiB): what refuses it is the placement alone. LLM decode
    # (42 GiB) would be refused by the instance's memory first, for good (hbm, never).
    out.append(Scenario("mig-fragmented-3g", "hard-mig", "two 1g.10gb instances break both 3g.40gb placements",
                        d, ex("sd-unet-serving"), "mig:3g.40gb", "physical",
                        "example (d): six of eight slices free, no aligned 4-slice run", quick=True))
    emb = ex("embedding-service")
    insts = (MigInstance(profile="4g.40gb", start=0, size=4, holder="trainer"),
             MigInstance(profile="2g.20gb", start=4, size=2, holder="embedder"))
    out.append(Scenario("mig-4g-2g-taken", "hard-mig", "4g.40gb + 2g.20gb taken: two slices left for a 3g.40gb",
                        _snapshot("h100-sxm", [("trainer", ex("resnet50-training"), None), ("embedder", emb, None)],
                                  regime="mig:3g.40gb", mig_instances=insts, uuid=_uuid(6)),
                        ex("sd-unet-serving"), "mig:3g.40gb", "physical",
                        "only slices 6-7 are free; a 3g.40gb needs four"))
    h200 = (MigInstance(profile="3g.71gb", start=0, size=4, holder="trainer"),
            MigInstance(profile="3g.71gb", start=4, size=4, holder="prefill"))
    out.append(Scenario("mig-h200-both-3g", "hard-mig", "H200 with both 3g.71gb instances in use + LLM decode",
                        _snapshot("h200", [("trainer", ex("resnet50-training"), None), ("prefill", ex("llm-prefill"), None)],
                                  regime="mig:3g.71gb", mig_instances=h200, uuid=_uuid(7)),
                        ex("llm-decode"), "mig:3g.71gb", "physical",
                        "3g.71gb allows two instances and both exist"))

    e = _example_snapshot("e-exclusive-process")
    out.append(Scenario("mode-exclusive-l40s", "hard-mode", "L40S in EXCLUSIVE_PROCESS at 10% + embedding",
                        e, ex("embedding-service"), "timeslice", "physical",
                        "example (e): one context allowed and it is taken", quick=True))
    out.append(Scenario("mode-prohibited-h100", "hard-mode", "H100 in PROHIBITED mode, light resident + tokenizer",
                        _snapshot("h100-sxm", [("tokenizer-a", bp.light_tokenizer(), None)], regime="timeslice",
                                  compute_mode="PROHIBITED", uuid=_uuid(8)),
                        bp.light_tokenizer().model_copy(update={"name": "light-tokenizer-b"}), "timeslice", "physical",
                        "PROHIBITED allows no new compute context at all"))
    out.append(Scenario("mode-exclusive-unprofiled", "hard-mode", "A100 EXCLUSIVE_PROCESS with an unprofiled process",
                        _snapshot("a100-80gb", [("pid:9911", None, 6 << 30)], regime="timeslice",
                                  compute_mode="EXCLUSIVE_PROCESS", uuid=_uuid(9)),
                        ex("etl-transcode"), "timeslice", "physical",
                        "compute mode decides even when nothing is known about the resident"))
    return out


def _dram() -> list[Scenario]:
    ex = bp.example_profile
    out: list[Scenario] = []
    residents = [
        ("feature-store", bp.feature_store_serving(), "h100-sxm"),
        ("video-decode", bp.video_decode_batch(), "h100-sxm"),
        ("llm-decode", ex("llm-decode"), "h100-sxm"),
    ]
    candidates = [("gemm", bp.compute_batch()), ("etl", ex("etl-transcode"))]
    for i, (rname, rprof, device) in enumerate(residents):
        for cname, cprof in candidates:
            regime = f"mps:{cprof.sharing.mps_active_thread_pct}"
            out.append(Scenario(
                f"dram-{rname}-{cname}", "dram", f"{rname} + {cname} (same SM utilisation, DRAM {cprof.effective_dram_intensity():.2f})",
                _snapshot(device, [(rname, rprof, None)], regime=regime, uuid=_uuid(20 + i)),
                cprof, regime, "simulated",
                "identical telemetry before admission; the candidates differ only in DRAM traffic",
                quick=(i == 0)))
    return out


def _temporal() -> list[Scenario]:
    ex = bp.example_profile
    out: list[Scenario] = []
    residents = [("bursty", bp.bursty_serving()), ("narrow", bp.narrow_persistent())]
    candidates = [("lc", ex("embedding-service")), ("batch", ex("etl-transcode"))]
    for i, (rname, rprof) in enumerate(residents):
        for cname, cprof in candidates:
            for regime in (f"mps:{cprof.sharing.mps_active_thread_pct}", "timeslice"):
                kind = parse_regime(regime, field="scenario regime").kind
                out.append(Scenario(
                    f"temporal-{rname}-{cname}-{kind}", "temporal",
                    f"{rname} 40% resident + {'latency-critical' if cname == 'lc' else 'batch'} candidate ({regime})",
                    _snapshot("h100-sxm", [(rname, rprof, None)], regime=regime, uuid=_uuid(30 + i)),
                    cprof, regime, "simulated",
                    "40% on average either way; what matters is when and where the 40% happens",
                    quick=(cname == "lc" and kind == "mps")))
    return out


def _trace_temporal() -> list[Scenario]:
    """Residents replaying real duty-cycle windows (Alibaba GenAI 2026) near 40% on average: the
    burstiest window and the least bursty one."""
    from canary.bench.traces import load_duty_series, pick, windows

    ex = bp.example_profile
    all_windows = windows(load_duty_series())
    out: list[Scenario] = []
    for label, bursty in (("trace-bursty", True), ("trace-steadier", False)):
        w = pick(all_windows, mean=0.4, bursty=bursty)
        rprof = bp.trace_serving(f"diffusion-{label}", w.duty, version=f"trace-{w.pod[:12]}-{w.start_s:.0f}",
                                 source=f"pod {w.pod[:12]}… from t={w.start_s:.0f}, duty {', '.join(f'{d:.2f}' for d in w.duty)}")
        for cname, cprof, regime in (("lc", ex("embedding-service"), "mps:30"), ("batch", ex("etl-transcode"), "timeslice")):
            out.append(Scenario(
                f"temporal-{label}-{cname}", "temporal",
                f"real pod at {w.mean:.0%} mean duty (spread {w.spread:.0%}) + "
                f"{'latency-critical' if cname == 'lc' else 'batch'} candidate ({regime})",
                _snapshot("h100-sxm", [(label, rprof, None)], regime=regime, uuid=_uuid(35 if bursty else 36)),
                cprof, regime, "simulated",
                "a production duty-cycle pattern (one simulated second per sampled minute)",
                quick=(bursty and cname == "lc")))
    return out


def _benign() -> list[Scenario]:
    ex = bp.example_profile
    out: list[Scenario] = []
    c = _example_snapshot("c-mig-95pct")
    out.append(Scenario("benign-mig-h200-95pct", "benign", "H200 at 95% in MIG: a free 3g.71gb + LLM decode",
                        c, ex("llm-decode"), "mig:3g.71gb", "simulated",
                        "example (c): SMs, memory and L2 of the instance are the candidate's own", quick=True))
    g = _example_snapshot("g-nccl-mps-room")
    out.append(Scenario("benign-nccl-90pct", "benign", "NCCL ring at 90% on 32 SMs + embedding (MPS)",
                        g, ex("embedding-service"), "mps:30", "simulated",
                        "example (g): utilisation reads 90% but 100 SMs hold no resident block", quick=True))
    mig = (MigInstance(profile="4g.40gb", start=0, size=4, holder="trainer"),)
    out.append(Scenario("benign-mig-h100-training", "benign", "H100 MIG: training flat out in 4g.40gb + tokenizer in 1g.10gb",
                        _snapshot("h100-sxm", [("trainer", ex("resnet50-training"), None)], regime="mig:1g.10gb",
                                  mig_instances=mig, uuid=_uuid(40)),
                        bp.light_tokenizer(), "mig:1g.10gb", "simulated",
                        "hardware partitions: the trainer's 94% says nothing about the free slices"))
    out.append(Scenario("benign-training-tokenizer", "benign", "ResNet-50 training at 94% + light tokenizer (MPS 10%)",
                        _snapshot("h100-sxm", [("trainer", ex("resnet50-training"), None)], regime="mps:10",
                                  uuid=_uuid(41)),
                        bp.light_tokenizer(), "mps:10", "simulated",
                        "complementary: the candidate is light on SMs and DRAM"))
    out.append(Scenario("benign-etl-gemm", "benign", "DRAM-bound ETL at 80% + compute-bound GEMM batch (MPS 30%)",
                        _snapshot("h100-sxm", [("etl", ex("etl-transcode"), None)], regime="mps:30", uuid=_uuid(42)),
                        bp.compute_batch("gemm-light", duty_cycle=0.3), "mps:30", "simulated",
                        "complementary: one streams memory, the other computes from registers and shared memory"))
    conv = bp.big_batch("nightly-conv-batch", 20, duty_cycle=0.1)
    out.append(Scenario("benign-light-conv-lc", "benign", "conv batch at 10% filling the register file + embedding (MPS)",
                        _snapshot("h100-sxm", [("conv-batch", conv, None)], regime="mps:30", uuid=_uuid(43)),
                        ex("embedding-service"), "mps:30", "simulated",
                        "the resident's non-persistent blocks fill every SM's registers while they run, 10% of the time; "
                        "they drain within a kernel's time"))
    out.append(Scenario("benign-nccl-90pct-again", "benign", "the NCCL + embedding pair asked again",
                        g, ex("embedding-service"), "mps:30", "simulated",
                        "a repeated pair: the evidence cache answers", repeat_of="benign-nccl-90pct", quick=True))
    return out


def _unknown() -> list[Scenario]:
    ex = bp.example_profile
    out: list[Scenario] = []
    f = _example_snapshot("f-unprofiled-resident")
    out.append(Scenario("unknown-unprofiled-mps", "unknown", "unprofiled process under MPS + embedding",
                        f, ex("embedding-service"), "mps:30", "simulated",
                        "example (f): the resident's kernels are unknown, so co-residency is unknown", quick=True))
    out.append(Scenario("unknown-unprofiled-timeslice", "unknown", "unprofiled process on an A100 + ETL (timeslice)",
                        _snapshot("a100-80gb", [("pid:31337", None, 20 << 30)], regime="timeslice", uuid=_uuid(50)),
                        ex("etl-transcode"), "timeslice", "simulated",
                        "it fits, but nobody knows what the resident does or how much it may slow down"))
    out.append(Scenario("unknown-no-counters-decode-etl", "unknown", "LLM decode + ETL, no telemetry access (timeslice)",
                        _snapshot("h100-sxm", [("llm-decode", ex("llm-decode"), None)], regime="timeslice",
                                  uuid=_uuid(51)),
                        ex("etl-transcode"), "timeslice", "simulated",
                        "a container without NVML or DCGM access: no utilisation counter at all",
                        missing_counters=COUNTERS, quick=True))
    out.append(Scenario("unknown-no-dcgm-nccl", "unknown", "NCCL ring + embedding, NVML only (no DCGM)",
                        _example_snapshot("g-nccl-mps-room").model_copy(update={"uuid": _uuid(52)}),
                        ex("embedding-service").model_copy(update={"version": "1.8.1"}), "mps:30", "simulated",
                        "no SM occupancy or DRAM counters without DCGM", missing_counters=DCGM_COUNTERS))
    return out


def _gavel(quick: bool, seed: int) -> list[Scenario]:
    import numpy as np

    from canary.sim import calibrated_regime
    from canary.sim.gavel import load_gavel_pairs
    from canary.sim.gavel_profiles import gavel_jobs

    pairs = [p for p in load_gavel_pairs() if p.job_a != p.job_b]
    jobs = gavel_jobs()
    # A seeded draw, balanced between pairs whose measured resident slowdown is within the training
    # bound and pairs beyond it, so neither a reject-all nor an admit-all policy scores well.
    rng = np.random.default_rng([seed, 6])
    bound = 15.0
    within = [p for p in pairs if p.slowdown_a_pct <= bound]
    beyond = [p for p in pairs if p.slowdown_a_pct > bound]
    per_side = 2 if quick else 8
    chosen = [within[i] for i in sorted(rng.choice(len(within), size=min(per_side, len(within)), replace=False))]
    chosen += [beyond[i] for i in sorted(rng.choice(len(beyond), size=min(per_side, len(beyond)), replace=False))]
    # Replayed under the regime the simulator's calibration on these pairs chose (time-slicing; its
    # slice and switch cost reach the simulator through ``runner.sim_params``).
    regime = calibrated_regime().regime
    out: list[Scenario] = []
    for n, p in enumerate(chosen):
        a, b = jobs[p.job_a], jobs[p.job_b]
        resident = a.profile()
        candidate = b.profile()
        if candidate.name == resident.name:
            continue
        snap = _snapshot("v100-sxm2-16gb", [(resident.name, resident, None)], regime=regime, uuid=_uuid(60 + n))
        out.append(Scenario(
            f"gavel-{resident.name.removeprefix('gavel-')}--{candidate.name.removeprefix('gavel-')}", "gavel",
            f"{p.job_a} resident, {p.job_b} candidate (V100, measured)", snap, candidate, regime, "measured",
            f"measured slowdown of the resident {p.slowdown_a_pct:.1f}%" + (" (clamped in the source)" if p.clamped else ""),
            gavel=p, quick=quick))
    return out


def build_suite(*, quick: bool, seed: int) -> tuple[list[Scenario], list[str]]:
    """The suite in a fixed order (repeats after the pair they repeat) and the parts left out
    because their data file is absent (each with the reason). ``quick`` keeps the scenarios marked
    ``quick`` plus a smaller Gavel draw."""
    from canary.bench.traces import TraceDataMissing
    from canary.sim.gavel import GavelDataMissing

    omitted: list[str] = []
    try:
        traced = _trace_temporal()
    except TraceDataMissing as exc:
        traced = []
        omitted.append(f"trace-driven temporal scenarios: {exc.problem}")
    suite = _hard_fit() + _dram() + _temporal() + traced + _benign() + _unknown()
    if quick:
        suite = [s for s in suite if s.quick]
    try:
        suite += _gavel(quick, seed)
    except GavelDataMissing as exc:
        omitted.append(f"gavel family: {exc.problem}")
    ids = [s.id for s in suite]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"scenario ids repeat: {dupes}")
    return suite, omitted
