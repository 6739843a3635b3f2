"""``canary warm PLAN`` and ``canary revalidate --driver V``.

Warm: for every planned pair that fits and lacks fresh evidence, run a bounded probe and record the
result: its evidence and the certificate that explains it (with the estimators' predictions made
before the probe, which calibrate them), never a reservation. Pairs start in order of value of information
(``canary.jobs.plan.probe_order``): predicted intervals that straddle the bound first. The whole job runs inside one global time budget; pairs
with fresh evidence are skipped, so a job that ran out of budget resumes where it stopped when run
again. Probes run through an ``anyio.CapacityLimiter`` (the plan's ``concurrency``).

Revalidate: evidence recorded under another driver becomes stale (never deleted), the plan's pairs
are probed again under the new driver, and a drift report puts old and new slowdowns side by side.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from canary.admission import Request, admit_async, load_request, open_store_for_writing
from canary.errors import CanaryError
from canary.jobs.plan import PlannedPair, WarmPlan, probe_order

PairStatus = Literal["probed", "fresh", "does-not-fit", "unknown-fit", "skipped-budget", "error",
                     "no-probe-needed",  # stage 1 or the policy decided without evidence (e.g. a MIG slice)
                     "out-of-scope",  # revalidate --device-type: the pair runs on another device type
                     "duplicate",  # the same pair as an earlier one of the plan (answered there)
                     "predicted",  # decided by a calibrated prediction the pair's policy trusts; no probe
                     "queued",  # handed to the node agent that owns the device (warm --from-history)
                     "leased",  # fleet: another process holds the pair's lease; not answered yet
                     "done-in-run", "failed-in-run"]  # fleet: finished earlier in the run (another node or run)


@dataclass(frozen=True)
class PairOutcome:
    index: int
    label: str
    status: PairStatus
    detail: str
    outcome: str | None = None
    slowdown_pct: float | None = None
    interval_pct: tuple[float, float] | None = None
    old_driver: str | None = None
    old_slowdown_pct: float | None = None
    old_interval_pct: tuple[float, float] | None = None
    old_outcome: str | None = None
    expires_at: str | None = None
    """``fresh``: when the soonest-expiring of the records that cover the pair expires (ISO 8601, UTC)."""


@dataclass
class WarmReport:
    plan: str
    budget_s: float
    wall_s: float = 0.0
    stale_marked: int = 0
    pairs: list[PairOutcome] = field(default_factory=list)
    queue: dict[str, int] | None = None
    """Fleet runs: the run's items by state after this node stopped (other nodes' work included)."""

    def count(self, status: PairStatus) -> int:
        return sum(1 for p in self.pairs if p.status == status)


def _label(req: Request) -> str:
    residents = "+".join(r.name for r in req.snapshot.residents) or "(idle)"
    return f"{req.candidate.name} beside {residents} on {req.spec.name} ({req.regime})"


def pair_label(pair: PlannedPair, driver: str | None = None) -> str:
    """The pair as every row of a report names it: candidate beside residents on device (regime), as
    ``_label`` gives it once the pair loads; a pair that cannot be loaded (its error is the row's
    reason) is named from its files the same way, so two pairs on one device are never told apart by
    the candidate alone."""
    from pathlib import Path

    try:
        return _label(_with_driver(load_pair(pair), driver))
    except Exception:  # the row's own detail says why it failed; the label still names the pair
        residents = "+".join(Path(r).stem for r in pair.residents) or "(residents of the device)"
        return f"{Path(pair.candidate).stem} beside {residents} on {pair.device}"


def _with_driver(req: Request, driver: str | None) -> Request:
    if driver is None or req.snapshot.driver_version == driver:
        return req
    if req.device.kind not in ("catalog", "file"):
        from canary.errors import InputError

        raise InputError(f"{req.device.ref} runs driver {req.snapshot.driver_version}, not {driver}: "
                         "revalidate on the upgraded device", field="--driver")
    from canary.admission import build_request
    from canary.backends import ResolvedDevice

    snap = req.snapshot.model_copy(update={"driver_version": driver})
    device = ResolvedDevice(snapshot=snap, spec=req.spec, ref=req.device.ref, kind=req.device.kind)
    return build_request(device, req.candidate, req.policy, regime=str(req.regime))


def load_pair(pair: PlannedPair, *, check_probe: bool = False) -> Request:
    """The pair's admission request; with ``check_probe``, also the URLs and commands its probe would
    use, against its policy. Raises ``InputError`` for a bad file or a refused URL or command."""
    req = load_request(pair.device, pair.candidate, resident_paths=pair.residents, regime=pair.regime,
                       policy_ref=pair.policy)
    if check_probe:
        from canary.probe.factory import check_request

        check_request(req, candidate_file=pair.candidate, resident_files=_resident_files(req, pair),
                      snapshot_file=pair.device)
    return req


def _resident_files(req: Request, pair: PlannedPair) -> dict[str, str]:
    """Each resident added from a file of its own (the plan's ``residents``), by the name it got: a
    refused URL in one of them names that file, not the plan's device."""
    added = req.snapshot.residents[len(req.snapshot.residents) - len(pair.residents):] if pair.residents else ()
    return {r.name: path for r, path in zip(added, pair.residents, strict=True)}


async def _warm_one(index: int, pair: PlannedPair, *, engine: Any, seed: int, driver: str | None,
                    deadline: float, fresh_until: dt.datetime | None = None,
                    on_start: Callable[[int, str, Request], None] | None = None) -> PairOutcome:
    req = _with_driver(load_pair(pair), driver)
    label = _label(req)
    if time.monotonic() >= deadline:
        return PairOutcome(index, label, "skipped-budget", "the job's time budget ran out before this pair")
    attempt_seed = seed + index + ATTEMPT_SEED_STRIDE * _earlier_attempts(engine, req) + driver_seed_offset(driver)
    if on_start is not None:
        on_start(index, label, req)
    cert = await admit_async(req, engine=engine, reserve=False, seed=attempt_seed, evidence_as_of=fresh_until)
    return with_evidence_facts(classify_certificate(index, label, cert), cert, engine)


#: How far apart the simulated seeds of a pair's successive attempts are (beyond any plan's indices).
ATTEMPT_SEED_STRIDE = 100_003


def driver_seed_offset(driver: str | None) -> int:
    """What ``canary revalidate --driver V`` adds to a simulated re-probe's seed: a stable number drawn
    from ``V`` (CRC-32, a multiple of the attempt stride apart from 0), so the first re-probe under
    ``V`` simulates another run than the old driver's first attempt instead of replaying it (the same
    seed gave the same simulated slowdown, shown as old and new alike). 0 without a driver override
    (``canary warm``): its seeds are as documented."""
    import zlib

    if driver is None:
        return 0
    return ATTEMPT_SEED_STRIDE * (1 + zlib.crc32(driver.encode()) % 1_000_003)


def with_evidence_facts(outcome: PairOutcome, cert: Any, engine: Any) -> PairOutcome:
    """A ``fresh`` pair's row with what its evidence says: the largest resident slowdown the records
    that decided it measured, and when the soonest of them expires (a nightly job with
    ``--expiring-within`` re-probes it before then). Other rows are returned as they are."""
    if outcome.status != "fresh" or cert.evidence is None or not cert.evidence.ids:
        return outcome
    from sqlalchemy import select

    from evidence_store.database import session_scope
    from evidence_store.models import Evidence
    from evidence_store.schemas import to_utc

    with session_scope(engine, read_only=True) as session:
        rows = list(session.scalars(select(Evidence).where(Evidence.id.in_(list(cert.evidence.ids)))).all())
    if not rows:
        return outcome
    slowdowns = [r.resident_slowdown_pct for r in rows if r.resident_slowdown_pct is not None]
    expires = min(to_utc(r.expires_at) for r in rows)
    return dataclasses.replace(outcome, slowdown_pct=max(slowdowns) if slowdowns else None,
                               expires_at=expires.isoformat(),
                               detail=f"{outcome.detail}; it expires {expires:%Y-%m-%d %H:%M}Z")

def _earlier_attempts(engine: Any, req: Request) -> int:
    """How many probe records the pair's keys already have under the request's driver (inconclusive
    ones included): a rerun probes a simulated device with another seed, so it adds information
    instead of replaying the same simulated result. 0 for a pair never probed (the job's ``--seed``
    plus the pair's index, as before)."""
    from canary.admission import pair_key
    from evidence_store.database import session_scope
    from evidence_store.evidence import list_evidence

    count = 0
    with session_scope(engine, read_only=True) as session:
        for resident in req.snapshot.residents:
            key = pair_key(req, resident)
            if key is None:
                continue
            rows = list_evidence(session, pair=f"{key.resident_version}:{key.candidate_version}",
                                 device_type=key.device_type)
            count += sum(1 for r in rows if r.key == key and r.driver_version == req.snapshot.driver_version)
    return count


def classify_certificate(index: int, label: str, cert: Any) -> PairOutcome:
    """The pair's status from what decided its certificate."""
    if cert.hard_fit == "no":
        return PairOutcome(index, label, "does-not-fit", f"{cert.limiting_resource}: {cert.reason}")
    if cert.hard_fit == "unknown":
        return PairOutcome(index, label, "unknown-fit", cert.reason)
    probe = cert.probe
    if cert.decided_by == "canary" and probe is not None:
        return PairOutcome(index, label, "probed", cert.reason, outcome=probe.outcome,
                           slowdown_pct=probe.slowdown_estimate_pct, interval_pct=probe.slowdown_interval_pct)
    if cert.decided_by == "cache" and cert.verdict in ("admit", "reject"):
        return PairOutcome(index, label, "fresh", "fresh evidence already covers every resident",
                           outcome=cert.verdict)
    if cert.decided_by == "predicted":
        return PairOutcome(index, label, "predicted", cert.reason, outcome=cert.verdict,
                           interval_pct=cert.predicted_slowdown_range)
    # Stage 1 or the policy decided without evidence (a hard-isolated MIG slice, no resident to
    # disturb, a resident without a profile no probe could measure): nothing to probe, nothing fresh.
    return PairOutcome(index, label, "no-probe-needed", cert.reason, outcome=cert.verdict)


def _duplicates(plan: WarmPlan) -> dict[int, PairOutcome]:
    """Each plan index that repeats an earlier pair (``_identity``: h100 and h100-sxm are one
    device), with its outcome: a duplicate of the first, answered there."""
    first_of: dict[tuple[Any, ...], int] = {}
    out: dict[int, PairOutcome] = {}
    for i, pair in enumerate(plan.pairs):
        identity = _identity(pair)
        if identity is None:
            continue
        if identity in first_of:
            out[i] = PairOutcome(i, str(identity[0]), "duplicate",
                                 f"the same pair as pair {first_of[identity] + 1}: answered there")
        else:
            first_of[identity] = i
    return out


def _identity(pair: PlannedPair) -> tuple[Any, ...] | None:
    """What makes two planned pairs the same pair once names are resolved (a device's catalog alias,
    the regime it follows): its label first, then the device, the files and the policy. ``None`` when
    the pair cannot be loaded (it is reported as it fails)."""
    try:
        req = load_pair(pair)
    except Exception:  # reported by _triage, with the reason
        return None
    device = req.spec.name if req.device.kind == "catalog" else req.device.ref
    return (_label(req), req.device.kind, device, pair.candidate, tuple(sorted(pair.residents)), pair.policy)


def _triage(index: int, pair: PlannedPair, *, engine: Any, driver: str | None,
            device_type: str | None = None, fresh_until: dt.datetime | None = None) -> PairOutcome | None:
    """What the pair gets without a probe, read from stage 1 and the store before the budget is
    spent on probes: does not fit, fresh evidence, nothing to probe, its device cannot be reached
    (``error``), or (``device_type``) it runs on another device type than the one being revalidated.
    ``None``: the pair needs a probe."""
    try:
        req = load_pair(pair)
        if device_type is not None and req.spec.name != device_type:
            return PairOutcome(index, _label(req), "out-of-scope",
                               f"runs on {req.spec.name}, not {device_type}: not re-probed"
                               + (f" under driver {driver}" if driver else "")
                               + " (its evidence was not marked stale either)")
        req = _with_driver(req, driver)
        return answer_without_probe(index, _label(req), req, engine=engine, as_of=fresh_until)
    except Exception as exc:  # one failed pair is reported, the job goes on
        return PairOutcome(index, pair_label(pair, driver), "error", _reason(exc))


def answer_without_probe(index: int, label: str, req: Request, *, engine: Any,
                         as_of: dt.datetime | None = None) -> PairOutcome | None:
    """The pair's outcome when stage 1 and the store settle it without a probe (what ``admit_async``
    would decide before probing: same read, same settlement); ``None`` when it needs a probe.
    ``as_of``: only evidence still fresh then counts."""
    from canary.admission import EvidenceAccess, make_certificate

    now = _utcnow()
    settlement = EvidenceAccess.over(engine).read_and_settle(req, now, as_of=as_of)
    if settlement.settled.probe_keys:
        return None
    cert = make_certificate(settlement.req, settlement.hard, settlement.settled.decision, now)
    return with_evidence_facts(classify_certificate(index, label, cert), cert, engine)


#: How often a fleet node with nothing left to claim looks again while other nodes hold leases.
LEASE_POLL_S = 0.5


async def warm_fleet_async(plan: WarmPlan, *, run_id: str, db_url: str | None, seed: int = 0,
                           driver: str | None = None, lease_s: float = 900.0, fresh_until: dt.datetime | None = None,
                           progress: Callable[[PairOutcome, int], None] | None = None,
                           on_start: Callable[[int, str, Request], None] | None = None) -> WarmReport:
    """One node's share of a fleet warm run: every node enqueues the same plan under the same
    ``run_id`` and leases pairs from the store until none is left, so each pair is probed once per
    run however many nodes work on it. The report lists the pairs this node ran."""
    import socket

    import anyio

    from evidence_store import warm_queue
    from evidence_store.database import session_scope

    engine = open_store_for_writing(db_url)
    report = WarmReport(plan=plan.name, budget_s=plan.budget_s)
    started = time.monotonic()
    deadline = started + plan.budget_s
    pairs_json = [p.model_dump(mode="json") for p in plan.pairs]
    with session_scope(engine) as session:
        # A run is one plan: a node whose plan differs from the run's is refused before it adds or
        # claims anything (nodes used to index their own plan by the run's queue positions).
        warm_queue.check_same_pairs(session, run_id=run_id, pairs=pairs_json)
        warm_queue.enqueue(session, run_id=run_id, pairs=pairs_json, now=_utcnow())
    results: list[PairOutcome] = []
    duplicate_of = _duplicates(plan)  # the run's plan is this plan (check_same_pairs)

    async def worker(n: int) -> None:
        owner = f"{socket.gethostname()}:{os.getpid()}:{n}"
        while time.monotonic() < deadline:
            with session_scope(engine) as session:
                item = warm_queue.claim(session, run_id=run_id, owner=owner, lease_s=lease_s, now=_utcnow())
            if item is None:
                with session_scope(engine, read_only=True) as session:
                    others_working = warm_queue.run_status(session, run_id).get("leased", 0) > 0
                if not others_working:
                    return
                # Other processes still hold pairs of the run: wait (inside the budget) for them to
                # finish, or for a dead one's lease to expire and the pair to be claimable here, so
                # that this node's report and exit code are the run's, not a snapshot of it mid-way.
                await anyio.sleep(min(LEASE_POLL_S, max(0.0, deadline - time.monotonic())))
                continue
            try:
                # The queue row carries the pair itself; this node's plan is not indexed by position.
                pair = PlannedPair.model_validate_json(json.dumps(item.pair_json))
            except ValueError as exc:
                outcome = PairOutcome(item.position, f"queue item {item.id}", "error", f"not a planned pair: {exc}")
                with session_scope(engine) as session:
                    warm_queue.finish(session, item, state="failed", result_json=dict(outcome.__dict__),
                                      now=_utcnow())
                results.append(outcome)
                continue
            try:
                if item.position in duplicate_of:  # probed once per run, under the first one's lease
                    outcome = duplicate_of[item.position]
                else:
                    outcome = await _warm_one(item.position, pair, engine=engine, seed=seed, driver=driver,
                                              deadline=deadline, fresh_until=fresh_until, on_start=on_start)
                final: warm_queue.FinalState = "done"
            except Exception as exc:  # one failed pair is reported, the run goes on
                outcome = PairOutcome(item.position, pair_label(pair, driver), "error", _reason(exc))
                final = "failed"
            except BaseException:
                # Cancelled (SIGINT, the budget's deadline): the pair was not answered. Hand it back to
                # the run at once, shielded like the probe's rollback, so a rerun or another node claims
                # it now rather than when the lease expires.
                with anyio.move_on_after(10, shield=True):
                    _release(engine, item)
                raise
            with session_scope(engine) as session:
                warm_queue.finish(session, item, state=final, result_json=dict(outcome.__dict__), now=_utcnow())
            results.append(outcome)
            if progress is not None:
                progress(outcome, len(plan.pairs))

    with anyio.move_on_after(plan.budget_s):
        async with anyio.create_task_group() as tg:
            for n in range(plan.concurrency):
                tg.start_soon(worker, n)
    with session_scope(engine, read_only=True) as session:
        report.queue = warm_queue.run_status(session, run_id)
        earlier = _rest_of_run(session, run_id, {o.index for o in results})
    report.pairs = sorted(results + earlier, key=lambda o: o.index)
    report.wall_s = time.monotonic() - started
    return report


def _release(engine: Any, item: Any) -> None:
    """Put a pair this node leased back in the queue (``queued``, no owner), if it still holds it.
    Idempotent; a store error here leaves the lease to expire, as a dead node's does."""
    from evidence_store import warm_queue
    from evidence_store.database import session_scope

    try:
        with session_scope(engine) as session:
            warm_queue.release(session, item, now=_utcnow())
    except Exception:  # cleanup during a cancellation must not replace it
        return


def _rest_of_run(session: Any, run_id: str, ran_here: set[int]) -> list[PairOutcome]:
    """Every pair of the run this node did not answer itself, so the report lists the whole run: what
    another node (or an earlier start of this job) recorded for a pair it finished (``done-in-run``,
    ``failed-in-run``); a pair another process holds leased now (``leased``: holder and expiry); a pair
    nobody reached before this node's budget ran out (``skipped-budget``)."""
    from sqlalchemy import select

    from evidence_store.models import WarmQueue

    rows = session.scalars(select(WarmQueue).where(WarmQueue.run_id == run_id).order_by(WarmQueue.position))
    out = []
    for row in rows:
        if row.position in ran_here:
            continue
        label = _queued_label(row.pair_json)
        if row.state == "leased":
            expires = "unknown" if row.lease_expires_at is None else f"{row.lease_expires_at:%Y-%m-%d %H:%M:%S}Z"
            out.append(PairOutcome(row.position, label, "leased",
                                   f"leased by {row.owner} until {expires} in run {run_id} (attempt "
                                   f"{row.attempts}): not answered yet; run the job again after that node "
                                   "finishes or its lease expires"))
            continue
        if row.state == "queued":
            out.append(PairOutcome(row.position, label, "skipped-budget",
                                   "still queued in the run when this node's time budget ran out"))
            continue
        result = dict(row.result_json or {})
        status: PairStatus = "done-in-run" if row.state == "done" else "failed-in-run"
        slowdown = result.get("slowdown_pct")
        out.append(PairOutcome(
            row.position, str(result.get("label") or label), status,
            f"{result.get('status', row.state)} by {row.owner} at {row.updated_at:%Y-%m-%d %H:%M:%S}Z in run {run_id}"
            + (f": {result['detail']}" if result.get("detail") else ""),
            outcome=result.get("outcome"), slowdown_pct=slowdown if isinstance(slowdown, int | float) else None))
    return out


def _queued_label(pair_json: Any) -> str:
    """A queue row's pair named as every row names it (``pair_label``); a row that is not a planned
    pair at all: its candidate on its device, as stored."""
    try:
        return pair_label(PlannedPair.model_validate_json(json.dumps(dict(pair_json or {}))))
    except ValueError:
        pair = dict(pair_json or {})
        return f"{pair.get('candidate', '?')} on {pair.get('device', '?')}"


def _reason(exc: Exception) -> str:
    """Why a pair failed: canary's own message, or the exception's type and message for anything else."""
    return str(exc) if isinstance(exc, CanaryError) else f"{type(exc).__name__}: {exc}"


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def warm_async(plan: WarmPlan, *, db_url: str | None, seed: int = 0, driver: str | None = None,
                     device_type: str | None = None, fresh_until: dt.datetime | None = None,
                     progress: Callable[[PairOutcome, int], None] | None = None,
                     on_start: Callable[[int, str, Request], None] | None = None) -> WarmReport:
    """Warm the plan's pairs. ``driver``: probe simulated devices as if they ran it (revalidate);
    ``device_type``: only pairs on that device type are probed, the others are ``out-of-scope``;
    ``fresh_until``: evidence that expires before then is not fresh (``--expiring-within``): its
    pairs are probed again. ``on_start`` is called as a pair's probe starts."""
    import anyio

    engine = open_store_for_writing(db_url)
    report = WarmReport(plan=plan.name, budget_s=plan.budget_s)
    started = time.monotonic()
    deadline = started + plan.budget_s
    limiter = anyio.CapacityLimiter(plan.concurrency)
    results: dict[int, PairOutcome] = {}

    async def run(index: int, pair: PlannedPair) -> None:
        async with limiter:
            try:
                outcome = await _warm_one(index, pair, engine=engine, seed=seed, driver=driver, deadline=deadline,
                                          fresh_until=fresh_until, on_start=on_start)
            except Exception as exc:  # one failed pair is reported, the job goes on (Kayenta's error label)
                outcome = PairOutcome(index, pair_label(pair, driver), "error", _reason(exc))
            results[index] = outcome
            if progress is not None:
                progress(outcome, len(plan.pairs))

    # Pairs that need no probe are answered first, from stage 1 and the store: they cost no probe
    # time, so a budget that runs out never leaves a fresh pair reported as missing.
    to_probe: list[int] = []
    duplicate_of = _duplicates(plan)
    for i, pair in enumerate(plan.pairs):
        if i in duplicate_of:  # the same pair again: probed once, not twice at once
            answered: PairOutcome | None = duplicate_of[i]
        else:
            answered = _triage(i, pair, engine=engine, driver=driver, device_type=device_type,
                               fresh_until=fresh_until)
        if answered is None:
            to_probe.append(i)
            continue
        results[i] = answered
        if progress is not None:
            progress(answered, len(plan.pairs))
    values = {i: pair_value(plan.pairs[i], engine) for i in to_probe}
    order = [to_probe[k] for k in probe_order([values[i] for i in to_probe])]
    remaining_s = max(0.0, deadline - time.monotonic())
    with anyio.move_on_after(remaining_s) as scope:
        async with anyio.create_task_group() as tg:
            for i in order:
                tg.start_soon(run, i, plan.pairs[i])
    for i, pair in enumerate(plan.pairs):
        if i not in results:
            why = "cancelled when the job's time budget ran out" if scope.cancelled_caught else "not run"
            results[i] = PairOutcome(i, pair_label(pair, driver), "skipped-budget", why)
    report.pairs = [results[i] for i in sorted(results)]
    report.wall_s = time.monotonic() - started
    return report


#: Estimators that order a plan whose policy consults none (ordering never decides anything).
ORDERING_ESTIMATORS = ("transfer", "analytical")


def pair_value(pair: PlannedPair, engine: Any) -> float:
    """The value of information of probing ``pair`` now: the largest over its residents without usable
    evidence of ``canary.estimate.value_of_information`` (calibrated interval where there is one, else
    the raw one; 1 where nothing predicts it). The policy's estimators predict, or
    ``ORDERING_ESTIMATORS`` when it names none. A pair that cannot be loaded or predicted ranks first,
    so its error or its probe comes early."""
    from canary.admission.decisions import resident_bound_pct
    from canary.admission.flow import predict_pairs
    from canary.admission.store import EvidenceAccess
    from canary.estimate import value_of_information

    try:
        req = load_pair(pair)
        if not req.policy.estimators:
            req = dataclasses.replace(req, policy=req.policy.model_copy(update={"estimators": ORDERING_ESTIMATORS}))
        evidence = [EvidenceAccess.over(engine).lookup(req, r, _utcnow()) for r in req.snapshot.residents]
        predictions = predict_pairs(req, engine, evidence)
    except CanaryError:
        return 1.0
    values = []
    for resident, e in zip(req.snapshot.residents, evidence, strict=True):
        if e.outcome is not None or resident.profile is None:
            continue
        p = predictions.get(resident.name)
        interval = None if p is None else (p.calibrated_interval_pct or (p.lo_pct, p.hi_pct))
        values.append(value_of_information(interval, resident_bound_pct(req, resident.profile)))
    return max(values, default=0.0)


def attach_old_evidence(report: WarmReport, plan: WarmPlan, db_url: str | None, driver: str) -> None:
    """For the drift report: the newest stale record of each probed pair (recorded under another driver)."""
    from canary.admission import pair_key
    from evidence_store.database import session_scope
    from evidence_store.evidence import list_evidence

    engine = open_store_for_writing(db_url)
    updated = []
    with session_scope(engine, read_only=True) as session:
        for outcome in report.pairs:
            if outcome.status in ("error", "out-of-scope"):  # not probed now: nothing to compare
                updated.append(outcome)
                continue
            pair = plan.pairs[outcome.index]
            try:
                req = _with_driver(load_pair(pair), driver)
            except CanaryError:  # the device went away since the pair ran: no old evidence to show
                updated.append(outcome)
                continue
            old = None
            for resident in req.snapshot.residents:
                key = pair_key(req, resident)
                if key is None:
                    continue
                rows = list_evidence(session, pair=f"{key.resident_version}:{key.candidate_version}",
                                                device_type=key.device_type, status="stale")
                rows = [r for r in rows if r.key == key and r.outcome in ("safe", "unsafe")]
                if rows:
                    old = rows[0]
                    break
            if old is None:
                updated.append(outcome)
                continue
            interval = None
            if old.resident_slowdown_low_pct is not None and old.resident_slowdown_high_pct is not None:
                interval = (old.resident_slowdown_low_pct, old.resident_slowdown_high_pct)
            updated.append(PairOutcome(
                **{**outcome.__dict__, "old_driver": old.driver_version,
                   "old_slowdown_pct": None if old.resident_slowdown_pct is None else old.resident_slowdown_pct,
                   "old_interval_pct": interval, "old_outcome": old.outcome}))
    report.pairs = updated



@dataclass(frozen=True)
class StaleGroup:
    """Current evidence of one device type recorded under one other driver: what revalidation marks."""

    device_type: str
    old_driver: str | None
    records: int


def stale_preview(db_url: str | None, *, driver: str, device_type: str | None) -> list[StaleGroup]:
    """What ``mark_stale`` would mark, by device type and old driver; reads only (a store that does not
    exist yet has nothing to mark and is not created)."""
    from canary.admission.store import store_exists, store_url

    if not store_exists(store_url(db_url)):
        return []
    from evidence_store.database import session_scope

    engine = open_store_for_writing(db_url)
    with session_scope(engine, read_only=True) as session:
        return _stale_groups(session, driver=driver, device_type=device_type)


def _stale_groups(session: Any, *, driver: str, device_type: str | None) -> list[StaleGroup]:
    from sqlalchemy import func, select

    from evidence_store.models import Evidence

    query = (select(Evidence.device_type, Evidence.driver_version, func.count())
             .where(Evidence.status == "current",
                    (Evidence.driver_version != driver) | Evidence.driver_version.is_(None))
             .group_by(Evidence.device_type, Evidence.driver_version))
    if device_type is not None:
        query = query.where(Evidence.device_type == device_type)
    rows = session.execute(query).all()
    return sorted((StaleGroup(str(t), None if d is None else str(d), int(n)) for t, d, n in rows),
                  key=lambda g: (g.device_type, g.old_driver or ""))


def planned_pairs_by_type(plan: WarmPlan | None, driver: str) -> dict[str, list[dict[str, Any]]]:
    """The plan's pairs (as drift-report entries: label, plan index, pair digest, key digests) by device type; a
    pair whose device cannot be reached now is left out (the warm run reports it as failed)."""
    from canary.admission import pair_key
    from evidence_store.service import probe_queue

    out: dict[str, list[dict[str, Any]]] = {}
    for index, pair in enumerate(plan.pairs if plan is not None else ()):
        try:
            req = _with_driver(load_pair(pair), driver)
        except CanaryError:
            continue
        keys = [k for k in (pair_key(req, r) for r in req.snapshot.residents) if k is not None]
        if not keys:
            continue
        out.setdefault(req.spec.name, []).append({
            "probe_id": "manual", "index": index, "pair_digest": probe_queue.pair_digest(keys),
            "key_digests": [k.digest() for k in keys], "label": _label(req)})
    return out


def record_reprobes(db_url: str | None, event_ids: list[str], report: WarmReport) -> None:
    """Pin on each drift event what its revalidation's re-probes found (each pair's status and the
    records they wrote), so ``canary drift ID`` shows this run's results however many runs follow."""
    from evidence_store import drift
    from evidence_store.database import session_scope

    statuses: dict[int, str] = {p.index: p.status for p in report.pairs}
    with session_scope(open_store_for_writing(db_url)) as session:
        for event_id in event_ids:
            drift.record_reprobes(session, event_id, statuses)


def mark_stale_and_record_drift(db_url: str | None, *, driver: str, device_type: str | None, now: dt.datetime,
                                plan: WarmPlan | None, note: str) -> tuple[int, list[str]]:
    """Mark evidence recorded under other drivers stale and, in the same transaction, record one drift
    event per device type and old driver (what ``canary drift`` lists; the agent records the same on a
    driver change it sees), listing the plan's pairs of that device type. Returns (records marked,
    drift event ids)."""
    import socket

    from evidence_store import drift, evidence
    from evidence_store.database import session_scope

    pairs = planned_pairs_by_type(plan, driver)
    engine = open_store_for_writing(db_url)
    with session_scope(engine) as session:
        groups = _stale_groups(session, driver=driver, device_type=device_type)
        marked = evidence.mark_stale(session, driver_not=driver, device_type=device_type, now=now)
        ids = [drift.record_drift(session, device_id=f"revalidate:{g.device_type}", node=socket.gethostname(),
                                  device_type=g.device_type, old_driver=g.old_driver, new_driver=driver,
                                  stale_marked=g.records, budget=len(pairs.get(g.device_type, [])),
                                  probes=pairs.get(g.device_type, []), now=now, note=note)
               for g in groups]
    return marked, ids
