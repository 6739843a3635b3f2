"""The two-stage engine: stage 1 (hard fit) → evidence → probe → record → reserve → certificate.

``fit`` never probes: stage 1 plus an evidence lookup. ``admit`` (``canary.probe`` and the
evidence store) runs both stages and commits evidence, reservation and certificate together.

The evidence store is reached through ``EvidenceAccess``. When the default SQLite store does not
exist yet, ``fit`` answers from stage 1 alone without importing SQLAlchemy ("no evidence yet"),
which keeps ``gpu-fit`` fast; a store that exists but cannot be read is an operational error
(exit 4), never an empty answer.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canary.certificate import (
    Certificate,
    DecidedBy,
    DeviceRef,
    EvidenceRef,
    Expiry,
    HardFit,
    ProbeSummary,
    ReservationRef,
    ResidentRef,
    Verdict,
)
from canary.errors import InputError
from canary.hardfit import check, choose_regime, parse_regime
from canary.policy import Policy
from canary.profile import WorkloadProfile
from canary.regime import Regime
from canary.snapshot import DeviceSnapshot, Resident

if TYPE_CHECKING:
    from canary.backends import ResolvedDevice
    from canary.catalog import DeviceSpec
    from evidence_store.keys import PairKey

REVALIDATION_TRIGGERS = (
    "evidence TTL passes",
    "driver version changes",
    "candidate workload version (binary) changes",
    "a resident's workload version changes",
    "shape family changes",
    "device sharing state (MIG layout, MPS, compute mode) changes",
)


@dataclass(frozen=True)
class PairEvidence:
    """What the store says about one (resident, candidate) pair; ``outcome=None``: nothing usable."""

    resident: str
    key: PairKey | None
    outcome: str | None
    ids: tuple[str, ...] = ()
    timestamp: dt.datetime | None = None
    confidence: float | None = None
    slowdown_pct: float | None = None
    interval_pct: tuple[float, float] | None = None
    sources: tuple[str, ...] = ()
    cross_driver: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Request:
    """One admission question, fully loaded and validated."""

    device: ResolvedDevice
    candidate: WorkloadProfile
    policy: Policy
    regime: Regime
    regime_chosen_by: str
    #: Simulator parameters (a ``canary.sim.model.ContentionParams``) for a simulated probe (``None``:
    #: the simulator's defaults); set by ``canary bench`` to replay measured pairs under their
    #: calibrated regime. Typed loosely: the core does not import the simulator.
    sim_params: Any = None

    @property
    def snapshot(self) -> DeviceSnapshot:
        return self.device.snapshot

    @property
    def spec(self) -> DeviceSpec:
        return self.device.spec

    @property
    def device_id(self) -> str:
        """What reservations are booked against: the UUID of a live device, else the device reference."""
        snap = self.snapshot
        if snap.uuid:
            return snap.uuid
        if self.device.kind == "file":
            return f"file:{Path(self.device.ref).resolve()}"
        if self.device.kind == "published":  # a snapshot sent to the service (canary serve) by value or name
            return f"snapshot:{self.device.ref}"
        return f"sim:{self.spec.name}"


def build_request(
    device: ResolvedDevice,
    candidate: WorkloadProfile,
    policy: Policy,
    *,
    extra_residents: tuple[WorkloadProfile, ...] = (),
    regime: str | None = None,
) -> Request:
    """Add ``--resident`` profiles to the device and settle the regime."""
    snap = device.snapshot
    if extra_residents:
        names = {r.name for r in snap.residents}
        added: list[Resident] = []
        for profile in extra_residents:
            name = profile.name if profile.name not in names else f"{profile.name}#{len(names) + len(added)}"
            added.append(Resident(name=name, profile=profile))
        snap = snap.model_copy(update={"residents": (*snap.residents, *added)})
        from canary.backends import ResolvedDevice

        device = ResolvedDevice(snapshot=snap, spec=device.spec, ref=device.ref, kind=device.kind)
    if regime is not None:
        chosen, why = parse_regime(regime), "given with --regime"
    else:
        chosen, why = choose_regime(snap, device.spec, candidate, policy)
    return Request(device=device, candidate=candidate, policy=policy, regime=chosen, regime_chosen_by=why)


def request_from_json(
    data: dict[str, Any], *, what: str = "queued", load_policy_fn: Callable[[str], Policy] | None = None
) -> Request:
    """Rebuild a queued or logged request (documents by value, checked when they were accepted) — the one
    reader of the JSON form the service queues and logs. ``what`` names the source in error messages."""
    from canary._model import validate_document
    from canary.backends import ResolvedDevice
    from canary.catalog import lookup
    from canary.policy import load_policy

    dev = data["device"]
    snap = validate_document(DeviceSnapshot, dev["snapshot"], file=f"{what} device")
    device = ResolvedDevice(snapshot=snap, spec=lookup(snap.device_type), ref=dev["ref"], kind=dev["kind"])
    candidate = validate_document(WorkloadProfile, data["candidate"], file=f"{what} candidate")
    residents = tuple(validate_document(WorkloadProfile, r, file=f"{what} resident") for r in data["residents"])
    policy = (load_policy_fn or load_policy)(data["policy"])
    return build_request(device, candidate, policy, extra_residents=residents, regime=data["regime"])


def pair_key(req: Request, resident: Resident) -> PairKey | None:
    from evidence_store.keys import PairKey

    if resident.profile is None:
        return None
    return PairKey(
        resident_version=resident.profile.version,
        resident_shape_family=resident.profile.shape_family,
        candidate_version=req.candidate.version,
        candidate_shape_family=req.candidate.shape_family,
        device_type=req.spec.name,
        regime=str(req.regime),
    )


# --------------------------------------------------------------------------- evidence access


def store_url(explicit: str | None) -> str:
    from evidence_store.location import default_db_url

    return explicit or default_db_url()


def store_exists(url: str) -> bool:
    """False only for a SQLite file that does not exist yet (nothing recorded); servers are assumed to."""
    from evidence_store.location import sqlite_file

    path = sqlite_file(url)
    return path is None or path.exists()


class EvidenceAccess:
    """Reads evidence and reservations from the store for stage-1 and cache decisions."""

    def __init__(self, url: str | None) -> None:
        self.url = store_url(url)
        self.present = store_exists(self.url)
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            from evidence_store.engine import check_schema, open_store

            self._engine = open_store(self.url)
            check_schema(self._engine)
        return self._engine

    def reserved_bytes(self, device_id: str, now: dt.datetime) -> int:
        if not self.present:
            return 0
        from evidence_store import repository
        from evidence_store.engine import session_scope

        with session_scope(self.engine, read_only=True) as session:
            return int(repository.reserved_bytes(session, device_id, now))

    def lookup(self, req: Request, resident: Resident, now: dt.datetime) -> PairEvidence:
        if resident.profile is None:
            return PairEvidence(resident.name, None, None,
                                reason=f"resident {resident.name} has no profile, so no pairwise evidence can be keyed")
        key = pair_key(req, resident)
        assert key is not None
        if not self.present:
            return PairEvidence(resident.name, key, None, reason=f"no evidence store yet ({self.url}): no evidence for this pair")
        from evidence_store import repository
        from evidence_store.engine import session_scope

        policy = req.policy
        with session_scope(self.engine, read_only=True) as session:
            res = repository.lookup(
                session,
                key,
                driver_version=req.snapshot.driver_version,
                now=now,
                ttl_s=policy.evidence_ttl_s,
                allow_cross_driver=policy.allow_cross_driver_evidence,
                cross_driver_confidence_factor=policy.cross_driver_confidence_factor,
            )
        interval = None
        if res.slowdown_interval is not None:
            interval = (res.slowdown_interval[0] * 100, res.slowdown_interval[1] * 100)
        return PairEvidence(
            resident=resident.name,
            key=key,
            outcome=res.outcome,
            ids=tuple(res.evidence_ids),
            timestamp=res.evidence_timestamp,
            confidence=res.confidence,
            slowdown_pct=None if res.slowdown_estimate is None else res.slowdown_estimate * 100,
            interval_pct=interval,
            sources=tuple(res.sources),
            cross_driver=res.cross_driver,
            reason=res.reason,
        )


# --------------------------------------------------------------------------- certificates


@dataclass
class Decision:
    verdict: Verdict
    reason: str
    decided_by: DecidedBy
    confidence: float | None = None
    evidence: list[PairEvidence] = field(default_factory=list)
    probe: ProbeSummary | None = None
    reservations: tuple[ReservationRef, ...] = ()
    predicted_slowdown_pct: tuple[float, float] | None = None
    expires_at: dt.datetime | None = None


def make_certificate(req: Request, hard: HardFit, decision: Decision, now: dt.datetime) -> Certificate:
    snap, cand = req.snapshot, req.candidate
    ev = [e for e in decision.evidence if e.ids]
    evidence_ref = None
    if decision.evidence:
        stamps = [e.timestamp for e in ev if e.timestamp is not None]
        evidence_ref = EvidenceRef(
            ids=tuple(i for e in ev for i in e.ids),
            evidence_timestamp=max(stamps) if stamps else None,
            sources=tuple(sorted({s for e in ev for s in e.sources})),
            outcome=decision.verdict if ev else None,
            cross_driver=any(e.cross_driver for e in ev),
            reason=" | ".join(f"{e.resident}: {e.reason}" for e in decision.evidence if e.reason),
        )
    ttl = req.policy.evidence_ttl_s
    expires = decision.expires_at or (now + dt.timedelta(seconds=ttl) if decision.verdict != "unknown" else None)
    return Certificate(
        workload_name=cand.name,
        workload_version=cand.version,
        shape_family=cand.shape_family,
        device=DeviceRef(type=req.spec.name, uuid=snap.uuid, source=snap.source, driver_version=snap.driver_version),
        residents=tuple(
            ResidentRef(
                name=r.name,
                workload_version=r.profile.version if r.profile else None,
                shape_family=r.profile.shape_family if r.profile else None,
                profiled=r.profile is not None,
                observed_memory_bytes=r.observed_memory_bytes,
            )
            for r in snap.residents
        ),
        verdict=decision.verdict,
        reason=decision.reason,
        hard_fit=hard.verdict,
        regime=hard.regime,
        regime_chosen_by=req.regime_chosen_by,
        limiting_resource=hard.limiting_resource,
        findings=hard.findings,
        resource_reservations=decision.reservations,
        shared_contention_dimensions=hard.shared_contention_dimensions,
        evidence=evidence_ref,
        profile_coverage=cand.provenance.coverage,
        predicted_slowdown_range=decision.predicted_slowdown_pct,
        confidence=decision.confidence,
        expiry_or_revalidation_trigger=Expiry(
            expires_at=expires, ttl_s=ttl if decision.verdict != "unknown" else None, triggers=REVALIDATION_TRIGGERS
        ),
        decided_by=decision.decided_by,
        probe=decision.probe,
        caveats=hard.caveats,
        policy=req.policy.name,
        issued_at=now,
        simulated=snap.source == "simulated" or (decision.probe.simulated if decision.probe else False),
    )


def hard_fit(req: Request, *, reserved_bytes_by_others: int | None = 0) -> HardFit:
    return check(req.snapshot, req.spec, req.candidate, req.policy, req.regime,
                 reserved_bytes_by_others=reserved_bytes_by_others)


def _hard_fit_decision(req: Request, hard: HardFit) -> Decision | None:
    """A decision stage 1 settles by itself, or ``None`` when interference must be judged."""
    lim = hard.limiting_finding
    if hard.verdict == "no":
        assert lim is not None
        return Decision("reject", f"does not fit: {lim.resource} — {lim.detail or 'demand exceeds availability'}",
                        "hard-fit", confidence=1.0)
    if hard.verdict == "unknown":
        assert lim is not None
        unprofiled = [r.name for r in req.snapshot.residents if r.profile is None]
        if unprofiled and req.policy.on_unprofiled_resident == "reject":
            return Decision("reject", f"policy {req.policy.name} rejects next to unprofiled resident(s) "
                            f"{', '.join(unprofiled)}; stage 1 could not decide {lim.resource}: {lim.detail}", "policy")
        return Decision("unknown", f"cannot tell whether it fits: {lim.resource} — {lim.detail}", "hard-fit")
    if not req.snapshot.residents:
        return Decision("admit", "fits, and nothing else runs on the device", "hard-fit", confidence=1.0)
    if req.regime.kind == "mig":
        return Decision("admit", "fits in its own MIG instance: SMs, memory and L2 are isolated from the residents "
                        "(PCIe and power stay shared)", "hard-fit", confidence=1.0)
    return None


def _cache_decision(req: Request, evidence: list[PairEvidence]) -> Decision:
    """Decide from pooled evidence, or say what is missing (verdict unknown)."""
    unsafe = [e for e in evidence if e.outcome == "unsafe"]
    missing = [e for e in evidence if e.outcome is None]
    low = [e for e in evidence if e.outcome == "safe" and (e.confidence or 0.0) < req.policy.min_evidence_confidence]
    if unsafe:
        e = unsafe[0]
        return Decision("reject", f"evidence says the pair with {e.resident} is unsafe: {e.reason}", "cache",
                        confidence=e.confidence, evidence=evidence,
                        predicted_slowdown_pct=e.interval_pct)
    if missing or low:
        parts = [f"{e.resident}: {e.reason}" for e in missing]
        parts += [f"{e.resident}: evidence confidence {e.confidence} is below the policy's "
                  f"{req.policy.min_evidence_confidence}" for e in low]
        return Decision("unknown", "fits, but interference is not yet known — " + "; ".join(parts)
                        + " (run `canary admit` to probe)", "hard-fit", evidence=evidence)
    confidences = [e.confidence for e in evidence if e.confidence is not None]
    lows = [e.interval_pct[0] for e in evidence if e.interval_pct]
    highs = [e.interval_pct[1] for e in evidence if e.interval_pct]
    stamps = [e.timestamp for e in evidence if e.timestamp is not None]
    expires = min(stamps) + dt.timedelta(seconds=req.policy.evidence_ttl_s) if stamps else None
    return Decision("admit", "fits, and fresh evidence says every pair keeps its slowdown bound", "cache",
                    confidence=min(confidences) if confidences else None, evidence=evidence,
                    predicted_slowdown_pct=(min(lows), max(highs)) if lows and highs else None, expires_at=expires)


def fit(req: Request, access: EvidenceAccess | None, now: dt.datetime) -> Certificate:
    """Stage 1 and an evidence lookup; never probes."""
    reserved = access.reserved_bytes(req.device_id, now) if access is not None else 0
    hard = hard_fit(req, reserved_bytes_by_others=reserved)
    decision = _hard_fit_decision(req, hard)
    if decision is None:
        if access is None:
            evidence = [PairEvidence(r.name, None, None, reason="no evidence store consulted")
                        for r in req.snapshot.residents]
        else:
            evidence = [access.lookup(req, r, now) for r in req.snapshot.residents]
        decision = _cache_decision(req, evidence)
    return make_certificate(req, hard, decision, now)


def pairs_to_probe(req: Request, access: EvidenceAccess, now: dt.datetime) -> list[PairKey]:
    """The pair keys ``admit_async`` would probe for this request now; empty when stage 1 or the
    evidence decides without a probe (or a resident without a profile makes a probe pointless).
    The service uses it to coordinate probes (one per pair key) before deciding."""
    hard = hard_fit(req, reserved_bytes_by_others=access.reserved_bytes(req.device_id, now))
    if _hard_fit_decision(req, hard) is not None:
        return []
    evidence = [access.lookup(req, r, now) for r in req.snapshot.residents]
    if _cache_decision(req, evidence).verdict != "unknown":
        return []
    if any(e.outcome is None and e.key is None for e in evidence):
        return []
    return [e.key for e in evidence if e.outcome is None and e.key is not None]


def load_request(
    device_ref: str,
    candidate_path: str,
    *,
    resident_paths: tuple[str, ...] = (),
    regime: str | None = None,
    policy_ref: str | None = None,
) -> Request:
    """Load every file a CLI admission names; ``InputError`` names the file and field."""
    from canary.backends import resolve_device
    from canary.policy import load_policy
    from canary.profile import load_profile

    policy = load_policy(policy_ref)
    candidate = load_profile(candidate_path)
    residents = tuple(load_profile(p) for p in resident_paths)
    device = resolve_device(device_ref)
    if device.spec.vendor == "amd" and regime is not None and regime.startswith(("mig", "mps", "green")):
        raise InputError(f"regime {regime} is NVIDIA-only; {device.spec.name} is an AMD device", field="--regime")
    return build_request(device, candidate, policy, extra_residents=residents, regime=regime)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --------------------------------------------------------------------------- both stages


def open_store_for_writing(url: str | None, *, announce: Any = None) -> Any:
    """The store's engine, at the current schema. A SQLite store that does not exist yet — no file,
    or a file without a single table — is created at the current schema (zero setup); a store with
    an older schema is never migrated here: that is ``canary db upgrade`` (exit 4 says so)."""
    from evidence_store.engine import check_schema, open_store, upgrade
    from evidence_store.location import check_db_url, sqlite_file

    resolved = store_url(url)
    check_db_url(resolved)  # a mistyped SQLite directory is an error, never a new empty store
    path = sqlite_file(resolved)
    if path is not None and (not path.exists() or _sqlite_is_blank(path)):
        path.parent.mkdir(parents=True, exist_ok=True)
        upgrade(resolved)
        if announce is not None:
            announce(f"created a new evidence store at {resolved}")
    engine = open_store(resolved)
    check_schema(engine)
    return engine


def _sqlite_is_blank(path: Path) -> bool:
    """A SQLite file with no table at all (created by a read that found nothing): nothing to migrate."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables: int = conn.execute("select count(*) from sqlite_master where type = 'table'").fetchone()[0]
            return tables == 0
    except sqlite3.DatabaseError:
        return False  # not a SQLite file: open_store reports it


ProgressFn = Any  # Callable[[ProbeProgress], None]; kept loose so this module does not import anyio types


@dataclass(frozen=True)
class ProbeRun:
    resident: str
    key: PairKey
    result: Any  # canary.probe.orchestrator.ProbeResult


async def _probe_pair(req: Request, resident: Resident, key: PairKey, *, journal: Any, progress: ProgressFn,
                      seed: int, monitor_wrapper: Any = None) -> ProbeRun:
    from canary.probe import make_executor, make_monitor
    from canary.probe.orchestrator import run_probe

    assert resident.profile is not None
    budget = req.policy.budget_for(resident.profile.workload_class)
    sim_device = None
    handle = None
    executor_kind = req.candidate.canary.executor if req.candidate.canary else "sim"
    monitor_kind = resident.profile.canary.monitor if resident.profile.canary else "sim"
    if "sim" in (executor_kind, monitor_kind):
        if req.device.kind not in ("catalog", "file", "published"):
            raise InputError(f"{req.device.ref} is a live device: the candidate's canary executor must be "
                             "'process' or 'cuda' and the resident's monitor 'http' or 'prometheus', not 'sim'",
                             field="canary")
        from canary.sim import SimDevice

        sim_device = SimDevice.from_snapshot(req.snapshot, req.spec, seed=seed, regime=str(req.regime),
                                             params=req.sim_params)
        handle = next((h for h in sim_device.handles() if h.startswith(f"resident:{resident.name}#")), None)
    executor = make_executor(req.candidate, policy=req.policy, sim_device=sim_device)
    monitor = make_monitor(resident.profile, policy=req.policy, sim_device=sim_device, sim_resident_handle=handle)
    if monitor_wrapper is not None:
        monitor = monitor_wrapper(monitor)
    slo = resident.profile.slo.latency_p99_ms if resident.profile.slo else None
    import uuid

    result = await run_probe(
        probe_id=f"probe-{uuid.uuid4()}",
        budget=_fit_budget(budget, resident.profile),
        executor=executor,
        monitor=monitor,
        journal=journal,
        key_json=key.as_dict(),
        progress=progress,
        slo_latency_p99_ms=slo if (budget.rollback_on_slo_violation and slo) else None,
        schedule_seed=seed if sim_device is not None else None,
    )
    return ProbeRun(resident.name, key, result)


def _fit_budget(budget: Any, resident: WorkloadProfile) -> Any:
    """The class budget fitted to this resident: its own slowdown bound when stricter, and windows
    long enough to hold ``min_samples_per_window`` of its requests (a resident whose requests take
    seconds yields no data in one-second windows, which would abort every probe)."""
    changes: dict[str, float] = {
        "max_resident_slowdown_pct": _slowdown_bound(resident, budget.max_resident_slowdown_pct)}
    if resident.slo is not None and resident.slo.latency_p99_ms is not None:
        needed_s = 2 * budget.min_samples_per_window * resident.slo.latency_p99_ms / 1000
        if needed_s > budget.sampling_window_s:
            changes["sampling_window_s"] = min(needed_s, budget.max_probe_time_s)
        if needed_s > budget.baseline_window_s:
            changes["baseline_window_s"] = min(needed_s, budget.max_probe_time_s)
    return budget.override(**changes)


def _slowdown_bound(resident: WorkloadProfile, budget_pct: float) -> float:
    """The stricter of the policy's bound and the resident's own SLO bound."""
    if resident.slo is not None and resident.slo.max_slowdown_pct is not None:
        return min(budget_pct, resident.slo.max_slowdown_pct)
    return budget_pct


def _evidence_in(req: Request, run: ProbeRun, now: dt.datetime) -> Any:
    from evidence_store.schemas import EvidenceIn

    r = run.result
    est = r.slowdown_estimate_pct
    interval = r.slowdown_interval_pct
    finite = interval is not None and all(abs(v) != float("inf") for v in interval) and est is not None
    return EvidenceIn(
        probe_id=r.probe_id,
        key=run.key,
        driver_version=req.snapshot.driver_version,
        cuda_version=req.snapshot.cuda_driver_version,
        device_uuid=req.snapshot.uuid,
        source="canary",
        outcome=r.outcome,
        resident_slowdown=None if est is None or est != est or abs(est) == float("inf") else est / 100,
        resident_slowdown_low=interval[0] / 100 if finite and interval else None,
        resident_slowdown_high=interval[1] / 100 if finite and interval else None,
        samples=r.samples,
        exposure_used=r.exposure_used,
        time_used_s=r.time_used_s,
        confidence=r.confidence,
        created_at=now,
        expires_at=now + dt.timedelta(seconds=req.policy.evidence_ttl_s),
    )


def _reservation_capacity(req: Request, hard: HardFit, reserved_by_others: int) -> tuple[str, int, str | None]:
    """(device id to book against, capacity for all bookings, MIG instance) from stage 1's HBM finding."""
    hbm = next(f for f in hard.findings if f.resource == "hbm")
    assert isinstance(hbm.available, int)
    if req.regime.kind == "mig":
        placement = next((f.available for f in hard.findings if f.resource == "mig_placement"), None)
        instance = f"{req.regime.mig_profile}@{str(placement).removeprefix('start ')}"
        return f"{req.device_id}/mig:{instance}", hbm.available, instance
    return req.device_id, hbm.available + reserved_by_others, None


def _probe_decision(req: Request, runs: list[ProbeRun], cached: list[PairEvidence]) -> Decision:
    probe_summary = None
    if runs:
        r = runs[-1].result
        probe_summary = ProbeSummary(**r.to_summary_dict())
    outcomes = [run.result.outcome for run in runs]
    evidence = list(cached)
    worst = None
    for run in runs:
        if run.result.outcome == "unsafe":
            worst = run
    if worst is not None:
        r = worst.result
        return Decision("reject", f"the canary showed resident {worst.resident} slowing down beyond its bound "
                        f"({_pct(r.slowdown_estimate_pct)} vs {r.budget.max_resident_slowdown_pct:g}%): "
                        f"{r.judgment.reason if r.judgment else r.rollback_reason}", "canary",
                        confidence=r.confidence, evidence=evidence, probe=probe_summary,
                        predicted_slowdown_pct=probe_summary.slowdown_interval_pct if probe_summary else None)
    if any(o != "safe" for o in outcomes):
        bad = next(run for run in runs if run.result.outcome != "safe")
        r = bad.result
        reason = (f"the canary could not decide for resident {bad.resident} within its budget "
                  f"({r.outcome}: {r.judgment.reason if r.judgment else r.rollback_reason})")
        verdict: Verdict = "reject" if req.policy.on_probe_inconclusive == "reject" else "unknown"
        return Decision(verdict, reason, "canary", confidence=None, evidence=evidence, probe=probe_summary)
    confidences = [run.result.confidence for run in runs if run.result.confidence is not None]
    confidences += [e.confidence for e in cached if e.confidence is not None]
    lows = [run.result.slowdown_interval_pct[0] for run in runs if run.result.slowdown_interval_pct]
    highs = [run.result.slowdown_interval_pct[1] for run in runs if run.result.slowdown_interval_pct]
    return Decision("admit", "fits, and the canary showed every resident within its slowdown bound", "canary",
                    confidence=min(confidences) if confidences else None, evidence=evidence, probe=probe_summary,
                    predicted_slowdown_pct=(min(lows), max(highs)) if lows and highs else None)


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}%"


async def admit_async(
    req: Request,
    *,
    db_url: str | None = None,
    probe: bool = True,
    progress: ProgressFn = None,
    announce: Any = None,
    seed: int = 0,
    now: Any = None,
    reserve: bool = True,
    engine: Any = None,
    monitor_wrapper: Any = None,
    defer_probe: Any = None,
) -> Certificate:
    """Both stages: stage 1, evidence, a bounded probe for each pair without evidence, then evidence,
    reservation and certificate committed together (or nothing). ``now`` is a clock function.

    ``reserve=False`` is the evidence-warming form: probes are run and recorded, nothing is booked
    and no certificate is stored (the returned one says what an admission would have decided).
    ``monitor_wrapper`` (a ``Monitor`` → ``Monitor`` function) lets a caller wrap each probe's monitor,
    e.g. the service pacing simulated windows in wall time. ``defer_probe`` (a function of the pair keys
    to probe) is called before any probe starts, with nothing written yet; the service passes one that
    raises to hand the probe to its coordinator (one probe per pair key) instead of running it here."""
    from evidence_store import repository
    from evidence_store.engine import session_scope
    from evidence_store.errors import ReservationConflict

    clock = now or utcnow
    if probe:  # where a probe may connect and what it may run: checked before the store is touched
        from canary.probe.factory import check_request

        check_request(req)
    if engine is None:
        engine = open_store_for_writing(db_url, announce=announce)
    access = EvidenceAccess(db_url)
    access._engine, access.present = engine, True
    started = clock()
    reserved_by_others = access.reserved_bytes(req.device_id, started)
    hard = hard_fit(req, reserved_bytes_by_others=reserved_by_others)
    decision = _hard_fit_decision(req, hard)
    runs: list[ProbeRun] = []
    if decision is None:
        evidence = [access.lookup(req, r, started) for r in req.snapshot.residents]
        decision = _cache_decision(req, evidence)
        missing = [(r, e) for r, e in zip(req.snapshot.residents, evidence, strict=True)
                   if e.outcome is None and e.key is not None]
        if decision.verdict == "unknown" and missing and probe and not any(
                e.outcome is None and e.key is None for e in evidence):
            if defer_probe is not None:
                defer_probe([e.key for _, e in missing])
            from evidence_store.journal import StoreJournal

            journal = StoreJournal(engine)
            await _recover_orphans(engine, clock(), announce)
            for i, (resident, e) in enumerate(missing):
                assert e.key is not None
                runs.append(await _probe_pair(req, resident, e.key, journal=journal, progress=progress, seed=seed + i,
                                              monitor_wrapper=monitor_wrapper))
            cached = [e for e in evidence if e.outcome is not None]
            decision = _probe_decision(req, runs, cached)
    finished = clock()
    with session_scope(engine) as session:
        recorded_ids: list[str] = []
        for run in runs:
            out = repository.record_evidence(session, _evidence_in(req, run, finished))
            recorded_ids.append(out.id)
        if recorded_ids:
            decision.evidence.append(PairEvidence(
                resident=",".join(run.resident for run in runs), key=None, outcome=decision.verdict,
                ids=tuple(recorded_ids), timestamp=finished, confidence=decision.confidence,
                sources=("canary",), reason="recorded by this admission's probe(s)"))
        if decision.verdict == "admit" and reserve:
            device_id, capacity, instance = _reservation_capacity(req, hard, reserved_by_others)
            demand = req.candidate.memory.peak_bytes + req.policy.per_context_overhead_bytes
            try:
                booking = repository.reserve(
                    session, device_id=device_id, holder=f"{req.candidate.name}@{req.candidate.version}",
                    memory_bytes=demand, mig_instance=instance, capacity_memory_bytes=capacity,
                    lease_s=req.policy.reservation_lease_s, now=finished)
                decision.reservations = (ReservationRef(id=booking.id, memory_bytes=booking.memory_bytes,
                                                        mig_instance=instance,
                                                        lease_expires_at=booking.expires_at),)
            except ReservationConflict as exc:
                decision = Decision("reject", f"another admission booked the memory first: {exc}", "hard-fit",
                                    confidence=1.0, evidence=decision.evidence, probe=decision.probe)
        cert = make_certificate(req, hard, decision, finished)
        if reserve:
            repository.record_certificate(session, json.loads(cert.to_json()),
                                          [i for e in decision.evidence for i in e.ids])
    return cert


async def _recover_orphans(engine: Any, now: dt.datetime, announce: Any) -> None:
    """Every probe start first cleans up probes whose owner died (expired leases); the kills wait in a
    worker thread with no store transaction open."""
    from canary.jobs.recover import recover_store_async

    report = await recover_store_async(engine, now=now)
    if report.aborted and announce is not None:
        announce(f"recovered {report.aborted} orphaned probe(s) whose lease had expired")


def admit(req: Request, **kwargs: Any) -> Certificate:
    """``admit_async`` from synchronous code."""
    import anyio

    async def _go() -> Certificate:
        return await admit_async(req, **kwargs)

    return anyio.run(_go)


def record_feedback(
    req: Request,
    *,
    resident_name: str,
    db_url: str | None,
    observed_slowdown_pct: float | None,
    now: dt.datetime,
    engine: Any = None,
) -> str:
    """Record a production SLO violation for an admitted pair; it outweighs earlier passes.
    ``engine``: the caller's open store (the service's), instead of opening one from ``db_url``."""
    import uuid

    from evidence_store import repository
    from evidence_store.engine import session_scope
    from evidence_store.schemas import EvidenceIn

    resident = next((r for r in req.snapshot.residents if r.name == resident_name), None)
    if resident is None:
        names = ", ".join(r.name for r in req.snapshot.residents) or "none"
        raise InputError(f"no resident named {resident_name!r} (residents: {names})", field="--resident-name")
    key = pair_key(req, resident)
    if key is None:
        raise InputError(f"resident {resident_name!r} has no profile, so no pair key", field="--resident-name")
    if engine is None:
        engine = open_store_for_writing(db_url)
    rec = EvidenceIn(
        probe_id=f"feedback-{uuid.uuid4()}", key=key, driver_version=req.snapshot.driver_version,
        cuda_version=req.snapshot.cuda_driver_version, device_uuid=req.snapshot.uuid, source="production",
        outcome="unsafe", resident_slowdown=None if observed_slowdown_pct is None else observed_slowdown_pct / 100,
        samples=0, exposure_used=0, time_used_s=0.0, confidence=None, created_at=now,
        expires_at=now + dt.timedelta(seconds=req.policy.evidence_ttl_s),
    )
    with session_scope(engine) as session:
        out = repository.record_evidence(session, rec)
    return str(out.id)
