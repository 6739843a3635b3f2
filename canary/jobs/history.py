"""``canary warm --from-history``: the nightly plan built from what was actually asked.

The plan is the pairs of the admission history (``admission_log``, written by the service) in the
window ``--since``, ranked by how often they were requested and then by how recently (``--top N`` of
them), plus the pairs whose current evidence expires within ``--expiring-within`` (at most ``--top``
of those too, soonest first). Each entry carries the request as it was asked (documents by value).

The plan is stored with the run (``warm_plans``) before anything runs, and again with each pair's
outcome at the end. A pair on a device a node agent owns is queued for that agent (a probe never runs
on another node's GPU); the others are probed here, inside the time budget, like ``canary warm``:
pairs with fresh evidence are answered from it and not probed again.

**Fresh until.** With ``--expiring-within W`` the run asks for evidence that is still fresh at
``now + W`` ("fresh until"): evidence that expires inside the window counts as missing, so its pair is
probed again tonight instead of being answered "fresh" and expiring tomorrow. The evidence lookups
run as of that time — here (``admit_async(evidence_as_of=…)``), in the check before a pair is queued
for an agent, and on the agent (the queued request carries ``evidence_fresh_until``). Without a
window the lookups run as of now, as every admission's do.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from canary.admission.request import QueuedRequest
from canary.errors import InputError
from canary.jobs.warm import (
    PairOutcome,
    WarmReport,
    answer_without_probe,
    classify_certificate,
    with_evidence_facts,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, None: 1}


def parse_duration(text: str, field: str) -> float:
    """``7d``, ``24h``, ``90m``, ``3600`` (seconds) → seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"{text!r} is not a positive duration (7d, 24h, 90m, 3600)", field=field)
    return float(m.group(1)) * _UNITS[m.group(2)]


@dataclass(frozen=True)
class PlanEntry:
    pair_digest: str
    label: str
    device_type: str
    device_ref: str
    reason: str  # "requested" or "expiring"
    requests: int
    last_requested_at: dt.datetime
    expires_at: dt.datetime | None
    request: QueuedRequest  # as it was asked, documents by value

    def summary(self) -> dict[str, Any]:
        return {"pair_digest": self.pair_digest, "label": self.label, "device_type": self.device_type,
                "device": self.device_ref, "reason": self.reason, "requests": self.requests,
                "last_requested_at": self.last_requested_at.isoformat(),
                "expires_at": None if self.expires_at is None else self.expires_at.isoformat()}


def build_plan(session: Any, *, now: dt.datetime, since_s: float, expiring_within_s: float | None,
               top: int) -> list[PlanEntry]:
    from evidence_store import admission_log, evidence
    from evidence_store.fleet_models import AdmissionLog

    if top < 1:
        raise InputError(f"must be at least 1, got {top}", field="--top")
    hot = admission_log.hot_pairs(session, since=now - dt.timedelta(seconds=since_s), limit=top)
    plan = []
    for h in hot:
        logged = QueuedRequest.read(h.request_json, what="logged")
        plan.append(PlanEntry(h.pair_digest, h.label, h.device_type, logged.device.ref, "requested", h.requests,
                              h.last_at, None, logged))
    if expiring_within_s is None:
        return plan
    chosen = {e.pair_digest for e in plan}
    expiring = evidence.expiring_evidence(session, now=now, within_s=expiring_within_s)
    soonest: dict[str, dt.datetime] = {}
    for ev in expiring:
        soonest.setdefault(ev.key_digest, ev.expires_at)
    rows = admission_log.latest_request_for_keys(session, set(soonest))
    extra: dict[str, tuple[dt.datetime, AdmissionLog]] = {}
    for key, row in rows.items():
        if row.pair_digest in chosen:
            continue
        when = soonest[key]
        if row.pair_digest not in extra or when < extra[row.pair_digest][0]:
            extra[row.pair_digest] = (when, row)
    for digest, (when, row) in sorted(extra.items(), key=lambda kv: (kv[1][0], kv[0]))[:top]:
        logged = QueuedRequest.read(row.request_json, what="logged")
        plan.append(PlanEntry(digest, row.label, row.device_type, logged.device.ref, "expiring", 0, row.at, when,
                              logged))
    return plan


async def warm_from_history(plan: list[PlanEntry], *, engine: Any, run_id: str, params: dict[str, Any],
                            budget_s: float, seed: int = 0, fresh_until: dt.datetime | None = None,
                            progress: Callable[[PairOutcome, int], None] | None = None) -> WarmReport:
    """Run the plan. ``fresh_until`` (the plan's build time + ``--expiring-within``): evidence that
    expires before it does not count as fresh, so those pairs are probed again; ``None``: as of now."""
    from canary._model import validate_document
    from canary.admission import admit_async, utcnow
    from canary.snapshot import DeviceSnapshot
    from evidence_store import published, warm_plans
    from evidence_store.database import session_scope
    from evidence_store.service import probe_queue

    if fresh_until is not None:
        params = {**params, "evidence_fresh_until": fresh_until.isoformat()}

    with session_scope(engine) as session:
        warm_plans.store_warm_plan(session, run_id=run_id, params=params, plan=[e.summary() for e in plan], now=utcnow())
    report = WarmReport(plan=run_id, budget_s=budget_s)
    started = time.monotonic()
    deadline = started + budget_s
    results: list[dict[str, Any]] = []
    for index, entry in enumerate(plan):
        outcome: PairOutcome
        ref = entry.device_ref
        if ref.startswith(published.AGENT_REF_PREFIX):
            with session_scope(engine) as session:
                pub = published.get_by_ref(session, ref)
                if pub is None:
                    outcome = PairOutcome(index, entry.label, "error", f"no agent publishes {ref} any more")
                else:
                    # the device as its agent publishes it now; the agent looks evidence up as of the same time
                    snapshot = validate_document(DeviceSnapshot, pub.snapshot_json, file=f"published snapshot {ref}")
                    queued = entry.request.model_copy(update={
                        "device": entry.request.device.model_copy(update={"snapshot": snapshot}),
                        "reserve": False, "evidence_fresh_until": fresh_until})
                    if not _needs_probe(queued, engine, fresh_until):
                        outcome = PairOutcome(index, entry.label, "fresh", "fresh evidence already covers every "
                                              "resident under the device's current driver"
                                              + _until(fresh_until))
                        report.pairs.append(outcome)
                        results.append({**entry.summary(), "status": outcome.status, "detail": outcome.detail,
                                        "outcome": None, "slowdown_pct": None})
                        if progress is not None:
                            progress(outcome, len(plan))
                        continue
                    ticket, joined = probe_queue.submit_and_notify(session, digest=entry.pair_digest,
                                                             device_id=pub.device_id, request_json=queued.stored(),
                                                             now=utcnow())
                    outcome = PairOutcome(index, entry.label, "queued", f"queued for {ref}'s agent as probe "
                                          f"{ticket.id}" + (" (joined a live probe)" if joined else ""))
        elif time.monotonic() >= deadline:
            # a pair stage 1 or fresh evidence answers costs no probe time: answered, not "missing"
            try:
                answered = answer_without_probe(index, entry.label, entry.request.request(), engine=engine,
                                                as_of=fresh_until)
            except Exception as exc:
                answered = PairOutcome(index, entry.label, "error", f"{type(exc).__name__}: {exc}")
            outcome = answered or PairOutcome(index, entry.label, "skipped-budget", "the job's time budget ran out")
            if outcome.status == "fresh":
                outcome = dataclasses.replace(outcome, detail=outcome.detail + _until(fresh_until))
        else:
            try:
                req = entry.request.request()
                cert = await admit_async(req, engine=engine, reserve=False, seed=seed + index,
                                         evidence_as_of=fresh_until)
                outcome = with_evidence_facts(classify_certificate(index, entry.label, cert), cert, engine)
                if outcome.status == "fresh":
                    outcome = dataclasses.replace(outcome, detail=outcome.detail + _until(fresh_until))
            except Exception as exc:
                outcome = PairOutcome(index, entry.label, "error", f"{type(exc).__name__}: {exc}")
        report.pairs.append(outcome)
        results.append({**entry.summary(), "status": outcome.status, "detail": outcome.detail,
                        "outcome": outcome.outcome, "slowdown_pct": outcome.slowdown_pct})
        if progress is not None:
            progress(outcome, len(plan))
    report.wall_s = time.monotonic() - started
    with session_scope(engine) as session:
        record = warm_plans.get_warm_plan(session, run_id)
        if record is not None:
            record.plan_json = results
            record.params_json = {**record.params_json, "wall_s": report.wall_s}
    return report


def _until(fresh_until: dt.datetime | None) -> str:
    return "" if fresh_until is None else f" (fresh until {fresh_until.isoformat(timespec='seconds')})"


def _needs_probe(queued: QueuedRequest, engine: Any, fresh_until: dt.datetime | None = None) -> bool:
    """Whether some pair of the request lacks evidence that is fresh until ``fresh_until`` (default:
    now); then the agent must probe it."""
    from canary.admission import EvidenceAccess, pairs_to_probe, utcnow

    req = queued.request()
    return bool(pairs_to_probe(req, EvidenceAccess.over(engine), utcnow(), evidence_as_of=fresh_until))


@dataclass(frozen=True)
class PruneReport:
    before: dt.datetime
    deleted: int
    remaining_oldest: dt.datetime | None


def prune_admission_log(engine: Any, *, before: dt.datetime, dry_run: bool = False) -> PruneReport:
    """Delete the admission history older than ``before``, one short transaction per batch (a large
    backlog never holds a long lock); with ``dry_run`` only count it. Safe to run from many processes
    at once: a batch another process deleted first is simply not found again."""
    from evidence_store import admission_log
    from evidence_store.database import session_scope

    deleted = 0
    if dry_run:
        with session_scope(engine, read_only=True) as session:
            deleted = admission_log.count_admissions_before(session, before)
    else:
        while True:
            with session_scope(engine) as session:
                n = admission_log.prune_admission_log(session, before=before, limit=admission_log.PRUNE_BATCH)
            deleted += n
            if n < admission_log.PRUNE_BATCH:
                break
    with session_scope(engine, read_only=True) as session:
        oldest = admission_log.oldest_admission(session)
    return PruneReport(before, deleted, oldest)


def default_run_id(now: dt.datetime) -> str:
    return f"history@{now:%Y-%m-%dT%H:%M:%SZ}#{uuid.uuid4().hex[:6]}"

