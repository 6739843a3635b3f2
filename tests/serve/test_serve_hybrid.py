"""Hybrid admission in the service (``POST /v1/admissions``): the service consults the policy's
estimators exactly where ``canary admit`` does — a pair without usable evidence — and through the
same function (``canary.admission.flow.consult_estimators``).

The application runs in this process on a loopback port (uvicorn in a thread; real HTTP through
httpx), so that a test can give it policies that name estimators (a policy directory of its own) and
an estimator of its own through the ``canary.estimators`` entry point group. The store is a real
SQLite file, seeded with probe outcomes of earlier candidate versions, as tests/admission/test_hybrid.py
seeds it, so that the transfer estimator is calibrated on the device type.
"""

from __future__ import annotations

import datetime as dt
import gc
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

import canary.estimate
import canary.policy
from canary._model import PairKey, utcnow
from canary.admission import Request, admit, load_request, pair_key
from canary.estimate import EstimateQuery, NoEstimate
from canary.serve.app import create_app
from canary.serve.config import ServeConfig
from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from evidence_store.migrate import upgrade
from evidence_store.schemas import EvidenceIn
from tests.serve.conftest import EX, HTTP_TIMEOUT, profile_doc, snapshot_doc
from tests.support.helpers import free_port

SNAP = str(EX / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EX / "profiles" / "embedding-service.yaml")


# --------------------------------------------------------------------------- the server and its policies


@dataclass
class Counting:
    """An estimator that counts the pairs it is asked about and cannot predict any of them."""

    name: str = "counting"
    asked: list[str] = field(default_factory=list)

    def estimate(self, query: EstimateQuery) -> NoEstimate:
        self.asked.append(query.resident.name)
        return NoEstimate(self.name, "counts the questions it is asked, answers none")


@dataclass
class _EntryPoint:
    """What ``importlib.metadata`` hands ``canary.estimate.load_estimator`` for an installed estimator."""

    obj: object
    value: str = "tests.serve.test_serve_hybrid:Counting"

    def load(self) -> object:
        return self.obj


class InProcessServer:
    """``create_app`` served by uvicorn on a loopback port, in a thread of this process."""

    def __init__(self, db_url: str) -> None:
        config = ServeConfig(db_url=db_url, auth="none", sim_time_scale=0.0)
        self.base = f"http://127.0.0.1:{free_port()}"
        port = int(self.base.rsplit(":", 1)[1])
        self.server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="canary-serve-test", daemon=True)

    def start(self, timeout_s: float = 60.0) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the in-process server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        gc.unfreeze()  # the lifespan froze what start-up built: give this test process its collector back
        assert not self.thread.is_alive(), "the in-process server did not stop"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=HTTP_TIMEOUT)


@pytest.fixture
def policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """A policy directory of the test's own (the repository's policies, and those the test writes);
    returns a writer: ``write(name, estimators, decide_on_prediction)`` → the policy's name."""
    directory = tmp_path / "policies"
    shutil.copytree(canary.policy.POLICY_DIR, directory)
    monkeypatch.setattr(canary.policy, "POLICY_DIR", directory)

    def write(name: str, estimators: tuple[str, ...], decide: tuple[str, ...] = ()) -> str:
        doc = yaml.safe_load((directory / "default.yaml").read_text())
        doc.update(name=name, estimators=list(estimators), decide_on_prediction=list(decide))
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        return name

    return write


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Counting:
    """The ``counting`` estimator, installed under the ``canary.estimators`` entry point group."""
    estimator = Counting()
    monkeypatch.setattr(canary.estimate, "_entry_points", lambda: {"counting": _EntryPoint(estimator)})
    return estimator


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "evidence.sqlite3"
    url = f"sqlite:///{path}"
    upgrade(url)
    return url, path


@pytest.fixture
def serve(store: tuple[str, Path]) -> Iterator[Callable[[], InProcessServer]]:
    started: list[InProcessServer] = []

    def start() -> InProcessServer:
        server = InProcessServer(store[0]).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# --------------------------------------------------------------------------- the store's history


def _request(policy: str) -> Request:
    return load_request(SNAP, EMB, policy_ref=policy)


def _key(req: Request, **changes: str) -> PairKey:
    key = pair_key(req, req.snapshot.residents[0])
    assert key is not None
    return PairKey(**{**key.as_dict(), **changes})


def _seed_history(url: str, req: Request, now: dt.datetime, n: int = 50, mean: float = 1.0) -> None:
    """``n`` probe outcomes of earlier candidate versions, an hour apart up to ``now``: each record's
    earlier ones are its transfer neighbours, so the transfer estimator has ``n - 1`` calibration
    outcomes on this device type."""
    rng = random.Random(3)
    _record(url, [(f"history-{i}", _key(req, candidate_version=f"0.{i}"), now - dt.timedelta(hours=n - i),
                   mean + rng.gauss(0, 0.5)) for i in range(n)])


def _record(url: str, rows: list[tuple[str, PairKey, dt.datetime, float]], driver: str | None = None) -> None:
    """Safe, confident probe outcomes (``probe_id``, key, time, measured slowdown), under ``driver``."""
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            for probe_id, key, at, y in rows:
                record_evidence(session, EvidenceIn(
                    probe_id=probe_id, key=key, source="canary", outcome="safe", resident_slowdown_pct=y,
                    resident_slowdown_low_pct=y - 1.0, resident_slowdown_high_pct=y + 1.0, samples=200,
                    exposure_used=50, time_used_s=60.0, confidence=0.95, created_at=at,
                    expires_at=at + dt.timedelta(days=7), driver_version=driver))
    finally:
        engine.dispose()


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"select count(*) from {table}").fetchone()[0])


def _body(policy: str, **changes: Any) -> dict[str, Any]:
    return {"device": snapshot_doc(), "candidate": profile_doc(), "policy": policy, **changes}


def _finished(client: httpx.Client, answer: httpx.Response) -> dict[str, Any]:
    """The certificate of the probe a 202 queued, once it finished."""
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = client.get(location, params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            assert status["state"] == "done", status
            cert: dict[str, Any] = status["certificate"]
            return cert
    raise AssertionError(f"the probe at {location} did not finish")


# --------------------------------------------------------------------------- the tests


def test_a_calibrated_trusted_prediction_answers_200_as_canary_admit_decides(
        store: tuple[str, Path], policies: Callable[..., str], serve: Callable[[], InProcessServer]) -> None:
    url, path = store
    name = policies("hybrid-trusted", ("transfer",), ("transfer",))
    req = _request(name)
    _seed_history(url, req, utcnow())
    # canary admit on the same store, policy and documents (reserve=False: it writes nothing)
    cli = admit(req, db_url=url, reserve=False)
    assert cli.decided_by == "predicted" and cli.probe is None
    server = serve()
    with server.client() as client:
        answer = client.post("/v1/admissions", json=_body(name))
    assert answer.status_code == 200, answer.text
    cert = answer.json()
    assert cert["decided_by"] == "predicted" and cert["verdict"] == cli.verdict == "admit"
    assert cert["probe"] is None and cert["reason"] == cli.reason
    (p,) = cert["predictions"]
    (q,) = cli.predictions
    assert p["estimator"] == "transfer" and p["used_as"] == "decision" and p["calibrated"]
    assert p["calibrated_interval_pct"] == pytest.approx(list(q.calibrated_interval_pct or ()))
    assert p["outcomes"] == q.outcomes == 49 and p["coverage"] == pytest.approx(q.coverage)
    # deciding at 0.9 needs ceil(4 × 0.9 / 0.1) = 36 time-ordered checks (docs/estimators.md)
    assert p["checked"] == q.checked and 36 <= p["checked"] < p["outcomes"]
    # booked and recorded like any decision: the reservation, the certificate, the admission history
    server.stop()  # the history is written in batches; stopping the server flushes it
    assert _count(path, "evidence") == 50  # nothing measured, nothing recorded
    assert _count(path, "serve_probes") == 0  # and no probe was queued
    assert _count(path, "reservations") == 1 and _count(path, "certificates") == 1
    with sqlite3.connect(path) as conn:
        verdicts = [r[0] for r in conn.execute("select verdict from admission_log")]
        stored = conn.execute("select certificate_json from certificates").fetchone()[0]
    assert verdicts == ["admit"] and '"decided_by": "predicted"' in stored.replace('":"', '": "')


def test_a_calibrated_prediction_the_policy_does_not_trust_is_the_queued_probes_prior(
        store: tuple[str, Path], policies: Callable[..., str], serve: Callable[[], InProcessServer]) -> None:
    url, _ = store
    name = policies("hybrid-prior", ("transfer",))
    _seed_history(url, _request(name), utcnow())
    with serve().client() as client:
        cert = _finished(client, client.post("/v1/admissions", json=_body(name)))
    assert cert["decided_by"] == "canary" and cert["probe"] is not None
    (p,) = cert["predictions"]
    assert p["estimator"] == "transfer" and p["calibrated"] and p["used_as"] == "prior"
    prior = p["prior"]
    assert prior is not None and prior["estimator"] == "transfer" and prior["applied"]
    lo, hi = p["calibrated_interval_pct"]
    assert prior["mean_pct"] == pytest.approx((lo + hi) / 2)


def test_an_uncalibrated_prediction_never_decides_and_gives_the_probe_no_prior(
        policies: Callable[..., str], serve: Callable[[], InProcessServer]) -> None:
    name = policies("hybrid-uncalibrated", ("analytical",), ("analytical",))  # an empty store: no outcomes
    with serve().client() as client:
        cert = _finished(client, client.post("/v1/admissions", json=_body(name)))
    assert cert["decided_by"] == "canary" and cert["probe"] is not None
    (p,) = cert["predictions"]
    assert p["estimator"] == "analytical" and not p["calibrated"]
    assert p["used_as"] == "order-only" and p["prior"] is None


def test_a_pair_with_fresh_evidence_never_reaches_the_estimators(
        store: tuple[str, Path], policies: Callable[..., str], counting: Counting,
        serve: Callable[[], InProcessServer]) -> None:
    url, _ = store
    name = policies("hybrid-counting", ("counting",), ("counting",))
    req = _request(name)
    now = utcnow()
    _record(url, [("fresh", _key(req), now - dt.timedelta(minutes=5), 1.0)], driver=req.snapshot.driver_version)
    with serve().client() as client:
        for _ in range(3):  # the first sight of the body, then the kept body's fast path
            answer = client.post("/v1/admissions", json=_body(name, reserve=False))
            assert answer.status_code == 200, answer.text
            assert answer.json()["decided_by"] == "cache"
        assert counting.asked == []
        # the control: a pair without evidence (another candidate version) is put to the estimator
        unseen = _body(name, reserve=False, probe=False)
        unseen["candidate"] = profile_doc(version="9.9.9")
        assert client.post("/v1/admissions", json=unseen).json()["verdict"] == "unknown"
        assert counting.asked == []  # probe=false: stage 1 and the evidence only, as canary admit --no-probe
        answer = client.post("/v1/admissions", json={**unseen, "probe": True})
        assert answer.status_code == 202, answer.text
        assert counting.asked[:1] == ["comms"]
        assert _finished(client, answer)["predictions"] == []  # the estimator could predict nothing


def test_an_estimator_nothing_provides_is_the_requests_error(
        policies: Callable[..., str], serve: Callable[[], InProcessServer]) -> None:
    name = policies("hybrid-unknown", ("crystal-ball",))
    with serve().client() as client:
        answer = client.post("/v1/admissions", json=_body(name))
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith("field 'body.policy': policy 'hybrid-unknown', field 'estimators': ")
        assert "no estimator named 'crystal-ball'" in detail
        # a decision that cannot probe consults no estimator, as canary admit --no-probe and canary fit
        assert client.post("/v1/admissions", json=_body(name, probe=False)).status_code == 200
