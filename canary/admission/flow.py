"""The two-stage flow: stage 1 (hard fit) → evidence → probe → record → reserve → certificate.

``fit`` never probes: stage 1 plus an evidence lookup. ``admit_async`` (``canary.probe`` and the
evidence store) runs both stages and commits evidence, reservation and certificate together. The
flow gathers inputs and writes results; what they mean is decided by the pure functions of
``canary.admission.decisions``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from canary._model import utcnow
from canary.admission.decisions import (
    Decision,
    PairEvidence,
    ProbeRun,
    hard_fit,
    make_certificate,
    predicted_decision,
    probe_decision,
    settle,
)
from canary.admission.request import Request
from canary.admission.store import (
    EvidenceAccess,
    book,
    feedback_evidence,
    history_entry,
    open_store_for_writing,
    probe_evidence,
    refit_mig,
)
from canary.certificate import Certificate, HardFit, PredictionRef, PriorRef
from canary.errors import InputError, ProbeError
from canary.profile import WorkloadProfile
from canary.snapshot import Resident

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

    from canary._model import PairKey
    from canary.estimate import Assessment, Estimator
    from canary.policy import RiskBudget
    from canary.probe.interfaces import Journal, Monitor
    from canary.probe.judge import SlowdownPrior
    from canary.probe.orchestrator import ProbeProgress

#: A progress display for running probes.
ProgressFn = Callable[["ProbeProgress"], None] | None
#: Where a flow says what it did on the side (a new store created, orphans recovered).
AnnounceFn = Callable[[str], object]
#: Wraps each probe's monitor (e.g. the service pacing simulated windows in wall time).
MonitorWrapper = Callable[["Monitor"], "Monitor"]
#: Asked first in the transaction that would record an admission's writes (the probe runner: is the
#: probe's queue row still not cancelled? — read under the row's lock); ``False``: nothing is written and
#: ``RecordingCancelled`` is raised.
BeforeRecord = Callable[["Session"], bool]
#: Called last in that transaction with the certificate (the probe runner closes the probe's queue row
#: ``done`` in it, so the evidence and the probe's end commit together).
AfterRecord = Callable[["Session", Certificate], None]


class RecordingCancelled(ProbeError):
    """``before_record`` said no: the admission's probes ran (and were rolled back) but nothing of them —
    evidence, booking, certificate — was written."""


#: Stage 1 of a request given the memory others booked and where that number came from: ``hard_fit``,
#: or a ``Stage1Memo`` in front of it.
Stage1 = Callable[..., HardFit]


class Stage1Memo:
    """``hard_fit`` by its exact inputs, for a process that is asked the same question over and over
    (the service: a scheduler sends the same few documents with every request).

    Stage 1 is a pure function of the snapshot, the candidate, the catalog spec, the policy, the regime,
    and the memory others booked with its source. The documents are frozen models, and the service's
    resolver hands out one object per distinct document content, so the same objects are the same
    inputs; an entry keeps its input objects alive, so no id in a key can be reused by another object
    while the entry exists. Booked memory is read from the store by every decision and is part of the
    key, so a booking or a release is seen at once. At most ``size`` entries; when full it starts over."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._entries: dict[tuple[object, ...], tuple[tuple[object, ...], HardFit]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __call__(self, req: Request, *, reserved_bytes_by_others: int | None,
                 reservations_source: str | None) -> HardFit:
        inputs = (req.snapshot, req.candidate, req.spec, req.policy)
        key = (*map(id, inputs), req.regime, req.mig_booked, reserved_bytes_by_others, reservations_source)
        hit = self._entries.get(key)
        if hit is not None:
            self.hits += 1
            return hit[1]
        self.misses += 1
        hard = hard_fit(req, reserved_bytes_by_others=reserved_bytes_by_others, reservations_source=reservations_source)
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[key] = (inputs, hard)
        return hard


NOT_CONSULTED = ("not counted: no evidence store consulted (--no-store), so memory other admissions booked "
                 "on this device is not subtracted")


def fit(req: Request, access: EvidenceAccess | None, now: dt.datetime, *, stage1: Stage1 = hard_fit) -> Certificate:
    """Stage 1 and an evidence lookup (``EvidenceAccess.read_and_settle``); never probes."""
    if access is not None:
        s = access.read_and_settle(req, now, stage1=stage1)
        return make_certificate(s.req, s.hard, s.settled.decision, now)
    # the caller chose not to read the store (gpu-fit --no-store): say so next to the number
    evidence = [PairEvidence(r.name, None, None, reason="no evidence store consulted") for r in req.snapshot.residents]
    hard = stage1(req, reserved_bytes_by_others=0, reservations_source=NOT_CONSULTED)
    return make_certificate(req, hard, settle(req, hard, evidence).decision, now)


def pairs_to_probe(req: Request, access: EvidenceAccess, now: dt.datetime, *,
                   evidence_as_of: dt.datetime | None = None) -> list[PairKey]:
    """The pair keys ``admit_async`` would probe for this request now; empty when stage 1 or the
    evidence decides without a probe (or a resident without a profile makes a probe pointless).
    The service uses it to coordinate probes (one per pair key) before deciding.
    ``evidence_as_of``: only evidence still fresh then counts (``EvidenceAccess.lookup``'s ``as_of``)."""
    return list(access.read_and_settle(req, now, as_of=evidence_as_of).settled.probe_keys)


async def admit_async(
    req: Request,
    *,
    db_url: str | None = None,
    probe: bool = True,
    progress: ProgressFn = None,
    announce: AnnounceFn | None = None,
    seed: int = 0,
    now: Callable[[], dt.datetime] | None = None,
    reserve: bool = True,
    engine: Engine | None = None,
    monitor_wrapper: MonitorWrapper | None = None,
    evidence_as_of: dt.datetime | None = None,
    stage1: Stage1 = hard_fit,
    log_history: bool = False,
    before_record: BeforeRecord | None = None,
    after_record: AfterRecord | None = None,
) -> Certificate:
    """Both stages: stage 1, evidence, a bounded probe for each pair without evidence, then evidence,
    reservation and certificate committed together (or nothing). ``now`` is a clock function.

    ``reserve=False`` is the evidence-warming form: probes are run and recorded, nothing is booked
    and no certificate is stored (the returned one says what an admission would have decided).
    ``monitor_wrapper`` lets a caller wrap each probe's monitor, e.g. the service pacing simulated
    windows in wall time. ``evidence_as_of`` (a time
    after now): evidence that expires before it counts as missing, so its pair is probed (the nightly
    warm job's "fresh until"); default: as of now. ``stage1``: ``hard_fit``, or a ``Stage1Memo``.
    ``log_history``: also record the admission in the admission history (``canary admit``; the service
    logs its own in batches), in the same transaction as its other writes. ``before_record`` /
    ``after_record``: asked first / told last in that transaction (``record_admission``); the probe
    runner uses them so that a cancelled probe records nothing."""
    clock = now or utcnow
    if probe:  # where a probe may connect and what it may run: checked before the store is touched
        from canary.probe.factory import check_request

        check_request(req)
    if probe and req.policy.estimators:  # an estimator nothing provides: refused before the store is touched
        from canary.estimate import load_estimators

        load_estimators(req.policy.estimators)
    if engine is None:
        engine = open_store_for_writing(db_url, announce=announce)
    access = EvidenceAccess.over(engine)
    started = clock()
    # MIG bookings, then the bookings and the evidence in one statement (one snapshot of the store)
    first = access.read_and_settle(req, started, stage1=stage1, as_of=evidence_as_of)
    req, hard, evidence, settled = first.req, first.hard, first.evidence, first.settled
    decision = settled.decision
    runs: list[ProbeRun] = []
    if probe and settled.probe_keys:
        predictions, predicted, notes = consult_estimators_noted(req, engine, evidence, seed=seed)
        if notes:  # what the estimators could not predict is on the certificate, never silently absent
            hard = hard.model_copy(update={"caveats": (*hard.caveats, *notes)})
        if predicted is not None:
            return record_admission(req, hard, predicted, [], engine=engine, reserve=reserve, finished=clock(),
                                    log_history=log_history, before_record=before_record,
                                    after_record=after_record)
        from evidence_store.journal import StoreJournal

        journal = StoreJournal(engine)
        await _recover_orphans(engine, clock(), announce)
        missing = [(r, e.key) for r, e in zip(req.snapshot.residents, evidence, strict=True)
                   if e.outcome is None and e.key is not None]
        for i, (resident, key) in enumerate(missing):
            run, prediction = await _probe_pair(req, resident, key, journal=journal, progress=progress,
                                                seed=seed + i, monitor_wrapper=monitor_wrapper,
                                                prediction=predictions.get(resident.name))
            runs.append(run)
            if prediction is not None:
                predictions[resident.name] = prediction
        cached = [e for e in evidence if e.outcome is not None]
        decision = dataclasses.replace(probe_decision(req, runs, cached), predictions=tuple(predictions.values()))
    return record_admission(req, hard, decision, runs, engine=engine, reserve=reserve, finished=clock(),
                            log_history=log_history, before_record=before_record, after_record=after_record)


def record_admission(req: Request, hard: HardFit, decision: Decision, runs: list[ProbeRun], *, engine: Engine,
                     reserve: bool, finished: dt.datetime, log_history: bool = False,
                     before_record: BeforeRecord | None = None,
                     after_record: AfterRecord | None = None) -> Certificate:
    """The certificate of ``decision``, issued at ``finished``, with what it writes committed together:
    the probes' evidence, the booking (an ``admit`` with ``reserve``) and the certificate itself (with
    ``reserve``, or when a probe ran: its evidence then always has the certificate that explains it,
    with the predictions made before it — what calibrates the estimators, warm runs included).
    Without probes and without ``reserve`` there is nothing to write, and no transaction (and neither
    hook is called). ``before_record(session)`` is asked before the first write: ``False`` writes nothing
    and raises ``RecordingCancelled``. ``after_record(session, certificate)`` runs after the last write,
    in the same transaction (an exception from it rolls everything back)."""
    from evidence_store.certificates import record_certificate
    from evidence_store.database import session_scope
    from evidence_store.errors import ReservationConflict
    from evidence_store.evidence import record_evidence

    if not runs and not reserve and not log_history:  # nothing to write: no write transaction at all
        return make_certificate(req, hard, decision, finished)
    with session_scope(engine) as session:
        if before_record is not None and not before_record(session):
            raise RecordingCancelled("cancelled before its result was recorded: nothing was recorded")
        recorded_ids: list[str] = []
        for run in runs:
            out = record_evidence(session, probe_evidence(req, run, finished))
            recorded_ids.append(out.id)
        if recorded_ids:
            decision = dataclasses.replace(decision, evidence=(*decision.evidence, PairEvidence(
                resident=",".join(run.resident for run in runs), key=None, outcome=decision.verdict,
                ids=tuple(recorded_ids), timestamp=finished, confidence=decision.confidence,
                sources=("canary",), reason="recorded by this admission's probe(s)")))
        if decision.verdict == "admit" and reserve and req.regime.kind == "mig":
            # under the device's lock: a placement booked since the decision's read is taken
            req, hard, decision = refit_mig(session, req, hard, decision, finished)
        if decision.verdict == "admit" and reserve:
            try:
                decision = dataclasses.replace(decision, reservations=(book(session, req, hard, finished),))
            except ReservationConflict as exc:
                what = "the MIG instance" if exc.resource == "mig" else "the memory"
                decision = Decision("reject", f"another admission booked {what} first: {exc}", "hard-fit",
                                    confidence=1.0, evidence=decision.evidence, probe=decision.probe)
        cert = make_certificate(req, hard, decision, finished)
        if reserve or recorded_ids:
            record_certificate(session, json.loads(cert.to_json()),
                                          [i for e in decision.evidence for i in e.ids])
        entry = history_entry(req, cert.verdict, finished) if log_history else None
        if entry is not None:
            from evidence_store.admission_log import log_admissions

            log_admissions(session, [entry])
        if after_record is not None:
            after_record(session, cert)
    return cert


async def _recover_orphans(engine: Engine, now: dt.datetime, announce: AnnounceFn | None) -> None:
    """Every probe start first cleans up probes whose owner died (expired leases); the kills wait in a
    worker thread with no store transaction open."""
    from canary.admission.recovery import recover_store_async

    report = await recover_store_async(engine, now=now)
    if report.aborted and announce is not None:
        announce(f"recovered {report.aborted} orphaned probe(s) whose lease had expired")


def consult_estimators(req: Request, engine: Engine | None, evidence: list[PairEvidence], *, seed: int = 0,
                       estimators: Sequence[Estimator] | None = None,
                       ) -> tuple[dict[str, PredictionRef], Decision | None]:
    """Hybrid admission's first step (docs/estimators.md), for a request whose settled decision asks
    for a probe: the policy's estimators predict each pair without usable evidence (``predict_pairs``),
    and calibrated predictions from estimators the policy trusts may decide alone
    (``predicted_decision``). Returns the predictions by resident name and that decision, or ``None``:
    probe, with the predictions as the probes' priors. A policy that names no estimator reads nothing
    and gets ``({}, None)``. Blocking (it reads the store); ``canary admit`` and the service
    (``canary.serve.decide``) both decide through it. ``estimators``: the policy's, loaded already
    (default: loaded here; ``InputError`` for a name nothing provides). ``consult_estimators_noted``
    also returns what the estimators could not predict, for the certificate's caveats."""
    predictions, decision, _ = consult_estimators_noted(req, engine, evidence, seed=seed, estimators=estimators)
    return predictions, decision


def consult_estimators_noted(req: Request, engine: Engine | None, evidence: list[PairEvidence], *, seed: int = 0,
                             estimators: Sequence[Estimator] | None = None,
                             ) -> tuple[dict[str, PredictionRef], Decision | None, tuple[str, ...]]:
    """``consult_estimators``, with the notes of ``predict_pairs_noted``: a consulted estimator that
    could not predict a resident is never silently absent from the certificate."""
    if not req.policy.estimators:
        return {}, None, ()
    predictions, notes = predict_pairs_noted(req, engine, evidence, seed=seed, estimators=estimators)
    return predictions, predicted_decision(req, evidence, predictions), notes


def predict_pairs(req: Request, engine: Engine | None, evidence: list[PairEvidence], *,
                  seed: int = 0, estimators: Sequence[Estimator] | None = None) -> dict[str, PredictionRef]:
    """The policy's estimators' best prediction for every profiled resident whose pair has no usable
    evidence, by resident name, each with its calibration on this device type at the resident's
    required confidence (``used_as="order-only"`` until a decision or a probe uses it). A resident no
    estimator can predict has no entry (its probe runs without a prior); ``predict_pairs_noted`` says
    which and why. ``estimators``: the policy's, loaded already; by default they are loaded here
    (``InputError`` when the policy names an estimator nothing provides)."""
    return predict_pairs_noted(req, engine, evidence, seed=seed, estimators=estimators)[0]


def predict_pairs_noted(req: Request, engine: Engine | None, evidence: list[PairEvidence], *,
                        seed: int = 0, estimators: Sequence[Estimator] | None = None,
                        ) -> tuple[dict[str, PredictionRef], tuple[str, ...]]:
    """``predict_pairs``, and a note for every consulted estimator that could not predict a resident
    (with its reason): unknown is an answer, and the certificate carries it as a caveat."""
    from canary.estimate import Assessment, EstimateQuery, assess, load_estimators
    from canary.estimate.store import StoreReader, recorded_outcomes

    if estimators is None:
        estimators = load_estimators(req.policy.estimators)
    reader = StoreReader(engine)
    outcomes = recorded_outcomes(engine, reader, device_types=(req.spec.name,))
    out: dict[str, PredictionRef] = {}
    notes: list[str] = []
    for resident, e in zip(req.snapshot.residents, evidence, strict=True):
        if e.outcome is not None or resident.profile is None:
            continue
        level = req.policy.budget_for(resident.profile.workload_class).required_confidence
        query = EstimateQuery(candidate=req.candidate, resident=resident, spec=req.spec, regime=req.regime,
                              residents=req.snapshot.residents, reader=reader, seed=seed)
        found = assess(query, estimators, outcomes, confidence=level, min_outcomes=req.policy.min_calibration_outcomes,
                       key_digest=e.key.digest() if e.key is not None else None)
        if isinstance(found, Assessment):
            out[resident.name] = prediction_ref(found, level)
            notes += [f"estimator {m.estimator} could not predict resident {resident.name}: {m.reason}"
                      for m in found.missed]
        else:
            names = ", ".join(est.name for est in estimators)
            notes.append(f"no consulted estimator ({names}) could predict resident {resident.name}, so its probe "
                         f"ran without a prior: {found.reason}")
    return out, tuple(notes)


def prediction_ref(a: Assessment, level: float) -> PredictionRef:
    """The certificate's form of an assessment."""
    est, cal = a.estimate, a.calibration
    return PredictionRef(
        resident=a.resident, estimator=est.estimator, group=est.group, key_digest=a.key_digest, lo_pct=est.lo_pct,
        hi_pct=est.hi_pct,
        point_pct=est.point_pct, calibrated_interval_pct=a.calibrated_interval, calibrated=cal.calibrated,
        confidence_level=level, coverage=cal.coverage, outcomes=cal.outcomes, checked=cal.checked,
        calibration=cal.reason,
        inputs=est.inputs, detail=est.detail)


def _prior_of(prediction: PredictionRef | None) -> tuple[SlowdownPrior | None, PriorRef | None]:
    """The judge prior of a calibrated prediction (``SlowdownPrior``) and its certificate form; an
    uncalibrated prediction gives none (it may order work, never shape a decision)."""
    if prediction is None or not prediction.calibrated or prediction.calibrated_interval_pct is None:
        return None, None
    from canary.estimate import prior_from_interval

    lo, hi = prediction.calibrated_interval_pct
    level = prediction.confidence_level or 0.95
    prior = prior_from_interval(lo, hi, level)
    return prior, PriorRef(mean_pct=prior.mean_pct, sd_pct=prior.sd_pct, estimator=prediction.estimator, applied=True,
                           note=f"from {prediction.estimator}'s calibrated interval {lo:.1f}% to {hi:.1f}% at {level:g}")


async def _probe_pair(req: Request, resident: Resident, key: PairKey, *, journal: Journal, progress: ProgressFn,
                      seed: int, monitor_wrapper: MonitorWrapper | None = None,
                      prediction: PredictionRef | None = None) -> tuple[ProbeRun, PredictionRef | None]:
    """One bounded probe of (``resident``, the candidate), journaled; the sim executor/monitor run on a
    simulated device built by the sim adapters (``canary.probe.simlink``). A calibrated ``prediction``
    becomes the judge's prior where the probe takes one; the prediction comes back saying so."""
    import uuid

    from canary.probe import make_executor, make_monitor
    from canary.probe.orchestrator import run_probe
    from canary.probe.plan import TimeStructure

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
        from canary.probe.simlink import simulated_device

        sim_device, handle = simulated_device(req.snapshot, req.spec, seed=seed, regime=req.regime,
                                              params=req.sim_params, resident=resident.name)
    executor = make_executor(req.candidate, policy=req.policy, sim_device=sim_device)
    monitor = make_monitor(resident.profile, policy=req.policy, sim_device=sim_device, sim_resident_handle=handle)
    if monitor_wrapper is not None:
        monitor = monitor_wrapper(monitor)
    slo = resident.profile.slo.latency_p99_ms if resident.profile.slo else None
    prior, prior_ref = _prior_of(prediction)
    if prediction is not None:
        prediction = prediction.model_copy(update={"used_as": "prior" if prior_ref is not None else "order-only",
                                                   "prior": prior_ref})

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
        structure=TimeStructure.of(req.candidate, resident.profile),
        prior=prior,
    )
    return ProbeRun(resident.name, key, result), prediction


def _fit_budget(budget: RiskBudget, resident: WorkloadProfile) -> RiskBudget:
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
    """The stricter of the policy's bound and the resident's own SLO bound (``resident_bound_pct``
    for the class budget's bound)."""
    if resident.slo is not None and resident.slo.max_slowdown_pct is not None:
        return min(budget_pct, resident.slo.max_slowdown_pct)
    return budget_pct


def admit(
    req: Request,
    *,
    db_url: str | None = None,
    probe: bool = True,
    progress: ProgressFn = None,
    announce: AnnounceFn | None = None,
    seed: int = 0,
    now: Callable[[], dt.datetime] | None = None,
    reserve: bool = True,
    engine: Engine | None = None,
    monitor_wrapper: MonitorWrapper | None = None,
    evidence_as_of: dt.datetime | None = None,
    log_history: bool = False,
) -> Certificate:
    """``admit_async`` from synchronous code."""
    import anyio

    async def _go() -> Certificate:
        return await admit_async(req, db_url=db_url, probe=probe, progress=progress, announce=announce, seed=seed,
                                 now=now, reserve=reserve, engine=engine, monitor_wrapper=monitor_wrapper,
                                 evidence_as_of=evidence_as_of, log_history=log_history)

    return anyio.run(_go)


def record_feedback(
    req: Request,
    *,
    resident_name: str,
    db_url: str | None,
    observed_slowdown_pct: float | None,
    now: dt.datetime,
    engine: Engine | None = None,
) -> str:
    """Record a production SLO violation for an admitted pair; it outweighs earlier passes.
    ``engine``: the caller's open store (the service's), instead of opening one from ``db_url``."""
    from evidence_store.database import session_scope
    from evidence_store.evidence import record_evidence

    resident = next((r for r in req.snapshot.residents if r.name == resident_name), None)
    if resident is None:
        names = ", ".join(r.name for r in req.snapshot.residents) or "none"
        raise InputError(f"no resident named {resident_name!r} (residents: {names})", field="--resident-name")
    rec = feedback_evidence(req, resident, observed_slowdown_pct=observed_slowdown_pct, now=now)
    if engine is None:
        engine = open_store_for_writing(db_url)
    with session_scope(engine) as session:
        out = record_evidence(session, rec)
    return str(out.id)
