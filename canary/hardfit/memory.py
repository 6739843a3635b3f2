"""HBM: total − driver reserve − residents' footprint − reservations − policy headroom
+ what residents can give back within the candidate's deadline ≥ candidate peak + context cost.

Each term carries its source. When a term is unknown the check still answers *no* if the
candidate cannot fit even with that term at its most favourable (zero usage); otherwise it answers
*unknown*. It never answers *yes* on a guess.
"""

from __future__ import annotations

from canary.certificate import Finding, FitVerdict
from canary.errors import InputError
from canary.hardfit._context import FitContext, finding
from canary.snapshot import Resident
from canary.units import format_bytes


def _resident_footprint(resident: Resident) -> tuple[int | None, int | None, str]:
    """(footprint, currently-held, source) — footprint is the larger of declared peak and observed use."""
    observed = resident.observed_memory_bytes
    if resident.profile is not None:
        peak = resident.profile.memory.peak_bytes
        held = observed if observed is not None else resident.profile.memory.reserved_bytes
        footprint = max(peak, observed) if observed is not None else peak
        return footprint, held, "declared peak" if observed is None or peak >= observed else "observed"
    if observed is not None:
        return observed, observed, "observed (no profile)"
    return None, None, "unknown"


def _reclaimable(resident: Resident, deadline_ms: float | None) -> int:
    """Memory a resident promises to give back within the candidate's deadline (0 if it cannot)."""
    if resident.profile is None or deadline_ms is None:
        return 0
    env = resident.profile.memory
    if env.reclaim_deadline_ms is None or env.reclaim_deadline_ms > deadline_ms:
        return 0
    return env.reclaimable_bytes


def memory_terms(ctx: FitContext) -> dict[str, tuple[int | None, str]]:
    """Every term of the HBM balance with its source; ``None`` = unknown."""
    snap, spec, policy = ctx.snapshot, ctx.spec, ctx.policy
    terms: dict[str, tuple[int | None, str]] = {}
    total_src: str
    if snap.memory_total_bytes is not None:
        total = snap.memory_total_bytes
        total_src = "observed" if snap.source not in ("file", "simulated") else snap.source
    else:
        total, total_src = spec.memory_bytes, f"catalog ({spec.source('memory_bytes')})"
    terms["total"] = (total, total_src)
    if snap.memory_reserved_bytes is not None:
        terms["driver_reserve"] = (snap.memory_reserved_bytes, "observed")
    elif spec.driver_reserve_bytes is not None:
        terms["driver_reserve"] = (spec.driver_reserve_bytes, f"catalog ({spec.source('driver_reserve_bytes')})")
    elif policy.assumed_driver_reserve_bytes is not None:
        terms["driver_reserve"] = (policy.assumed_driver_reserve_bytes, f"policy {policy.name}")
    else:
        terms["driver_reserve"] = (None, "unknown: neither snapshot, catalog nor policy states it")

    footprint_sum = 0
    held_sum = 0
    unknown_residents = []
    for resident in snap.residents:
        footprint, held, _src = _resident_footprint(resident)
        if footprint is None or held is None:
            unknown_residents.append(resident.name)
            continue
        footprint_sum += footprint
        held_sum += held
    if "residents" in snap.unknown_reasons:
        # The backend could not list the device's processes (cuda:N sees only its own context).
        terms["residents"] = (None, f"unknown: {snap.unknown_reasons['residents']}")
        unknown_residents.append("(unlisted processes)")
    elif unknown_residents:
        terms["residents"] = (None, f"unknown for {', '.join(unknown_residents)} (no profile, no observed memory)")
    else:
        terms["residents"] = (footprint_sum, "declared peak or observed use, the larger, per resident")
    # Memory in use that no listed resident accounts for (processes NVML cannot attribute, leaks).
    reserve = terms["driver_reserve"][0]
    if snap.memory_used_bytes is not None and reserve is not None and not unknown_residents:
        terms["unattributed"] = (max(0, snap.memory_used_bytes - reserve - held_sum), "observed used − reserve − residents")
    else:
        terms["unattributed"] = (0, "not observable; counted as none")
    terms["reservations"] = (
        (ctx.reserved_bytes_by_others, "evidence store")
        if ctx.reserved_bytes_by_others is not None
        else (None, "unknown: the evidence store could not be read")
    )
    terms["headroom"] = (policy.headroom_bytes(total), f"policy {policy.name}")
    deadline = ctx.candidate.memory.acquire_deadline_ms
    terms["reclaimable"] = (sum(_reclaimable(r, deadline) for r in snap.residents),
                            "declared by residents, within the candidate's acquire deadline")
    return terms


_SOURCE_TERMS = ("total", "driver_reserve", "residents", "headroom")


def _tag(src: str) -> str:
    """The short form of a term's source for the table's source column (the detail has the rest)."""
    for word in ("observed", "catalog", "policy", "file", "simulated", "declared", "unknown"):
        if src.startswith(word):
            return word
    return src.split(" ")[0]


def check_hbm(ctx: FitContext) -> list[Finding]:
    if ctx.regime.kind == "mig":
        return _check_mig_memory(ctx)
    demand = ctx.candidate.memory.peak_bytes + ctx.policy.per_context_overhead_bytes
    terms = memory_terms(ctx)
    total = terms["total"][0]
    assert total is not None
    unknown = [name for name, (value, _) in terms.items() if value is None]
    used_known = sum(terms[n][0] or 0 for n in ("driver_reserve", "residents", "unattributed", "reservations", "headroom"))
    best_case = total - used_known + (terms["reclaimable"][0] or 0)
    detail = "; ".join(f"{name} {format_bytes(value)} [{src}]" for name, (value, src) in terms.items())
    source = "+".join(dict.fromkeys(_tag(src) for name, (_, src) in terms.items() if name in _SOURCE_TERMS))
    if unknown:
        if demand > best_case:
            return [finding("hbm", demand, best_case, "bytes", "no", source,
                            f"does not fit even if the unknown terms ({', '.join(unknown)}) were zero; {detail}")]
        return [finding("hbm", demand, None, "bytes", "unknown", source,
                        f"unknown: {', '.join(f'{n} ({terms[n][1]})' for n in unknown)}; {detail}")]
    verdict: FitVerdict = "yes" if demand <= best_case else "no"
    return [finding("hbm", demand, best_case, "bytes", verdict, source, detail)]


def _check_mig_memory(ctx: FitContext) -> list[Finding]:
    name = ctx.regime.mig_profile or ""
    try:
        profile = ctx.spec.mig_profile(name)
    except InputError:
        return [finding("hbm", ctx.candidate.memory.peak_bytes, None, "bytes", "unknown", "catalog",
                        f"MIG profile {name} is not in the catalog for {ctx.spec.name}")]
    demand = ctx.candidate.memory.peak_bytes + ctx.policy.per_context_overhead_bytes
    if profile.memory_bytes is None:
        return [finding("hbm", demand, None, "bytes", "unknown", f"catalog ({profile.source('memory_bytes')})",
                        f"the memory of MIG profile {profile.name} on {ctx.spec.name} is unknown", subject=profile.name)]
    headroom = ctx.policy.headroom_bytes(profile.memory_bytes)
    available = profile.memory_bytes - headroom
    verdict: FitVerdict = "yes" if demand <= available else "no"
    return [finding("hbm", demand, available, "bytes", verdict, f"catalog ({profile.source('memory_bytes')})",
                    f"MIG instance {profile.name}: {format_bytes(profile.memory_bytes)} − headroom {format_bytes(headroom)}",
                    subject=profile.name)]
