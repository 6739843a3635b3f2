"""The admission decisions, as pure functions: values in, a ``Decision`` (or certificate) out.

Nothing here reads a file, the clock or the store, and nothing starts a probe: the flow
(``canary.admission.flow``) gathers the inputs — stage 1's ``HardFit``, the evidence per pair, the
probe results — and asks these functions what they mean. ``tests/admission/test_decisions.py``
checks them from tables of cases.

- ``hard_fit_decision``: what stage 1 settles by itself (does not fit, cannot tell, nothing else
  runs, an isolated MIG instance), or ``None`` when interference must be judged;
- ``cache_decision``: what pooled evidence says, or what is missing;
- ``settle``: the two above together, and the pairs a probe would settle;
- ``predicted_decision``: what calibrated predictions decide without a probe, where the policy
  trusts their estimators (docs/estimators.md), or ``None``;
- ``probe_decision``: what the probes (and the evidence they complete) say;
- ``reservation_plan``: where the memory is booked, how much, and against which capacity;
- ``make_certificate``: the certificate of a decision.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.certificate import (
    Certificate,
    DecidedBy,
    DeviceRef,
    EvidenceRef,
    Expiry,
    HardFit,
    PredictionRef,
    ProbeSummary,
    ReservationRef,
    ResidentRef,
    Verdict,
)
from canary.hardfit import check
from canary.units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from canary._model import PairKey
    from canary.admission.request import Request
    from canary.probe.orchestrator import ProbeResult
    from canary.profile import WorkloadProfile

REVALIDATION_TRIGGERS = (
    "evidence TTL passes",
    "driver version changes",
    "candidate workload version (binary) changes",
    "a resident's workload version changes",
    "shape family changes",
    "device sharing state (MIG layout, MPS, compute mode) changes",
)


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class PairEvidence:
    """What the store says about one (resident, candidate) pair; ``outcome=None``: nothing usable."""

    resident: str
    key: PairKey | None
    outcome: str | None
    ids: tuple[str, ...] = ()
    timestamp: dt.datetime | None = None
    #: When this pair's evidence runs out (``LookupResult.evidence_expires_at``); ``None``: not known.
    expires_at: dt.datetime | None = None
    confidence: float | None = None
    slowdown_pct: float | None = None
    interval_pct: tuple[float, float] | None = None
    sources: tuple[str, ...] = ()
    cross_driver: bool = False
    reason: str = ""


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class ProbeRun:
    """One probe of one pair: the resident it watched, the pair key and the orchestrator's result."""

    resident: str
    key: PairKey
    result: ProbeResult


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class Decision:
    """What one stage decided, and on what; immutable (the flow derives a new one with
    ``dataclasses.replace`` when a probe's evidence or a booking is added)."""

    verdict: Verdict
    reason: str
    decided_by: DecidedBy
    confidence: float | None = None
    evidence: tuple[PairEvidence, ...] = ()
    probe: ProbeSummary | None = None
    reservations: tuple[ReservationRef, ...] = ()
    predicted_slowdown_pct: tuple[float, float] | None = None
    expires_at: dt.datetime | None = None
    predictions: tuple[PredictionRef, ...] = ()


def hard_fit(req: Request, *, reserved_bytes_by_others: int | None = 0,
             reservations_source: str | None = None) -> HardFit:
    """Stage 1 for this request, with the memory other admissions booked (``None``: unknown) and
    where that number came from."""
    return check(req.snapshot, req.spec, req.candidate, req.policy, req.regime,
                 reserved_bytes_by_others=reserved_bytes_by_others, reservations_source=reservations_source,
                 mig_booked=req.mig_booked)


def hard_fit_decision(req: Request, hard: HardFit, *, booked_bytes: int | None = None) -> Decision | None:
    """A decision stage 1 settles by itself, or ``None`` when interference must be judged.
    ``booked_bytes``: memory other admissions booked on the device, as read from the store (0: none);
    ``None``: not read (``--no-store``, or a caller without a store), so bookings are not ruled out and
    the reason says so instead of calling the device empty. Outside MIG, a device with no resident but
    bookings is not empty: the booked workloads are about to run beside the candidate, and nothing can
    be measured against a workload not yet running. Nor is a device whose MPS server reports clients
    the snapshot does not list: their workloads run, unprofiled."""
    lim = hard.limiting_finding
    if hard.verdict == "no":
        assert lim is not None
        if req.mig_refused:  # a chosen MIG regime: every profile the candidate accepts was tried
            each = "; ".join(f"{f.subject}: {f.resource} ({f.shortfall}) — {f.detail}" for f in req.mig_refused)
            return Decision("reject", f"does not fit in any MIG profile it accepts: {each}", "hard-fit",
                            confidence=1.0)
        return Decision("reject", f"does not fit: {lim.resource} — {lim.detail or 'demand exceeds availability'}",
                        "hard-fit", confidence=1.0)
    if hard.verdict == "unknown":
        assert lim is not None
        unprofiled = [r.name for r in req.snapshot.residents if r.profile is None]
        if unprofiled and req.policy.on_unprofiled_resident == "reject":
            return Decision("reject", f"policy {req.policy.name} rejects next to unprofiled resident(s) "
                            f"{', '.join(unprofiled)}; stage 1 could not decide {lim.resource}: {lim.detail}", "policy")
        return Decision("unknown", f"cannot tell whether it fits: {lim.resource} — {lim.detail}", "hard-fit")
    if req.regime.kind == "mig":
        # A new instance is isolated whatever the others hold: say so, never "nothing else runs" (other
        # instances, bookings and their workloads may exist).
        others = len(req.snapshot.mig.instances)
        beside = (f"the {others} other instance(s) and their workloads" if others
                  else "the residents" if req.snapshot.residents else "any other instance")
        return Decision("admit", f"fits in its own MIG instance: SMs, memory and L2 are isolated from {beside} "
                        "(PCIe and power stay shared)", "hard-fit", confidence=1.0)
    if req.snapshot.residents:
        return None
    if booked_bytes:
        return Decision("unknown", f"fits, but other admissions booked {format_bytes(booked_bytes)} on this device for "
                        "workloads that are not running yet: how they and the candidate interfere cannot be judged "
                        "before they run (no resident to probe beside) — ask again once they run here, or place the "
                        "candidate on a device without bookings (`canary reservations list --device …`)", "hard-fit")
    clients = req.snapshot.mps.clients
    if clients:
        return Decision("unknown", f"fits, but the MPS server reports {clients} client(s) connected that the snapshot "
                        "does not list as residents: their workloads run beside the candidate unprofiled, so how "
                        "they interfere cannot be judged", "hard-fit")
    if booked_bytes is None:
        return Decision("admit", "fits, and no resident runs on the device; bookings by other admissions were not "
                        "read (no evidence store consulted, --no-store), so workloads booked to run here are not "
                        "ruled out — decide with the store to count them", "hard-fit", confidence=1.0)
    return Decision("admit", "fits, and nothing else runs on the device", "hard-fit", confidence=1.0)


def bound_checked(req: Request, evidence: Sequence[PairEvidence]) -> list[PairEvidence]:
    """The evidence with every verdict the resident's bound *today* does not support set aside.

    A record says safe or unsafe against the bound it was judged by — a looser policy then, an import
    made under another policy's bound, a resident whose SLO has tightened since — and the key does not
    hold the bound. So a *safe* pair counts only while its interval's upper end (else its estimate) is
    at or under the resident's bound now, and an *unsafe* one only while its lower end (else its
    estimate) is over it. The rest is as good as no evidence: ``outcome=None`` with a reason, and the
    pair is probed against today's bound."""
    profiles = {r.name: r.profile for r in req.snapshot.residents}
    out = []
    for e in evidence:
        profile = profiles.get(e.resident)
        if e.outcome not in ("safe", "unsafe") or profile is None:
            out.append(e)
            continue
        bound = resident_bound_pct(req, profile)
        low, high = e.interval_pct if e.interval_pct is not None else (None, None)
        if e.outcome == "safe":
            edge, name = (high, "upper end") if high is not None else (e.slowdown_pct, "estimate")
            holds = edge is None or edge <= bound
        else:
            edge, name = (low, "lower end") if low is not None else (e.slowdown_pct, "estimate")
            holds = edge is None or edge > bound
        if holds:
            out.append(e)
            continue
        out.append(dataclasses.replace(
            e, outcome=None, confidence=None,
            reason=f"its evidence said {e.outcome}, but the slowdown's {name} {edge:.2f}% is "
                   f"{'over' if e.outcome == 'safe' else 'at or under'} the resident's bound of {bound:g}% today "
                   f"(judged against another bound: a looser policy, another store's or an older SLO); "
                   f"records {', '.join(i[:8] for i in e.ids) or 'none'}"))
    return out


def cache_decision(req: Request, evidence: list[PairEvidence]) -> Decision:
    """Decide from pooled evidence, or say what is missing (verdict unknown). The caller passes the
    evidence through :func:`bound_checked` first (``settle`` does)."""
    unsafe = [e for e in evidence if e.outcome == "unsafe"]
    missing = [e for e in evidence if e.outcome is None]
    low = [e for e in evidence if e.outcome == "safe" and (e.confidence or 0.0) < req.policy.min_evidence_confidence]
    if unsafe:
        e = unsafe[0]
        return Decision("reject", f"evidence says the pair with {e.resident} is unsafe: {e.reason}", "cache",
                        confidence=e.confidence, evidence=tuple(evidence),
                        predicted_slowdown_pct=e.interval_pct, expires_at=_runs_out(req, [e]))
    if missing or low:
        parts = [f"{e.resident}: {e.reason}" for e in missing]
        parts += [f"{e.resident}: evidence confidence {e.confidence} is below the policy's "
                  f"{req.policy.min_evidence_confidence}" for e in low]
        return Decision("unknown", "fits, but interference is not yet known — " + "; ".join(parts)
                        + " (run `canary admit` to probe)", "hard-fit", evidence=tuple(evidence))
    confidences = [e.confidence for e in evidence if e.confidence is not None]
    lows = [e.interval_pct[0] for e in evidence if e.interval_pct]
    highs = [e.interval_pct[1] for e in evidence if e.interval_pct]
    return Decision("admit", "fits, and fresh evidence says every pair keeps its slowdown bound", "cache",
                    confidence=min(confidences) if confidences else None, evidence=tuple(evidence),
                    predicted_slowdown_pct=(min(lows), max(highs)) if lows and highs else None,
                    expires_at=_runs_out(req, evidence))


def _runs_out(req: Request, evidence: Sequence[PairEvidence]) -> dt.datetime | None:
    """When a decision on this evidence runs out: the first pair whose evidence does — its records'
    own expiry where the store gave it, never later than its newest record plus the policy's TTL
    (``None`` when no pair's time is known)."""
    ttl = dt.timedelta(seconds=req.policy.evidence_ttl_s)
    ends = []
    for e in evidence:
        by_ttl = e.timestamp + ttl if e.timestamp is not None else None
        known = [t for t in (e.expires_at, by_ttl) if t is not None]
        if known:
            ends.append(min(known))
    return min(ends) if ends else None


def pairs_needing_probe(evidence: list[PairEvidence]) -> list[PairKey]:
    """The pair keys a probe would settle after an ``unknown`` cache decision: every pair without
    usable evidence — none at all when some resident has no profile (no probe can key its pair, so
    probing the others could not lift the unknown)."""
    if any(e.outcome is None and e.key is None for e in evidence):
        return []
    return [e.key for e in evidence if e.outcome is None and e.key is not None]


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class Settled:
    """What stage 1 and the evidence decide before any probe: the decision, and the pair keys a probe
    would settle (empty when stage 1 or the evidence decides, or when no probe could lift the unknown)."""

    decision: Decision
    probe_keys: tuple[PairKey, ...] = ()


def settle(req: Request, hard: HardFit, evidence: list[PairEvidence], *, booked_bytes: int | None = None) -> Settled:
    """Stage 1's decision when it settles the request, else the evidence's, with the pairs to probe
    after an ``unknown`` (``pairs_needing_probe``). ``booked_bytes``: as for ``hard_fit_decision``."""
    decision = hard_fit_decision(req, hard, booked_bytes=booked_bytes)
    if decision is not None:
        return Settled(decision)
    evidence = bound_checked(req, evidence)
    decision = cache_decision(req, evidence)
    return Settled(decision, tuple(pairs_needing_probe(evidence)) if decision.verdict == "unknown" else ())


def resident_bound_pct(req: Request, resident: WorkloadProfile) -> float:
    """The slowdown bound of a resident: its class budget's, or its own SLO's when stricter."""
    bound = req.policy.budget_for(resident.workload_class).max_resident_slowdown_pct
    if resident.slo is not None and resident.slo.max_slowdown_pct is not None:
        return min(bound, resident.slo.max_slowdown_pct)
    return bound


def predicted_decision(req: Request, evidence: list[PairEvidence],
                       predictions: dict[str, PredictionRef]) -> Decision | None:
    """A decision from calibrated predictions alone, or ``None`` (probe). Only where the policy names
    the predicting estimator in ``decide_on_prediction``, the estimator is calibrated on this device
    type (at the resident's required confidence) and, for every pair without usable evidence, its
    calibrated interval lies wholly on one side of the resident's bound: all at or under it (and the
    other pairs' evidence is safe and confident) → admit; any pair wholly over it → reject. Anything
    else — an interval that straddles the bound, an uncalibrated or untrusted estimator, a resident
    without a profile — is ``None``."""
    trusted = set(req.policy.decide_on_prediction)
    missing = [e for e in evidence if e.outcome is None]
    if not trusted or not missing or any(e.key is None for e in missing):
        return None
    cached = [e for e in evidence if e.outcome is not None]
    profiles = {r.name: r.profile for r in req.snapshot.residents}
    clear: list[tuple[PairEvidence, PredictionRef, float]] = []
    for e in missing:
        p = predictions.get(e.resident)
        profile = profiles.get(e.resident)
        if (p is None or profile is None or p.estimator not in trusted or not p.calibrated
                or p.calibrated_interval_pct is None):
            return None
        bound = resident_bound_pct(req, profile)
        lo, hi = p.calibrated_interval_pct
        if lo > bound:
            used = _mark_decided(predictions, p)
            return Decision("reject", f"predicted: {p.estimator} puts resident {e.resident}'s slowdown at "
                            f"{lo:.1f}% to {hi:.1f}% (calibrated: {_cov(p)}), wholly above its bound {bound:g}%; no probe ran", "predicted",
                            confidence=p.confidence_level, evidence=tuple(evidence), predicted_slowdown_pct=(lo, hi),
                            predictions=used)
        if hi > bound:
            return None
        clear.append((e, p, bound))
    if any(e.outcome != "safe" or (e.confidence or 0.0) < req.policy.min_evidence_confidence for e in cached):
        return None
    used = _mark_decided(predictions, *(p for _, p, _ in clear))
    parts = "; ".join(f"{e.resident}: {p.estimator} {p.calibrated_interval_pct[0]:.1f}% to "  # type: ignore[index]
                      f"{p.calibrated_interval_pct[1]:.1f}% <= {bound:g}% (calibrated: {_cov(p)})"  # type: ignore[index]
                      for e, p, bound in clear)
    levels = [p.confidence_level for _, p, _ in clear if p.confidence_level is not None]
    levels += [e.confidence for e in cached if e.confidence is not None]
    lows = [p.calibrated_interval_pct[0] for _, p, _ in clear if p.calibrated_interval_pct]
    highs = [p.calibrated_interval_pct[1] for _, p, _ in clear if p.calibrated_interval_pct]
    return Decision("admit", f"predicted: calibrated predictions keep every unprobed resident within its bound "
                    f"({parts}); no probe ran", "predicted", confidence=min(levels) if levels else None,
                    evidence=tuple(evidence), predicted_slowdown_pct=(min(lows), max(highs)), predictions=used)


def _mark_decided(predictions: dict[str, PredictionRef], *deciding: PredictionRef) -> tuple[PredictionRef, ...]:
    """The predictions, those that decided marked ``used_as="decision"``."""
    ids = {id(p) for p in deciding}
    return tuple(p.model_copy(update={"used_as": "decision"}) if id(p) in ids else p for p in predictions.values())


def _cov(p: PredictionRef) -> str:
    """What a prediction's calibration rests on: its calibration's own words, which give the measured
    coverage over the outcomes checked next to the total (``measured coverage 0.950 over 80 checked of
    99 outcomes``); the bare numbers when there are none."""
    if p.calibration:
        return p.calibration
    cov = "unknown" if p.coverage is None else f"{p.coverage:.3f}"
    return f"measured coverage {cov} over {p.outcomes} outcomes, checked ones not recorded"


def probe_decision(req: Request, runs: list[ProbeRun], cached: list[PairEvidence]) -> Decision:
    """Decide from this admission's probes and the usable evidence of the other pairs."""
    probe_summary = None
    if runs:
        r = runs[-1].result
        probe_summary = ProbeSummary.from_result(r)
    outcomes = [run.result.outcome for run in runs]
    evidence = tuple(cached)
    worst = None
    for run in runs:
        if run.result.outcome == "unsafe":
            worst = run
    if worst is not None:
        r = worst.result
        why = r.judgment.reason if r.judgment else r.rollback_reason
        if r.judgment is not None and r.judgment.rule in ("slo", "guard"):
            # One on-window decided at once: its own numbers say what happened; there is no slowdown
            # estimate to set against the bound.
            what = "its latency SLO" if r.judgment.rule == "slo" else "the per-window slowdown guard"
            reason = (f"the canary pushed resident {worst.resident} past {what} in an on-window and was rolled "
                      f"back at once ({why})")
        else:
            reason = (f"the canary showed resident {worst.resident} slowing down beyond its bound "
                      f"({_pct(r.slowdown_estimate_pct)} vs {r.budget.max_resident_slowdown_pct:g}%): {why}")
        return Decision("reject", reason, "canary",
                        confidence=r.confidence, evidence=evidence, probe=probe_summary,
                        predicted_slowdown_pct=probe_summary.slowdown_interval_pct if probe_summary else None)
    busy = next((run for run in runs if run.result.abort_cause == "resident-over-slo"), None)
    if busy is not None:
        # Not now: the resident is already out of its SLO alone. Nothing may join it without making
        # that worse, and the pair itself was never tried, so nothing is learnt about it (docs/canary.md).
        return Decision("reject", f"not now: resident {busy.resident} already breaches its SLO alone, so no "
                        "candidate may join it; the candidate never ran and nothing was learnt about the pair "
                        f"({busy.result.rollback_reason}); ask again once the resident is back within its SLO",
                        "canary", confidence=None, evidence=evidence, probe=probe_summary)
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


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class ReservationPlan:
    """Where an admitted candidate's memory is booked: ``memory_bytes`` against ``device_id``, whose
    bookings together may hold at most ``capacity_bytes``; under MIG the new instance
    (``PROFILE@START``) is its own device."""

    device_id: str
    memory_bytes: int
    capacity_bytes: int
    mig_instance: str | None = None


def reservation_plan(req: Request, hard: HardFit) -> ReservationPlan:
    """The booking for an admitted candidate, from stage 1's numbers: the demand computed once in
    the fit, the memory bookings there share, and under MIG the placement of the new instance.

    Raises ``ValueError`` when stage 1 left one of them unknown (it then cannot have said *yes*)."""
    demand, capacity = hard.memory_demand_bytes, hard.bookable_memory_bytes
    if demand is None or capacity is None:
        raise ValueError("stage 1 left the demand or the bookable memory unknown: nothing can be booked")
    if req.regime.kind == "mig":
        if hard.mig_placement is None:
            raise ValueError("stage 1 found no free MIG placement: nothing can be booked")
        instance = hard.mig_placement.instance
        return ReservationPlan(f"{req.device_id}/mig:{instance}", demand, capacity, instance)
    return ReservationPlan(req.device_id, demand, capacity)


def make_certificate(req: Request, hard: HardFit, decision: Decision, now: dt.datetime) -> Certificate:
    """The certificate of ``decision``, issued at ``now``."""
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
        predictions=decision.predictions,
        caveats=hard.caveats,
        policy=req.policy.name,
        issued_at=now,
        simulated=snap.source == "simulated" or (decision.probe.simulated if decision.probe else False),
    )
