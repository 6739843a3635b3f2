"""MIG placements, MPS clients and limits, Green Context SM partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from canary.certificate import Finding, GpuInstancePlacement
from canary.errors import InputError
from canary.hardfit._context import FitContext, MigBooking, finding
from canary.regime import SliceRange, free_mig_placement
from canary.units import format_bytes

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.snapshot import MigInstance

GREEN_CAVEAT = (
    "green-context SM partitions are disjoint but do not guarantee concurrency "
    "(CUDA driver API documentation); the pair still shares DRAM bandwidth and L2"
)


def _span(start: int, size: int) -> str:
    return f"[{start},{start + size})"


def _same_instance(spec: DeviceSpec, instance: MigInstance, placement: GpuInstancePlacement) -> bool:
    """Whether a listed instance is the booked one (the admission's instance, created since)."""
    if (instance.start, instance.size) != (placement.start, placement.size):
        return False
    try:
        return spec.mig_profile(instance.profile).name == placement.profile
    except InputError:
        return instance.profile == placement.profile


def _new_bookings(ctx: FitContext) -> tuple[list[MigBooking], list[MigBooking]]:
    """(placed bookings the snapshot does not list yet, bookings whose placement is unknown). A
    booking whose instance the device now lists is counted once, as the instance."""
    placed, unplaced = [], []
    for booking in ctx.mig_booked:
        if booking.placement is None:
            unplaced.append(booking)
        elif not any(_same_instance(ctx.spec, i, booking.placement) for i in ctx.snapshot.mig.instances):
            placed.append(booking)
    return placed, unplaced


def may_have_mig(spec: DeviceSpec) -> bool:
    """Whether MIG could be on: not on AMD, nor on a catalogued NVIDIA device without MIG profiles.
    A device the catalog lacks may have it."""
    return spec.vendor != "amd" and (not spec.catalogued or bool(spec.mig_profiles))


def check_mig_mode(ctx: FitContext) -> list[Finding]:
    """Outside MIG: with MIG mode on, the device runs CUDA work only inside GPU instances (NVIDIA
    MIG User Guide), so no regime but ``mig:*`` can start there; whether it is on decides whether the
    device can take the candidate at all, so an unknown mode is *unknown*, never *off*. No finding
    where MIG is known off or the device cannot have it."""
    snap, spec = ctx.snapshot, ctx.spec
    if not may_have_mig(spec) or snap.mig.enabled is False:
        return []
    regime = str(ctx.regime)
    if snap.mig.enabled is None:
        reason = snap.unknown_reasons.get("mig", "the snapshot does not say")
        return [finding("mig_mode", regime, None, "mode", "unknown", snap.source,
                        f"MIG mode unknown (mig.enabled): {reason}; with MIG on, only work inside a GPU "
                        f"instance runs, so {regime} cannot be called possible")]
    return [finding("mig_mode", regime, "MIG enabled", "mode", "no", snap.source,
                    f"MIG is enabled: the device runs work only inside GPU instances, so {regime} needs MIG "
                    "disabled (the GPU drained and reset); ask for a mig:PROFILE regime instead",
                    shortfall="now")]


def check_mig(ctx: FitContext) -> list[Finding]:
    """Slices, instance count and a free placement for a new GPU instance of the regime's profile
    (NVIDIA MIG User Guide: an instance takes one of its profile's placements, and no two instances
    share a memory slice). The device's instances and the instances other admissions booked
    (``ctx.mig_booked``, evidence-store reservations) both hold their placements. The free placement
    found travels on the finding as numbers."""
    if ctx.regime.kind != "mig":
        return check_mig_mode(ctx)
    snap, spec = ctx.snapshot, ctx.spec
    name = ctx.regime.mig_profile or ""
    if not spec.catalogued:
        return [finding("mig_placement", name, None, "placement", "unknown", "catalog",
                        f"{spec.name} is not in the catalog: its MIG profiles and placements are unknown")]
    if not spec.mig_profiles:
        return [finding("mig_placement", name, "MIG not supported", "placement", "no",
                        f"catalog ({spec.source('mig_profiles')})", f"{spec.name} has no MIG", shortfall="never")]
    try:
        profile = spec.mig_profile(name)
    except InputError as exc:
        return [finding("mig_placement", name, None, "placement", "no", "catalog", exc.problem, shortfall="never")]
    if snap.mig.enabled is None:
        return [finding("mig_placement", profile.name, None, "placement", "unknown", snap.source,
                        f"MIG mode unknown (mig.enabled): {snap.unknown_reasons.get('mig', 'the snapshot does not say')}")]
    if not snap.mig.enabled:
        return [finding("mig_placement", profile.name, "MIG disabled", "placement", "no", snap.source,
                        "MIG is disabled on this device; enabling it needs the GPU drained and reset",
                        shortfall="now")]
    if "mig.instances" in snap.unknown_reasons:
        # An empty list here means "could not be read", not "no instances": never a free placement.
        return [finding("mig_placement", profile.name, None, "placement", "unknown", snap.source,
                        f"the existing MIG instances are unknown: {snap.unknown_reasons['mig.instances']}")]
    total_slices = spec.mig_memory_slices
    if total_slices is None:
        return [finding("mig_slices", profile.memory_slices, None, "memory slices", "unknown", "catalog",
                        f"the number of MIG memory slices of {spec.name} is unknown")]
    booked, unplaced = _new_bookings(ctx)
    occupied: list[SliceRange] = [*snap.mig.instances, *(b.placement for b in booked if b.placement is not None)]
    used = {s for o in occupied for s in range(o.start, o.start + o.size)}
    free_slices = total_slices - len(used)
    src = f"catalog ({profile.source('placements')}) + {snap.source} instances"
    if ctx.mig_booked:
        src += " + evidence-store bookings"
    listed = f"{len(snap.mig.instances)} instance(s)"
    if booked:
        listed += f" and {len(booked)} booking(s) of other admissions"
    out = [finding("mig_slices", profile.memory_slices, free_slices, "memory slices",
                   "yes" if profile.memory_slices <= free_slices else "no", src,
                   f"{listed} hold {len(used)} of {total_slices} slices; {profile.name} needs "
                   f"{profile.memory_slices}",
                   shortfall="never" if profile.memory_slices > total_slices else "now")]
    same = sum(1 for i in snap.mig.instances if i.profile == profile.name)
    same += sum(1 for b in booked if b.placement is not None and b.placement.profile == profile.name)
    if same >= profile.max_instances:
        out.append(finding("mig_instances", same + 1, profile.max_instances, "instances", "no", src,
                           f"{profile.name} allows at most {profile.max_instances} instance(s)"
                           + (" (booked ones included)" if booked else ""), shortfall="now"))
    starts = ", ".join(f"{p.start}" for p in profile.placements)
    taken = ", ".join(_span(i.start, i.size) for i in snap.mig.instances) or "none"
    held = ", ".join(f"{b.instance} {_span(b.placement.start, b.placement.size)} by {b.holder}"
                     for b in sorted(booked, key=lambda b: b.placement.start if b.placement else 0)
                     if b.placement is not None)
    taken += f"; held by bookings: {held}" if held else ""
    if unplaced:
        names = ", ".join(f"{b.instance} (by {b.holder})" for b in unplaced)
        out.append(finding("mig_placement", profile.name, None, "placement", "unknown", src,
                           f"booked MIG instance(s) {names} name a profile {spec.name} does not list in the "
                           "catalog, so the slices they hold are unknown"))
        return out
    spot = free_mig_placement(profile, occupied)
    if spot is None:
        if not profile.placements:
            out.append(finding("mig_placement", profile.name, "no placement", "placement", "no", src,
                               f"the catalog lists no placement for {profile.name}", shortfall="never"))
        else:
            out.append(finding("mig_placement", profile.name, "no free placement", "placement", "no", src,
                               f"{profile.name} may start at slice {starts} (size {profile.placements[0].size}); "
                               f"taken: {taken}", shortfall="now"))
    else:
        out.append(finding("mig_placement", profile.name, f"start {spot.start}", "placement", "yes", src,
                           f"free placement at slices {_span(spot.start, spot.size)}; taken: {taken}",
                           placement=GpuInstancePlacement(profile=profile.name, start=spot.start, size=spot.size)))
    return out


def _no_mps_server(ctx: FitContext) -> str:
    """Why an MPS regime cannot start without a server: a client needs the control daemon, which canary
    does not start (an operator's setting). Whom starting one would disturb depends on who runs."""
    snap = ctx.snapshot
    need = "an MPS client needs a running MPS control daemon (nvidia-cuda-mps-control -d), which canary does not start"
    listed = len(snap.residents)
    if listed:
        return (f"no MPS control daemon; {need}, and the {listed} resident(s) running now are not its clients: "
                "they would have to restart as MPS clients")
    if "residents" in snap.unknown_reasons or ctx.hbm.unlisted_context is None:
        return f"no MPS control daemon; {need}; whether a process already runs there (and would have to restart " \
               "as an MPS client) is unknown"
    if ctx.hbm.unlisted_context:
        return f"no MPS control daemon; {need}, and a context nobody listed runs there: it would have to restart " \
               "as an MPS client"
    return f"no MPS control daemon; {need}. Nothing runs on the device, so starting one disturbs nobody"


def check_mps(ctx: FitContext) -> list[Finding]:
    if ctx.regime.kind != "mps":
        return []
    snap, spec = ctx.snapshot, ctx.spec
    mps = snap.mps
    out: list[Finding] = []
    if mps.running is None:
        return [finding("mps_server", "running", None, "state", "unknown", snap.source,
                        f"MPS state unknown (mps.running): {snap.unknown_reasons.get('mps', 'the snapshot does not say')}")]
    if not mps.running:
        return [finding("mps_server", "running", "not running", "state", "no", snap.source,
                        _no_mps_server(ctx), shortfall="now")]
    limit = mps.max_clients if mps.max_clients is not None else spec.mps_max_clients
    limit_src = "observed" if mps.max_clients is not None else f"catalog ({spec.source('mps_max_clients')})"
    if mps.clients is None or limit is None:
        out.append(finding("mps_clients", None if mps.clients is None else mps.clients + 1, limit, "clients",
                           "unknown", limit_src, "MPS client count or limit unknown"))
    else:
        out.append(finding("mps_clients", mps.clients + 1, limit, "clients",
                           "yes" if mps.clients + 1 <= limit else "no", limit_src,
                           f"{mps.clients} client(s) connected", shortfall="now"))
    peak = ctx.demand.peak_bytes
    if mps.pinned_memory_limit_bytes is None:
        out.append(finding("mps_pinned_memory", peak, None, "bytes", "unknown", snap.source,
                           "whether a per-client pinned device-memory limit is set is unknown "
                           "(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"))
    else:
        limit_bytes = mps.pinned_memory_limit_bytes
        out.append(finding("mps_pinned_memory", peak, limit_bytes, "bytes",
                           "yes" if peak <= limit_bytes else "no", snap.source,
                           f"per-client pinned limit {format_bytes(limit_bytes)}", shortfall="now"))
    return out


def check_green(ctx: FitContext) -> list[Finding]:
    if ctx.regime.kind != "green":
        return []
    spec, snap = ctx.spec, ctx.snapshot
    want = ctx.regime.green_sms or 0
    minimum, align = spec.green_min_partition_sms, spec.green_sm_alignment
    src = f"catalog ({spec.source('green_sm_alignment')})"
    if minimum is None or align is None:
        return [finding("green_sms", want, None, "SMs", "unknown", src,
                        f"{spec.name}: green-context partition granularity unknown (no green contexts?)")]
    rounded = max(minimum, -(-want // align) * align)
    if snap.green_partitions_sms is None:
        return [finding("green_sms", rounded, None, "SMs", "unknown", snap.source,
                        "SMs held by existing green-context partitions are unknown")]
    # Residents that say they run in a green partition hold at least their SMs, even where the
    # snapshot's partition list leaves them out.
    held = max(sum(snap.green_partitions_sms), sum(r.green_sms or 0 for r in snap.residents))
    # Partitions are carved in whole alignment groups; the remainder below one group is unusable.
    available = ((spec.sm_count - held) // align) * align
    detail = (f"{want} SMs round up to {rounded} (minimum {minimum}, alignment {align}); "
              f"{held} of {spec.sm_count} SMs already partitioned. {GREEN_CAVEAT}")
    # More SMs than a partition of the whole device may hold is never; more than is free now is now.
    whole = (spec.sm_count // align) * align
    return [finding("green_sms", rounded, available, "SMs", "yes" if rounded <= available else "no", src, detail,
                    shortfall="never" if rounded > whole else "now")]


def check_amd_partition(ctx: FitContext) -> list[Finding]:
    """AMD's MIG analogue: a compute partition (SPX/DPX/QPX/CPX) makes the snapshot's device one
    logical GPU with 1/n of the CUs; a memory partition (NPSn) gives it 1/n of the HBM. The snapshot
    describes that logical device, so its observed memory already is the partition's; the finding
    states what the logical device holds. Nothing here is unknown when the mode is not reported:
    stage 1 reads no CU count on AMD, and HBM falls back to the catalog only when the NPS mode is
    known (``hbm`` says so)."""
    spec, part = ctx.spec, ctx.snapshot.partition
    if spec.vendor != "amd" or not spec.catalogued or not spec.compute_partitions or part.compute is None:
        return []
    parts = spec.partitions_of("compute", part.compute)
    if parts is None:
        return [finding("amd_partition", part.compute, None, "CUs", "unknown", f"catalog ({spec.source('compute_partitions')})",
                        f"{spec.name} has no compute partition mode {part.compute}")]
    cus = spec.sm_count // parts
    memory = ""
    if part.memory is not None:
        mparts = spec.partitions_of("memory", part.memory)
        if mparts is not None:
            memory = f"; {part.memory}: {mparts} memory partition(s) of {format_bytes(spec.memory_bytes // mparts)}"
    return [finding("amd_partition", "logical device", cus, "CUs", "yes", f"catalog ({spec.source('compute_partitions')})",
                    f"{part.compute}: {parts} logical device(s) of {cus} of {spec.sm_count} CUs{memory}; "
                    "each is a separate device to ROCm, as a MIG instance is to CUDA")]
