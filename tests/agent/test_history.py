"""``canary warm --from-history`` on a store filled by a recorded day of admissions
(tests/agent/fixtures/admissions-day.csv): the plan is the most requested pairs of the window (ties
broken by recency) plus the pairs whose evidence expires soon; it is printed, stored with the run, run."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from canary.admission.store import request_keys
from canary.serve.resolve import resolve
from canary.serve.schemas import DecisionRequest
from evidence_store import admission_log, published
from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from evidence_store.fleet_models import WarmPlanRecord
from evidence_store.schemas import EvidenceIn
from evidence_store.service import probe_queue
from tests.agent.conftest import WAIT_S, rows
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import profile_doc, snapshot_doc
from tests.support.cli import run_in_process
from tests.support.stores import migrated_sqlite

DAY = Path(__file__).parent / "fixtures" / "admissions-day.csv"


def pair_keys_of(req: Any) -> list[Any]:
    """The request's pair keys (its profiled residents'), as the admission history records them."""
    return [k for k in request_keys(req) if k is not None]


def _recorded() -> list[tuple[int, str]]:
    out = []
    for line in DAY.read_text().splitlines():
        if line and not line.startswith("#"):
            seconds, pair = line.split(",")
            out.append((int(seconds), pair))
    return out


def _expected_top(events: list[tuple[int, str]], window_s: int, top: int) -> list[str]:
    """Rank from the recording itself: request count, then the most recent request."""
    count: dict[str, int] = defaultdict(int)
    latest: dict[str, int] = {}
    for seconds, pair in events:
        if seconds <= window_s:
            count[pair] += 1
            latest[pair] = min(latest.get(pair, seconds), seconds)
    return sorted(count, key=lambda p: (-count[p], latest[p]))[:top]


def _resolved(pair: str) -> Any:
    body = DecisionRequest(device=snapshot_doc(), candidate=profile_doc(version=f"hist-{pair}"))
    return resolve(body, lambda *_: None, default_policy="default", reserve=False, seed=0)


def _evidence(key: Any, probe_id: str, created: dt.datetime, ttl: dt.timedelta) -> EvidenceIn:
    return EvidenceIn.model_validate({
        "probe_id": probe_id, "key": key, "driver_version": "580.95.05", "cuda_version": None, "device_uuid": None,
        "source": "canary", "outcome": "safe", "resident_slowdown_pct": 1.0, "resident_slowdown_low_pct": 0.0,
        "resident_slowdown_high_pct": 2.0, "candidate_slowdown_pct": None, "samples": 100, "exposure_used": 10,
        "time_used_s": 5.0, "confidence": 0.95, "created_at": created, "expires_at": created + ttl})


@pytest.mark.slow
def test_warm_from_history_picks_the_requested_and_expiring_pairs(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    now = dt.datetime.now(dt.UTC)
    events = _recorded()
    resolved = {p: _resolved(p) for p in sorted({p for _, p in events})}
    engine = make_engine(url)
    with session_scope(engine) as session:
        for seconds, pair in events:  # what the service logs for each admission
            r = resolved[pair]
            keys = pair_keys_of(r.request)
            admission_log.log_admission(session, pair_digest=probe_queue.pair_digest(keys),
                                key_digests=[k.digest() for k in keys], device_type="h100-sxm",
                                device_id=r.request.device_id, label=f"hist-{pair}", verdict="probe",
                                request_json=r.request_json, now=now - dt.timedelta(seconds=seconds + 60))
        # p6 (rarely asked) has evidence expiring in 12 h, p7's expires in 48 h (outside the window)
        for pair, ttl in (("p6", dt.timedelta(hours=12)), ("p7", dt.timedelta(hours=48))):
            key = pair_keys_of(resolved[pair].request)[0]
            record_evidence(session, _evidence(key, f"probe-{pair}", now - dt.timedelta(hours=1),
                                                          ttl + dt.timedelta(hours=1)))
    engine.dispose()
    top = _expected_top(events, 86400, 3)
    assert "p8" not in top  # the recording's most requested pair is two days old

    out = subprocess.run([*canary_cmd(), "--db", url, "warm", "--from-history", "--since", "1d",
                          "--expiring-within", "24h", "--top", "3", "--run-id", "nightly-test", "--json"],
                         capture_output=True, text=True, timeout=WAIT_S * 3, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [(e["label"], e["reason"]) for e in doc["plan"]] == (
        [(f"hist-{p}", "requested") for p in top] + [("hist-p6", "expiring")])
    counts = defaultdict(int)
    for seconds, pair in events:
        if seconds <= 86400:
            counts[pair] += 1
    assert [e["requests"] for e in doc["plan"][:3]] == [counts[p] for p in top]
    statuses = [p["status"] for p in doc["pairs"]]
    assert statuses == ["probed"] * 4  # p6's evidence expires inside the window: not fresh for this run
    stored = rows(url, WarmPlanRecord)
    assert [s.run_id for s in stored] == ["nightly-test"]
    assert [e["label"] for e in stored[0].plan_json] == [e["label"] for e in doc["plan"]]
    assert [e["status"] for e in stored[0].plan_json] == statuses
    assert stored[0].params_json["top"] == 3 and stored[0].params_json["since"] == "1d"


@pytest.mark.parametrize(("args", "field"), [
    pytest.param(["--since", "soon"], "--since", id="bad-since"),
    pytest.param(["--expiring-within", "-3h"], "--expiring-within", id="bad-window"),
    pytest.param(["--top", "0"], "--top", id="zero-top"),
])
def test_warm_from_history_bad_input(tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (tests/support/cli.py): the slow tests above run the same command as a real process."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    out = run_in_process(["--db", url, "warm", "--from-history", *args], capsys=capsys, monkeypatch=monkeypatch,
                         env=cli_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
    assert rows(url, WarmPlanRecord) == []


# Evidence of the recorded day's pairs for the fresh-until test: hours until it expires.
EXPIRES_IN_H = {"p1": 6.0, "p3": 20.0, "p6": 23.0,   # inside a 24 h window: probed again
                "p2": 30.0, "p4": 72.0, "p7": 25.0,  # outside it: still fresh tomorrow, not probed
                "p5": None}                           # none: probed by the first run (the control)
INSIDE = {p for p, h in EXPIRES_IN_H.items() if h is not None and h < 24}


def _fill_day(url: str, resolved: dict[str, Any], now: dt.datetime) -> None:
    """The recorded day of admissions as the service logs them, and evidence for the planned pairs."""
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            for seconds, pair in _recorded():
                r = resolved[pair]
                keys = pair_keys_of(r.request)
                admission_log.log_admission(session, pair_digest=probe_queue.pair_digest(keys),
                                    key_digests=[k.digest() for k in keys], device_type=r.request.spec.name,
                                    device_id=r.request.device_id, label=f"hist-{pair}", verdict="probe",
                                    request_json=r.request_json, now=now - dt.timedelta(seconds=seconds + 60))
            for pair, hours in EXPIRES_IN_H.items():
                if hours is None:
                    continue
                for i, key in enumerate(pair_keys_of(resolved[pair].request)):
                    created = now - dt.timedelta(hours=2)
                    record_evidence(session, _evidence(key, f"seed-{pair}-{i}", created,
                                                                  dt.timedelta(hours=hours + 2)))
    finally:
        engine.dispose()


def _probed_pairs(url: str, resolved: dict[str, Any], *, not_before: set[str]) -> set[str]:
    """The pairs that got new evidence (a record that was not there before)."""
    from evidence_store.models import Evidence

    by_digest = {k.digest(): p for p, r in resolved.items() for k in pair_keys_of(r.request)}
    return {by_digest[e.key_digest] for e in rows(url, Evidence) if e.id not in not_before
            and e.key_digest in by_digest}


def _warm(url: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([*canary_cmd(), "--db", url, "warm", "--from-history", "--since", "1d", "--top", "10",
                          "--json", *args], capture_output=True, text=True, timeout=WAIT_S * 3, env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _evidence_ids(url: str) -> set[str]:
    from evidence_store.models import Evidence

    return {e.id for e in rows(url, Evidence)}


@pytest.mark.slow
def test_expiring_within_reprobes_exactly_the_pairs_whose_evidence_expires_inside_the_window(tmp_path: Path) -> None:
    """Evidence that expires within ``--expiring-within`` is not fresh for the run ("fresh until" =
    now + window): exactly those pairs are probed again; evidence that outlives the window answers."""
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    now = dt.datetime.now(dt.UTC)
    resolved = {p: _resolved(p) for p in sorted({p for _, p in _recorded()})}
    _fill_day(url, resolved, now)
    window = set(EXPIRES_IN_H)
    assert {p for s, p in _recorded() if s <= 86400} == window  # the recorded day's pairs of the last day

    # control, without a window: as of now every seeded record is fresh; only p5 (no evidence) is probed
    before = _evidence_ids(url)
    control = _warm(url, tmp_path)
    status = {e["label"][len("hist-"):]: p["status"] for e, p in zip(control["plan"], control["pairs"], strict=True)}
    assert status == {p: ("probed" if h is None else "fresh") for p, h in EXPIRES_IN_H.items()}
    assert _probed_pairs(url, resolved, not_before=before) == {"p5"}

    before = _evidence_ids(url)
    doc = _warm(url, tmp_path, "--expiring-within", "24h")
    status = {e["label"][len("hist-"):]: p["status"] for e, p in zip(doc["plan"], doc["pairs"], strict=True)}
    assert status == {p: ("probed" if p in INSIDE else "fresh") for p in window}
    assert _probed_pairs(url, resolved, not_before=before) == INSIDE
    fresh = [p for e, p in zip(doc["plan"], doc["pairs"], strict=True) if p["status"] == "fresh"]
    assert all("fresh until" in p["detail"] for p in fresh), fresh
    stored = rows(url, WarmPlanRecord)
    run = next(s for s in stored if s.params_json.get("expiring_within") == "24h")
    assert dt.datetime.fromisoformat(run.params_json["evidence_fresh_until"]) > now + dt.timedelta(hours=23)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_expiring_within_reaches_the_agent_that_runs_the_probe(store_url: str, tmp_path: Path,
                                                               agent_factory: Any) -> None:
    """The same day on a node agent's device: the warm run queues the expiring pairs (and the pair without
    evidence) for the agent with their fresh-until time, and the agent probes them — it does not answer
    them from the evidence that is still fresh tonight."""
    from canary.admission.request import QueuedRequest
    from evidence_store.service.models import ServeProbe
    from tests.agent.conftest import wait_for, write_device

    device = write_device(tmp_path / "gpu0.yaml", uuid="GPU-history-0")
    agent_factory(store_url, "n1", {"gpu0": device}, "--heartbeat-s", "0.5")
    now = dt.datetime.now(dt.UTC)
    engine = make_engine(store_url)
    try:
        with session_scope(engine, read_only=True) as session:
            def on_agent(pair: str) -> Any:
                body = DecisionRequest(device="agent:n1/gpu0", candidate=profile_doc(version=f"hist-{pair}"))
                return resolve(body, lambda *_: None, default_policy="default", reserve=False, seed=0,
                               published=lambda ref: published.get_by_ref(session, ref))

            resolved = {p: on_agent(p) for p in sorted({p for _, p in _recorded()})}
    finally:
        engine.dispose()
    _fill_day(store_url, resolved, now)
    before = _evidence_ids(store_url)
    doc = _warm(store_url, tmp_path, "--expiring-within", "24h")
    expected = INSIDE | {"p5"}
    status = {e["label"][len("hist-"):]: p["status"] for e, p in zip(doc["plan"], doc["pairs"], strict=True)}
    assert status == {p: ("queued" if p in expected else "fresh") for p in EXPIRES_IN_H}

    probes = wait_for("the agent to run the queued probes", lambda: (
        lambda ps: ps if len(ps) == len(expected) and all(p.state == "done" for p in ps) else None)(
        rows(store_url, ServeProbe)))
    for p in probes:
        assert p.owner.startswith("agent/n1@"), p.owner
        until = QueuedRequest.read(p.request_json).evidence_fresh_until
        assert until is not None and until > now + dt.timedelta(hours=23)
        assert p.certificate_json["decided_by"] == "canary", p.certificate_json["reason"]
    assert _probed_pairs(store_url, resolved, not_before=before) == expected


@pytest.mark.parametrize(("expires_in_h", "fresh_until_h", "needs_probe"), [
    pytest.param(6, None, False, id="fresh-now"),
    pytest.param(6, 24, True, id="expires-inside-the-window"),
    pytest.param(30, 24, False, id="outlives-the-window"),
    pytest.param(-1, None, True, id="expired"),
    pytest.param(-1, -2, True, id="an-earlier-time-never-revives-expired-evidence"),
])
def test_needs_probe_as_of_fresh_until(tmp_path: Path, expires_in_h: float, fresh_until_h: float | None,
                                       needs_probe: bool) -> None:
    from canary.jobs.history import _needs_probe

    url = migrated_sqlite(tmp_path / "store.sqlite3")
    now = dt.datetime.now(dt.UTC)
    r = _resolved("p1")
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            for i, key in enumerate(pair_keys_of(r.request)):
                created = now - dt.timedelta(hours=3)
                record_evidence(session, _evidence(key, f"seed-{i}", created,
                                                              dt.timedelta(hours=expires_in_h + 3)))
        until = None if fresh_until_h is None else now + dt.timedelta(hours=fresh_until_h)
        assert _needs_probe(r.queued, engine, until) is needs_probe
    finally:
        engine.dispose()


@pytest.mark.parametrize(("value", "problem"), [
    # parse_time's words, as `canary evidence expire --before` says them
    pytest.param("tomorrow", r"not an ISO-8601 time with a zone: 'tomorrow' \(e\.g\. ", id="not-a-time"),
    pytest.param("2026-12-02T03:00:00", r"'2026-12-02T03:00:00' has no time zone; add one, e\.g\. 2026-12-02T03:00:00Z",
                 id="naive"),
])
def test_a_bad_fresh_until_in_a_queued_request_is_named(value: str, problem: str) -> None:
    from canary.admission import FRESH_UNTIL_FIELD, fresh_until_from_json
    from canary.admission.request import QueuedRequest
    from canary.errors import InputError

    stored = _resolved("p1").queued.stored()
    assert QueuedRequest.read(stored).evidence_fresh_until is None
    with pytest.raises(InputError, match=f"^queued request: field '{FRESH_UNTIL_FIELD}': {problem}"):
        QueuedRequest.read({**stored, FRESH_UNTIL_FIELD: value})
    with pytest.raises(InputError, match=f"queued request: field '{FRESH_UNTIL_FIELD}': {problem}"):
        fresh_until_from_json({FRESH_UNTIL_FIELD: value})
    assert fresh_until_from_json({}) is None
