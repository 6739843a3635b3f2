"""HBM: the one equation of ``docs/hardfit.md``.

    available = total − driver_reserve − Σ resident footprint − unlisted − reservations − headroom
                + reclaimable
    fits  ⇔  candidate peak + per-context cost ≤ available

``memory_used_bytes`` in a snapshot is memory allocated by contexts, *without* the driver
reserve (NVML ``nvmlMemory_v2_t``: total = reserved + used + free). ``unlisted`` is the part of
it no listed resident accounts for (a process NVML cannot attribute: another container, a leak):
used − Σ resident held. A snapshot whose used count includes the reserve (NVML v1) says so with
``memory_used_includes_reserve``; then the reserve term is 0, because ``used`` already holds it.

Each term carries its source. When a term is unknown the check still answers *no* if the
candidate cannot fit even with that term at its most favourable (zero); otherwise it answers
*unknown*. It never answers *yes* on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from canary.certificate import EquationTerm, Finding, FitVerdict
from canary.errors import InputError
from canary.hardfit._context import FitContext, finding
from canary.snapshot import Resident
from canary.units import format_bytes

# Memory no listed process accounts for, below which it is not taken for a hidden context: an idle
# GPU with no context at all reports a few MiB in use through NVML v2 (driver bookkeeping), while
# the smallest CUDA context holds hundreds of MiB. Every byte still counts in the HBM balance.
UNLISTED_CONTEXT_MIN_BYTES = 16 << 20


@dataclass(frozen=True)
class HbmBalance:
    """The HBM equation's terms for one snapshot, computed once per check (see module doc)."""

    terms: tuple[EquationTerm, ...]
    unlisted_bytes: int | None
    """used − reserve-if-included − Σ resident held; ``None`` when it cannot be told."""
    unlisted_reason: str

    def term(self, name: str) -> EquationTerm:
        return next(t for t in self.terms if t.name == name)

    @property
    def unlisted_context(self) -> bool | None:
        """Whether memory in use belongs to a context no listed process accounts for."""
        if self.unlisted_bytes is None:
            return None
        return self.unlisted_bytes >= UNLISTED_CONTEXT_MIN_BYTES


def _resident_footprint(resident: Resident) -> tuple[int | None, int | None]:
    """(footprint, currently-held) — footprint is the larger of declared peak and observed use."""
    observed = resident.observed_memory_bytes
    if resident.profile is not None:
        peak = resident.profile.memory.peak_bytes
        held = observed if observed is not None else resident.profile.memory.reserved_bytes
        footprint = max(peak, observed) if observed is not None else peak
        return footprint, held
    if observed is not None:
        return observed, observed
    return None, None


def _reclaimable(resident: Resident, deadline_ms: float | None) -> int:
    """Memory a resident promises to give back within the candidate's deadline (0 if it cannot).

    Never more than the resident's own footprint: a promise to return memory it does not hold
    would create capacity out of nothing."""
    if resident.profile is None or deadline_ms is None:
        return 0
    env = resident.profile.memory
    if env.reclaim_deadline_ms is None or env.reclaim_deadline_ms > deadline_ms:
        return 0
    footprint, _ = _resident_footprint(resident)
    return min(env.reclaimable_bytes, footprint or 0)


def _observed_source(source: str) -> str:
    return "observed" if source not in ("file", "simulated") else source


def hbm_balance(ctx: FitContext) -> HbmBalance:
    """Every term of the HBM balance with its sign and source; ``value=None`` = unknown."""
    snap, spec, policy = ctx.snapshot, ctx.spec, ctx.policy
    terms: list[EquationTerm] = []
    nvml_v2 = "NVML nvmlDeviceGetMemoryInfo(nvmlMemory_v2)"

    if snap.memory_total_bytes is not None:
        total: int | None = snap.memory_total_bytes
        total_src = f"{_observed_source(snap.source)}: memory_total_bytes ({nvml_v2}.total)"
    elif spec.catalogued and spec.memory_partitions:
        # A memory-partitioned AMD device (NPSn) shows each logical device one part of the HBM.
        mode = snap.partition.memory
        parts = spec.partitions_of("memory", mode) if mode is not None else None
        if parts is None:
            total, total_src = None, (f"unknown: the snapshot states no total and {spec.name}'s memory partition mode "
                                      "(NPS) is unknown, so the catalog's whole-device figure may be too large")
        else:
            total = spec.memory_bytes // parts
            total_src = f"catalog ({spec.source('memory_bytes')}) / {parts} for {mode} ({spec.source('memory_partitions')})"
    elif spec.catalogued:
        total, total_src = spec.memory_bytes, f"catalog ({spec.source('memory_bytes')})"
    else:
        total, total_src = None, f"unknown: the snapshot does not state it and {spec.name} is not in the catalog"
    terms.append(EquationTerm(name="total", sign="+", value=total, source=total_src))

    # The reserve estimate (used for the balance unless `used` already holds it, and to find
    # unlisted memory in a v1 `used`).
    reserve: int | None
    if snap.memory_reserved_bytes is not None:
        reserve, reserve_src = snap.memory_reserved_bytes, f"{_observed_source(snap.source)}: memory_reserved_bytes ({nvml_v2}.reserved)"
    elif spec.catalogued and spec.driver_reserve_bytes is not None:
        reserve, reserve_src = spec.driver_reserve_bytes, f"catalog ({spec.source('driver_reserve_bytes')})"
    elif policy.assumed_driver_reserve_bytes is not None:
        reserve, reserve_src = policy.assumed_driver_reserve_bytes, f"policy {policy.name}: assumed_driver_reserve_bytes"
    else:
        reserve, reserve_src = None, "unknown: neither snapshot, catalog nor policy states it"
    if snap.memory_used_includes_reserve:
        terms.append(EquationTerm(name="driver_reserve", sign="-", value=0,
                                  source="counted inside memory_used_bytes (NVML v1 used = reserved + allocated)"))
    else:
        terms.append(EquationTerm(name="driver_reserve", sign="-", value=reserve, source=reserve_src))

    footprint_sum = 0
    held_sum = 0
    unknown_residents = []
    for resident in snap.residents:
        footprint, held = _resident_footprint(resident)
        if footprint is None or held is None:
            unknown_residents.append(resident.name)
            continue
        footprint_sum += footprint
        held_sum += held
    if "residents" in snap.unknown_reasons:
        # The backend could not list the device's processes (cuda:N sees only its own context).
        residents_term = EquationTerm(name="residents", sign="-", value=None,
                                      source=f"unknown: {snap.unknown_reasons['residents']}")
    elif unknown_residents:
        residents_term = EquationTerm(name="residents", sign="-", value=None,
                                      source=f"unknown for {', '.join(unknown_residents)} (no profile, no observed memory)")
    else:
        residents_term = EquationTerm(
            name="residents", sign="-", value=footprint_sum,
            source=f"{_observed_source(snap.source)}+declared: per resident the larger of declared peak (profile) "
                   "and observed use (NVML nvmlDeviceGetComputeRunningProcesses usedGpuMemory)")
    terms.append(residents_term)

    # Memory in use that no listed resident accounts for.
    unlisted: int | None
    if residents_term.value is None:
        unlisted, unlisted_src = None, "unknown: the residents' own memory is unknown"
    elif snap.memory_used_bytes is None:
        unlisted, unlisted_src = None, (
            "unknown: the snapshot does not state memory_used_bytes, so processes nobody listed cannot be ruled out")
    elif snap.memory_used_includes_reserve:
        if reserve is None:
            unlisted, unlisted_src = None, "unknown: used includes the driver reserve, whose size is unknown"
        else:
            unlisted = max(0, snap.memory_used_bytes - reserve - held_sum)
            unlisted_src = f"observed used − reserve ({reserve_src}) − residents' held memory"
    else:
        unlisted = max(0, snap.memory_used_bytes - held_sum)
        unlisted_src = f"observed used ({nvml_v2}.used) − residents' held memory"
    # In the balance a v1 `used` counts the reserve here (the reserve term above is then 0).
    balance_unlisted = unlisted
    if residents_term.value is not None and snap.memory_used_bytes is not None and snap.memory_used_includes_reserve:
        balance_unlisted = max(0, snap.memory_used_bytes - held_sum)
    terms.append(EquationTerm(name="unlisted", sign="-", value=balance_unlisted, source=unlisted_src))

    terms.append(
        EquationTerm(name="reservations", sign="-", value=ctx.reserved_bytes_by_others,
                     source="evidence store: memory booked by other admissions on this device")
        if ctx.reserved_bytes_by_others is not None
        else EquationTerm(name="reservations", sign="-", value=None,
                          source="unknown: the evidence store could not be read")
    )
    if total is not None:
        terms.append(EquationTerm(name="headroom", sign="-", value=policy.headroom_bytes(total),
                                  source=f"policy {policy.name}: max(memory_headroom_bytes, memory_headroom_pct × total)"))
    else:
        terms.append(EquationTerm(name="headroom", sign="-", value=None,
                                  source=f"policy {policy.name}: a share of an unknown total"))
    deadline = ctx.candidate.memory.acquire_deadline_ms
    terms.append(EquationTerm(name="reclaimable", sign="+",
                              value=sum(_reclaimable(r, deadline) for r in snap.residents),
                              source="declared by residents (reclaimable_bytes within reclaim_deadline_ms ≤ the "
                                     "candidate's acquire_deadline_ms), at most each resident's footprint"))
    return HbmBalance(tuple(terms), unlisted, unlisted_src)


def _tag(src: str) -> str:
    """The short form of a term's source for the table's source column (the detail has the rest):
    the words before the first colon or parenthesis, ``policy NAME`` shortened to ``policy``."""
    head = src.split(":", 1)[0].split(" (", 1)[0].strip()
    return "policy" if head.startswith("policy") else head


_SOURCE_TERMS = ("total", "driver_reserve", "residents", "headroom")


def check_hbm(ctx: FitContext) -> list[Finding]:
    if ctx.regime.kind == "mig":
        return _check_mig_memory(ctx)
    peak = ctx.candidate.memory.peak_bytes
    context_cost = ctx.policy.per_context_overhead_bytes
    demand = peak + context_cost
    balance = ctx.hbm
    demand_terms = (
        EquationTerm(name="candidate_peak", sign="=", value=peak, source="declared: candidate memory.peak_bytes"),
        EquationTerm(name="context_cost", sign="=", value=context_cost,
                     source=f"policy {ctx.policy.name}: per_context_overhead_bytes"),
    )
    terms = (*demand_terms, *balance.terms)
    unknown = [t.name for t in balance.terms if t.value is None]
    # The most favourable reading: unknown subtracted terms at zero; an unknown total cannot be bounded.
    best_case: int | None = None
    if balance.term("total").value is not None:
        best_case = sum((t.value or 0) * (1 if t.sign == "+" else -1) for t in balance.terms)
    detail = "; ".join(
        f"{t.sign}{t.name} {format_bytes(t.value) if t.value is not None else 'unknown'} [{t.source}]"
        for t in balance.terms)
    source = "+".join(dict.fromkeys(word for t in balance.terms if t.name in _SOURCE_TERMS
                                    for word in _tag(t.source).split("+")))
    if unknown:
        if best_case is not None and demand > best_case:
            return [Finding(resource="hbm", demand=demand, available=best_case, unit="bytes", verdict="no",
                            source=source, terms=terms,
                            detail=f"does not fit even if the unknown terms ({', '.join(unknown)}) were zero; {detail}")]
        return [Finding(resource="hbm", demand=demand, available=None, unit="bytes", verdict="unknown",
                        source=source, terms=terms,
                        detail=f"unknown: {', '.join(f'{t.name} ({t.source})' for t in balance.terms if t.value is None)}; "
                               f"{detail}")]
    assert best_case is not None
    verdict: FitVerdict = "yes" if demand <= best_case else "no"
    return [Finding(resource="hbm", demand=demand, available=best_case, unit="bytes", verdict=verdict,
                    source=source, detail=detail, terms=terms)]


def check_unlisted_context(ctx: FitContext) -> list[Finding]:
    """Memory in use that no listed process accounts for is a context nobody listed.

    NVML lists only the processes of the caller's PID namespace, so a process in another container
    is invisible while its memory is not. It is a resident without a profile: what it does is
    unknown. (Under EXCLUSIVE_PROCESS it is the one allowed context: ``compute_mode`` rejects.)
    MIG instances are isolated, so the check does not apply there."""
    if ctx.regime.kind == "mig":
        return []
    balance = ctx.hbm
    src = _observed_source(ctx.snapshot.source)
    if balance.unlisted_bytes is None:
        if balance.term("residents").value is None:
            # A listed process of unknown memory may account for all of it: hbm says unknown already,
            # and that process is itself a resident without a profile.
            return []
        return [finding("unlisted_context", "no unlisted context", None, "bytes", "unknown", src,
                        f"whether a process nobody listed holds the device is unknown: {balance.unlisted_reason}")]
    if balance.unlisted_context:
        return [finding("unlisted_context", "no unlisted context", balance.unlisted_bytes, "bytes", "unknown", src,
                        f"{format_bytes(balance.unlisted_bytes)} in use that no listed process accounts for "
                        f"({balance.unlisted_reason}): a context in another container or namespace, whose "
                        "compute needs and interference are unknown — like a resident without a profile")]
    return [finding("unlisted_context", "no unlisted context", balance.unlisted_bytes, "bytes", "yes", src,
                    f"{format_bytes(balance.unlisted_bytes)} not attributed to a listed process "
                    f"(below {format_bytes(UNLISTED_CONTEXT_MIN_BYTES)}, an idle device's own use)")]


def _check_mig_memory(ctx: FitContext) -> list[Finding]:
    name = ctx.regime.mig_profile or ""
    demand = ctx.candidate.memory.peak_bytes + ctx.policy.per_context_overhead_bytes
    if not ctx.spec.catalogued:
        return [finding("hbm", demand, None, "bytes", "unknown", "catalog",
                        f"{ctx.spec.name} is not in the catalog: the memory of MIG profile {name} is unknown")]
    try:
        profile = ctx.spec.mig_profile(name)
    except InputError:
        return [finding("hbm", demand, None, "bytes", "unknown", "catalog",
                        f"MIG profile {name} is not in the catalog for {ctx.spec.name}")]
    if profile.memory_bytes is None:
        return [finding("hbm", demand, None, "bytes", "unknown", f"catalog ({profile.source('memory_bytes')})",
                        f"the memory of MIG profile {profile.name} on {ctx.spec.name} is unknown", subject=profile.name)]
    headroom = ctx.policy.headroom_bytes(profile.memory_bytes)
    available = profile.memory_bytes - headroom
    verdict: FitVerdict = "yes" if demand <= available else "no"
    return [finding("hbm", demand, available, "bytes", verdict, f"catalog ({profile.source('memory_bytes')})",
                    f"MIG instance {profile.name}: {format_bytes(profile.memory_bytes)} − headroom {format_bytes(headroom)}",
                    subject=profile.name)]
