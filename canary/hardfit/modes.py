"""Compute mode and sharing-mode acceptance: may a second context join at all, in this regime?"""

from __future__ import annotations

from canary.certificate import Finding
from canary.errors import InputError
from canary.hardfit._context import FitContext, finding
from canary.profile import SharingModes


def _same_mig_profile(ctx: FitContext, accepted: str, wanted: str) -> bool:
    """Whether a profile's accepted MIG profile name (``1g.18gb``, ``MIG 1g.18gb`` or the lgip id) is
    the regime's, as the catalog resolves both; the names as written where it cannot."""
    if accepted == wanted:
        return True
    try:
        return ctx.spec.mig_profile(accepted).name == ctx.spec.mig_profile(wanted).name
    except InputError:
        return False


def _accepts(sharing: SharingModes, ctx: FitContext) -> bool:
    regime = ctx.regime
    if regime.kind == "timeslice":
        return sharing.timeslice
    if regime.kind == "streams":
        return sharing.streams
    if regime.kind == "mps":
        return sharing.mps_active_thread_pct is not None
    if regime.kind == "mig":
        return any(_same_mig_profile(ctx, name, regime.mig_profile or "") for name in sharing.mig_profiles)
    return sharing.green_sms is not None


def check_compute_mode(ctx: FitContext) -> list[Finding]:
    """May a second context open the device? NVIDIA's compute mode decides (``nvmlDeviceGetComputeMode``).

    A context nobody listed (memory in use no listed process accounts for) counts as a resident:
    under EXCLUSIVE_PROCESS it is the one allowed context. AMD devices have no compute mode at all
    (amdsmi has none to report; any number of processes may open a ROCm device), so the check
    passes on AMD with that reason instead of stopping at *unknown*."""
    mode = ctx.snapshot.compute_mode
    source = "observed" if ctx.snapshot.source not in ("file", "simulated") else ctx.snapshot.source
    listed = len(ctx.snapshot.residents)
    unlisted = ctx.hbm.unlisted_context if ctx.regime.kind != "mig" else False
    holders = f"{listed} resident(s)" + (" and a context nobody listed" if unlisted else "")
    if ctx.regime.kind == "mig":
        # Compute mode applies per MIG compute instance; a new instance has its own.
        return [finding("compute_mode", "own GPU instance", mode or "unknown", "mode", "yes", source,
                        "a new MIG instance is not shared with the residents")]
    if ctx.spec.vendor == "amd":
        if mode in (None, "DEFAULT"):
            return [finding("compute_mode", "second context", "no compute mode (AMD)", "mode", "yes", "vendor",
                            "AMD GPUs have no exclusive or prohibited compute mode; ROCm lets any number of "
                            "processes share a device (partitions are separate devices)")]
        return [finding("compute_mode", "second context", mode, "mode", "unknown", source,
                        f"compute mode {mode} is an NVIDIA setting; an AMD device cannot report it")]
    if mode is None:
        reason = ctx.snapshot.unknown_reasons.get("compute_mode", "the snapshot does not say")
        return [finding("compute_mode", "second context", None, "mode", "unknown", source, f"compute mode unknown: {reason}")]
    if mode == "PROHIBITED":
        return [finding("compute_mode", "second context", mode, "mode", "no", source,
                        "compute mode PROHIBITED allows no CUDA context", shortfall="now")]
    if mode == "EXCLUSIVE_PROCESS":
        if ctx.regime.kind == "mps" and ctx.snapshot.mps.running:
            return [finding("compute_mode", "MPS client", mode, "mode", "yes", source,
                            "MPS clients share the MPS server's context, which EXCLUSIVE_PROCESS allows")]
        if listed == 0 and unlisted is None and "residents" not in ctx.snapshot.unknown_reasons:
            return [finding("compute_mode", "first context", mode, "mode", "unknown", source,
                            "EXCLUSIVE_PROCESS allows one context, and whether a context nobody listed holds it is "
                            f"unknown ({ctx.hbm.unlisted_reason})")]
        if listed == 0 and "residents" in ctx.snapshot.unknown_reasons:
            return [finding("compute_mode", "first context", mode, "mode", "unknown", source,
                            "EXCLUSIVE_PROCESS allows one context and the device's processes are unknown: "
                            f"{ctx.snapshot.unknown_reasons['residents']}")]
        if listed == 0 and not unlisted:
            return [finding("compute_mode", "first context", mode, "mode", "yes", source, "no resident holds the device")]
        return [finding("compute_mode", "second context", mode, "mode", "no", source,
                        f"EXCLUSIVE_PROCESS allows one context and {holders} hold it", shortfall="now")]
    return [finding("compute_mode", "second context", mode, "mode", "yes", source)]


def check_sharing_mode(ctx: FitContext) -> list[Finding]:
    """The candidate, and every profiled resident, must accept the regime."""
    regime = str(ctx.regime)
    out: list[Finding] = []
    if not _accepts(ctx.candidate.sharing, ctx):
        out.append(finding("sharing_mode", regime, "not accepted", "mode", "no", "declared",
                           f"the candidate's profile does not accept {regime}", subject=ctx.candidate.name,
                           shortfall="never"))
    if ctx.regime.kind != "mig":  # MIG residents live in other instances
        for resident in ctx.snapshot.residents:
            if resident.profile is not None and not _accepts(resident.profile.sharing, ctx):
                out.append(finding("sharing_mode", regime, "not accepted", "mode", "no", "declared",
                                   f"resident {resident.name} does not accept {regime}", subject=resident.name,
                                   shortfall="now"))
    if not out:
        out.append(finding("sharing_mode", regime, "accepted", "mode", "yes", "declared",
                           "candidate and profiled residents accept this regime"))
    return out
