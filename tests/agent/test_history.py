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

from canary.serve.fleet import pair_keys_of
from canary.serve.resolve import resolve
from canary.serve.schemas import DecisionRequest
from evidence_store import fleet, probe_queue
from evidence_store.engine import make_engine, session_scope, upgrade
from evidence_store.evidence import record_evidence
from evidence_store.fleet_models import WarmPlanRecord
from evidence_store.schemas import EvidenceIn
from tests.agent.conftest import WAIT_S, rows
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import profile_doc, snapshot_doc

DAY = Path(__file__).parent / "fixtures" / "admissions-day.csv"


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
    return resolve(body, lambda *_: None, default_policy="default", extra={"reserve": False, "seed": 0})


def _evidence(key: Any, probe_id: str, created: dt.datetime, ttl: dt.timedelta) -> EvidenceIn:
    return EvidenceIn.model_validate({
        "probe_id": probe_id, "key": key, "driver_version": "580.95.05", "cuda_version": None, "device_uuid": None,
        "source": "canary", "outcome": "safe", "resident_slowdown_pct": 1.0, "resident_slowdown_low_pct": 0.0,
        "resident_slowdown_high_pct": 2.0, "candidate_slowdown_pct": None, "samples": 100, "exposure_used": 10,
        "time_used_s": 5.0, "confidence": 0.95, "created_at": created, "expires_at": created + ttl})


@pytest.mark.slow
def test_warm_from_history_picks_the_requested_and_expiring_pairs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    upgrade(url)
    now = dt.datetime.now(dt.UTC)
    events = _recorded()
    resolved = {p: _resolved(p) for p in sorted({p for _, p in events})}
    engine = make_engine(url)
    with session_scope(engine) as session:
        for seconds, pair in events:  # what the service logs for each admission
            r = resolved[pair]
            keys = pair_keys_of(r.request)
            fleet.log_admission(session, pair_digest=probe_queue.pair_digest(keys),
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
    assert statuses[:3] == ["probed"] * 3 and statuses[3] in ("probed", "fresh")
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
def test_warm_from_history_bad_input(tmp_path: Path, args: list[str], field: str) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    upgrade(url)
    out = subprocess.run([*canary_cmd(), "--db", url, "warm", "--from-history", *args], capture_output=True,
                         text=True, timeout=WAIT_S, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
    assert rows(url, WarmPlanRecord) == []
