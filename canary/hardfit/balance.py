"""The HBM balance: the terms of the one equation of ``docs/hardfit.md``, computed once per fit.

Computed before any check runs (the fit context carries it) from the snapshot, catalog, policy and
bookings alone; ``memory`` compares the candidate's demand with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.certificate import EquationTerm
from canary.snapshot import Resident

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.policy import Policy
    from canary.snapshot import DeviceSnapshot

# Memory no listed process accounts for, below which it is not taken for a hidden context: an idle
# GPU with no context at all reports a few MiB in use through NVML v2 (driver bookkeeping), while
# the smallest CUDA context holds hundreds of MiB. Every byte still counts in the HBM balance.
UNLISTED_CONTEXT_MIN_BYTES = 16 << 20


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class HbmBalance:
    """The HBM equation's terms for one snapshot, computed once per check (see module doc)."""

    terms: tuple[EquationTerm, ...]
    unlisted_bytes: int | None
    """used − reserve-if-included − Σ resident held; ``None`` when it cannot be told."""
    unlisted_reason: str
    driver_reserve_bytes: int | None
    """The driver's reserve (observed, catalog or policy), also where ``used`` already holds it."""

    def term(self, name: str) -> EquationTerm:
        return next(t for t in self.terms if t.name == name)

    @property
    def unlisted_context(self) -> bool | None:
        """Whether memory in use belongs to a context no listed process accounts for."""
        if self.unlisted_bytes is None:
            return None
        return self.unlisted_bytes >= UNLISTED_CONTEXT_MIN_BYTES

    def _sum(self, *, without: tuple[str, ...] = ()) -> int | None:
        if any(t.value is None for t in self.terms if t.name not in without):
            return None
        return sum((t.value or 0) * (1 if t.sign == "+" else -1) for t in self.terms if t.name not in without)

    @property
    def available(self) -> int | None:
        """total − every subtracted term + reclaimable; ``None`` when a term is unknown."""
        return self._sum()

    @property
    def best_case(self) -> int | None:
        """``available`` with the unknown subtracted terms at zero (their most favourable reading);
        ``None`` when the total is unknown (nothing bounds it)."""
        if self.term("total").value is None:
            return None
        return sum((t.value or 0) * (1 if t.sign == "+" else -1) for t in self.terms)

    @property
    def bookable(self) -> int | None:
        """What bookings on this device share: the balance before other admissions' bookings are
        subtracted (``available`` + reservations); ``None`` when another term is unknown."""
        return self._sum(without=("reservations",))

    @property
    def empty_device(self) -> int | None:
        """The most the device could ever offer one more context, with no resident, unlisted use or
        booking: total − driver reserve (0 where unknown) − headroom; ``None`` when the total is unknown."""
        total, headroom = self.term("total").value, self.term("headroom").value
        if total is None or headroom is None:
            return None
        return total - (self.driver_reserve_bytes or 0) - headroom


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


def observed_source(source: str) -> str:
    return "observed" if source not in ("file", "simulated") else source


# Where each live backend reads a snapshot's memory figures (``docs/hardfit.md``, the HBM equation).
_READ_BY = {
    "nvml": {"total": "NVML nvmlDeviceGetMemoryInfo(nvmlMemory_v2).total",
             "reserved": "NVML nvmlDeviceGetMemoryInfo(nvmlMemory_v2).reserved",
             "used": "NVML nvmlDeviceGetMemoryInfo(nvmlMemory_v2).used"},
    "cuda": {"total": "CUDA driver cuDeviceTotalMem"},
    "rocm": {"total": "amdsmi amdsmi_get_gpu_memory_total(VRAM)",
             "used": "amdsmi amdsmi_get_gpu_memory_usage(VRAM)"},
    "dcgm-exporter": {"reserved": "dcgm-exporter DCGM_FI_DEV_FB_RESERVED",
                      "used": "dcgm-exporter DCGM_FI_DEV_FB_USED"},
}


# Where a resident's observed memory comes from, per snapshot source.
_PROCESS_MEMORY = {
    "nvml": "NVML nvmlDeviceGetComputeRunningProcesses usedGpuMemory",
    "rocm": "amdsmi vram_mem",
    "simulated": "the simulator's observed_memory_bytes",
    "file": "observed_memory_bytes as the snapshot file states it",
}


def memory_source(snap: DeviceSnapshot, spec: DeviceSpec, field: str, figure: str) -> str:
    """The citation of a memory figure the snapshot states (``field``; ``figure``: total, reserved or
    used) — what actually produced it, never a call nobody made: a live backend's call; the snapshot
    file's own statement; on a simulated device the catalog's nominal number the simulator copies
    (``memory_bytes``, ``driver_reserve_bytes``) or the simulator's own accounting."""
    if snap.source == "simulated":
        catalog_field = {"total": "memory_bytes", "reserved": "driver_reserve_bytes"}.get(figure)
        value = getattr(snap, field)
        if spec.catalogued and catalog_field is not None and value == getattr(spec, catalog_field):
            return (f"simulated: {field} = catalog {catalog_field}, nominal "
                    f"({spec.source(catalog_field)}; no device was read)")
        return f"simulated: {field} (the simulator's accounting; no device was read)"
    if snap.source == "file":
        return f"file: {field} (as the snapshot file states it)"
    call = _READ_BY.get(snap.source, {}).get(figure)
    return f"observed: {field} ({call})" if call else f"observed: {field} (as the {snap.source} backend reported it)"


def hbm_balance(
    snap: DeviceSnapshot,
    spec: DeviceSpec,
    policy: Policy,
    *,
    acquire_deadline_ms: float | None,
    reserved_bytes_by_others: int | None,
    reservations_source: str | None = None,
) -> HbmBalance:
    """Every term of the HBM balance with its sign and source; ``value=None`` = unknown.

    ``acquire_deadline_ms`` is the candidate's: residents that give memory back within it count
    as reclaimable. ``reserved_bytes_by_others`` is ``None`` when the store could not say;
    ``reservations_source`` says where a known value came from (default: the caller gave it, no store
    named), so a 0 that was not read from a store never claims to be."""
    terms: list[EquationTerm] = []
    if snap.memory_total_bytes is not None:
        total: int | None = snap.memory_total_bytes
        total_src = memory_source(snap, spec, "memory_total_bytes", "total")
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
        reserve, reserve_src = snap.memory_reserved_bytes, memory_source(snap, spec, "memory_reserved_bytes", "reserved")
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
            source=f"{observed_source(snap.source)}+declared: per resident the larger of declared peak (profile) "
                   f"and observed use ({_PROCESS_MEMORY.get(snap.source, 'observed_memory_bytes')})")
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
        unlisted_src = f"used [{memory_source(snap, spec, 'memory_used_bytes', 'used')}] − residents' held memory"
    # In the balance a v1 `used` counts the reserve here (the reserve term above is then 0).
    balance_unlisted = unlisted
    if residents_term.value is not None and snap.memory_used_bytes is not None and snap.memory_used_includes_reserve:
        balance_unlisted = max(0, snap.memory_used_bytes - held_sum)
    terms.append(EquationTerm(name="unlisted", sign="-", value=balance_unlisted, source=unlisted_src))

    terms.append(
        EquationTerm(name="reservations", sign="-", value=reserved_bytes_by_others,
                     source=reservations_source or "given by the caller (no evidence store named)")
        if reserved_bytes_by_others is not None
        else EquationTerm(name="reservations", sign="-", value=None,
                          source="unknown: the evidence store could not be read")
    )
    if total is not None:
        terms.append(EquationTerm(name="headroom", sign="-", value=policy.headroom_bytes(total),
                                  source=f"policy {policy.name}: max(memory_headroom_bytes, memory_headroom_pct × total)"))
    else:
        terms.append(EquationTerm(name="headroom", sign="-", value=None,
                                  source=f"policy {policy.name}: a share of an unknown total"))
    terms.append(EquationTerm(name="reclaimable", sign="+",
                              value=sum(_reclaimable(r, acquire_deadline_ms) for r in snap.residents),
                              source="declared by residents (reclaimable_bytes within reclaim_deadline_ms ≤ the "
                                     "candidate's acquire_deadline_ms), at most each resident's footprint"))
    return HbmBalance(tuple(terms), unlisted, unlisted_src, reserve)
