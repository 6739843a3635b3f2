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

A *no* is ``never`` when the demand exceeds what the empty device could give (total − driver
reserve − headroom; the reserve at zero where unknown) or, under MIG, the instance's memory less
headroom; otherwise ``now``. The terms themselves are computed once per fit (``balance``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from canary.certificate import EquationTerm, Finding, FitVerdict, Shortfall
from canary.errors import InputError
from canary.hardfit._context import FitContext, finding
from canary.hardfit.balance import UNLISTED_CONTEXT_MIN_BYTES, observed_source
from canary.units import format_bytes

if TYPE_CHECKING:
    from canary.catalog import MigProfile


def _tag(src: str) -> str:
    """The short form of a term's source for the table's source column (the detail has the rest):
    the words before the first colon or parenthesis, ``policy NAME`` shortened to ``policy``."""
    head = src.split(":", 1)[0].split(" (", 1)[0].strip()
    return "policy" if head.startswith("policy") else head


_SOURCE_TERMS = ("total", "driver_reserve", "residents", "headroom")


def check_hbm(ctx: FitContext) -> list[Finding]:
    if ctx.regime.kind == "mig":
        return _check_mig_memory(ctx)
    demand, balance = ctx.demand, ctx.hbm
    demand_terms = (
        EquationTerm(name="candidate_peak", sign="=", value=demand.peak_bytes,
                     source="declared: candidate memory.peak_bytes"),
        EquationTerm(name="context_cost", sign="=", value=demand.context_bytes,
                     source=f"policy {ctx.policy.name}: per_context_overhead_bytes"),
    )
    terms = (*demand_terms, *balance.terms)
    unknown = [t.name for t in balance.terms if t.value is None]
    best_case = balance.best_case
    detail = "; ".join(
        f"{t.sign}{t.name} {format_bytes(t.value) if t.value is not None else 'unknown'} [{t.source}]"
        for t in balance.terms)
    source = "+".join(dict.fromkeys(word for t in balance.terms if t.name in _SOURCE_TERMS
                                    for word in _tag(t.source).split("+")))
    empty = balance.empty_device
    shortfall: Shortfall = "now"
    if empty is not None and demand.memory_bytes > empty:
        shortfall = "never"
        shown_empty, shown_demand = _sizes(empty, demand.memory_bytes)
        never = (f"more than the empty device could give ({shown_empty}: total − driver reserve − "
                 f"headroom{'' if shown_demand == format_bytes(demand.memory_bytes) else f'; demand {shown_demand}'}); ")
    else:
        never = ""
    if unknown:
        if best_case is not None and demand.memory_bytes > best_case:
            return [Finding(resource="hbm", demand=demand.memory_bytes, available=best_case, unit="bytes",
                            verdict="no", shortfall=shortfall, source=source, terms=terms,
                            detail=f"{never}does not fit even if the unknown terms ({', '.join(unknown)}) were zero; {detail}")]
        return [Finding(resource="hbm", demand=demand.memory_bytes, available=None, unit="bytes", verdict="unknown",
                        source=source, terms=terms,
                        detail=f"unknown: {', '.join(f'{t.name} ({t.source})' for t in balance.terms if t.value is None)}; "
                               f"{detail}")]
    assert best_case is not None
    verdict: FitVerdict = "yes" if demand.memory_bytes <= best_case else "no"
    if verdict == "no":
        return [Finding(resource="hbm", demand=demand.memory_bytes, available=best_case, unit="bytes", verdict="no",
                        shortfall=shortfall, source=source, detail=never + detail, terms=terms)]
    return [Finding(resource="hbm", demand=demand.memory_bytes, available=best_case, unit="bytes", verdict="yes",
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
    src = observed_source(ctx.snapshot.source)
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


def _sizes(*values: int) -> tuple[str, ...]:
    """``format_bytes`` of each value, with the exact bytes appended to all of them when two different
    values would read the same once rounded (``8.8 GiB for 8.8 GiB`` hides a 1-byte shortfall)."""
    shown = tuple(format_bytes(v) for v in values)
    if any(shown[i] == shown[j] and values[i] != values[j]
           for i in range(len(values)) for j in range(i)):
        return tuple(f"{text} ({value} B)" for text, value in zip(shown, values, strict=True))
    return shown


def _mig_instance_memory(ctx: FitContext) -> tuple[MigProfile | None, int | None, str]:
    """(profile, memory a new instance of the regime's profile offers less headroom, why unknown)."""
    name = ctx.regime.mig_profile or ""
    if not ctx.spec.catalogued:
        return None, None, f"{ctx.spec.name} is not in the catalog: the memory of MIG profile {name} is unknown"
    try:
        profile = ctx.spec.mig_profile(name)
    except InputError:
        return None, None, f"MIG profile {name} is not in the catalog for {ctx.spec.name}"
    if profile.memory_bytes is None:
        return profile, None, f"the memory of MIG profile {profile.name} on {ctx.spec.name} is unknown"
    return profile, profile.memory_bytes - ctx.policy.headroom_bytes(profile.memory_bytes), ""


def bookable_bytes(ctx: FitContext) -> int | None:
    """What bookings share where the candidate would run: under MIG the new instance's memory less
    headroom (nobody else books it), otherwise the device's balance before other admissions'
    bookings; ``None`` when unknown."""
    if ctx.regime.kind == "mig":
        return _mig_instance_memory(ctx)[1]
    return ctx.hbm.bookable


def _check_mig_memory(ctx: FitContext) -> list[Finding]:
    """A new GPU instance has its own memory: the profile's, less the policy's headroom. It holds
    nothing else, so a *no* here is ``never`` in this regime."""
    demand = ctx.demand.memory_bytes
    profile, available, why = _mig_instance_memory(ctx)
    subject = profile.name if profile is not None else None
    source = f"catalog ({profile.source('memory_bytes')})" if profile is not None else "catalog"
    if available is None or profile is None or profile.memory_bytes is None:
        # No instance holds more than the whole device: above the total (less the headroom of that
        # much memory, the most favourable reading) the candidate can never fit, whatever the profile's
        # memory turns out to be.
        total = ctx.hbm.term("total")
        if total.value is not None:
            bound = total.value - ctx.policy.headroom_bytes(total.value)
            if demand > bound:
                shown_total, shown_bound, shown_demand = _sizes(total.value, bound, demand)
                return [finding("hbm", demand, bound, "bytes", "no", f"{source}+{_tag(total.source)}",
                                f"{why}, but no MIG instance holds more than the whole device: total {shown_total} "
                                f"[{total.source}] − headroom = {shown_bound} for {shown_demand} (peak + context)",
                                subject=subject, shortfall="never")]
        return [finding("hbm", demand, None, "bytes", "unknown", source, why, subject=subject)]
    headroom = profile.memory_bytes - available
    verdict: FitVerdict = "yes" if demand <= available else "no"
    shown_memory, shown_headroom, shown_available, shown_demand = _sizes(profile.memory_bytes, headroom, available,
                                                                         demand)
    return [finding("hbm", demand, available, "bytes", verdict, source,
                    f"MIG instance {profile.name}: {shown_memory} − headroom {shown_headroom} "
                    f"= {shown_available} for {shown_demand} (peak + context)",
                    subject=profile.name, shortfall="never")]
