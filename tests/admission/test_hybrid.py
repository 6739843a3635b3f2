"""Hybrid admission: calibrated predictions decide only where the policy trusts their estimator and
the interval clears the bound; otherwise they become the probe's prior. Pure decisions as a table,
then end to end on a real SQLite store seeded with probe outcomes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import sqlite3
from pathlib import Path

import pytest

from canary._model import PairKey
from canary.admission import Request, admit, load_request, pair_key
from canary.admission.decisions import PairEvidence, predicted_decision
from canary.certificate import PredictionRef
from canary.errors import InputError
from canary.estimate.store import certificate_outcomes
from canary.render import certificate_text
from evidence_store.database import session_scope
from evidence_store.evidence import record_evidence
from evidence_store.migrate import open_store
from evidence_store.schemas import EvidenceIn
from tests.support.paths import EXAMPLES
from tests.support.stores import migrated_sqlite

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
T0 = dt.datetime(2026, 1, 5, 8, 0, tzinfo=dt.UTC)


def _request(estimators: tuple[str, ...] = ("transfer",), decide: tuple[str, ...] = ("transfer",)) -> Request:
    req = load_request(SNAP, EMB)
    policy = req.policy.model_validate({**req.policy.model_dump(), "estimators": estimators,
                                        "decide_on_prediction": decide})
    return dataclasses.replace(req, policy=policy)


def _key(req: Request, **changes: str) -> PairKey:
    key = pair_key(req, req.snapshot.residents[0])
    assert key is not None
    return PairKey(**{**key.as_dict(), **changes})


def _prediction(interval: tuple[float, float] | None, *, estimator: str = "transfer", calibrated: bool = True,
                coverage: float | None = 0.97) -> PredictionRef:
    lo, hi = interval or (0.0, 4.0)
    return PredictionRef(resident="comms", estimator=estimator, lo_pct=lo, hi_pct=hi, point_pct=(lo + hi) / 2,
                         calibrated_interval_pct=interval if calibrated else None, calibrated=calibrated,
                         confidence_level=0.9, coverage=coverage, outcomes=40,
                         calibration="measured coverage 0.970 over 31 checked of 40 outcomes (in time order); "
                                     "conformal widening +0.10 interval widths")


BOUND = load_request(SNAP, EMB).policy.budget_for("training").max_resident_slowdown_pct


@pytest.mark.parametrize(("decide", "prediction", "expected"), [
    pytest.param(("transfer",), _prediction((-3.0, 6.0)), "admit", id="calibrated-and-clear-below-admits"),
    pytest.param(("transfer",), _prediction((BOUND + 1, BOUND + 30)), "reject", id="wholly-above-rejects"),
    pytest.param(("transfer",), _prediction((2.0, BOUND + 1)), None, id="straddling-the-bound-probes"),
    pytest.param(("transfer",), _prediction((-3.0, 6.0), calibrated=False), None, id="uncalibrated-never-decides"),
    pytest.param((), _prediction((-3.0, 6.0)), None, id="an-untrusted-estimator-never-decides"),
    pytest.param(("transfer",), _prediction((-3.0, 6.0), estimator="analytical"), None,
                 id="trust-is-per-estimator"),
    pytest.param(("transfer",), None, None, id="no-prediction-probes"),
])
def test_predicted_decision(decide: tuple[str, ...], prediction: PredictionRef | None, expected: str | None) -> None:
    req = _request(estimators=("transfer", "analytical"), decide=decide)
    evidence = [PairEvidence("comms", _key(req), None, reason="no evidence for this pair")]
    decision = predicted_decision(req, evidence, {"comms": prediction} if prediction else {})
    if expected is None:
        assert decision is None
        return
    assert decision is not None and decision.verdict == expected and decision.decided_by == "predicted"
    assert decision.probe is None and decision.predictions[0].used_as == "decision"
    assert "measured coverage 0.970 over 31 checked of 40 outcomes" in decision.reason


def test_a_resident_without_a_profile_is_never_predicted_away() -> None:
    req = _request()
    evidence = [PairEvidence("comms", _key(req), None), PairEvidence("mystery", None, None)]
    assert predicted_decision(req, evidence, {"comms": _prediction((-3.0, 6.0))}) is None


# --------------------------------------------------------------------------- end to end


def _seed_history(url: str, req: Request, n: int = 50, mean: float = 1.0) -> None:
    """``n`` probe outcomes of earlier candidate versions, an hour apart: each record's earlier ones
    are its transfer neighbours, so the transfer estimator has ``n - 1`` calibration outcomes (at 0.9,
    the first 9 give the first finite quantile and the other 40 are checked: deciding needs 36)."""
    rng = random.Random(3)
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            for i in range(n):
                at = T0 - dt.timedelta(hours=n - i)
                y = mean + rng.gauss(0, 0.5)
                record_evidence(session, EvidenceIn(
                    probe_id=f"history-{i}", key=_key(req, candidate_version=f"0.{i}"), source="canary",
                    outcome="safe", resident_slowdown_pct=y, resident_slowdown_low_pct=y - 1.0,
                    resident_slowdown_high_pct=y + 1.0, samples=200, exposure_used=50, time_used_s=60.0,
                    confidence=0.95, created_at=at, expires_at=at + dt.timedelta(days=7)))
    finally:
        engine.dispose()


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"select count(*) from {table}").fetchone()[0])


def test_a_calibrated_trusted_prediction_decides_without_a_probe(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    url = migrated_sqlite(path)
    req = _request()
    _seed_history(url, req)
    cert = admit(req, db_url=url, now=lambda: T0)
    assert cert.verdict == "admit" and cert.decided_by == "predicted" and cert.probe is None
    (p,) = cert.predictions
    assert p.estimator == "transfer" and p.used_as == "decision" and p.calibrated
    assert p.outcomes == 49 and p.coverage is not None and p.coverage >= 0.8
    assert "over 40 checked of 49 outcomes" in p.calibration and "over 40 checked of 49 outcomes" in cert.reason
    assert p.calibrated_interval_pct is not None and p.calibrated_interval_pct[1] <= BOUND
    assert _count(path, "evidence") == 50  # nothing measured, nothing recorded
    text = certificate_text(cert)
    assert "decided by predicted" in text and "predicted for comms by transfer" in text
    assert "decided without a probe" in text and "measured coverage" in text


def test_a_policy_that_only_consults_probes_with_the_prior_and_records_the_prediction(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite3"
    url = migrated_sqlite(path)
    req = _request(decide=())
    _seed_history(url, req)
    cert = admit(req, db_url=url, now=lambda: T0)
    assert cert.decided_by == "canary" and cert.probe is not None
    (p,) = cert.predictions
    assert p.used_as == "prior" and p.prior is not None and p.prior.estimator == "transfer" and p.prior.applied
    assert p.calibrated_interval_pct is not None
    lo, hi = p.calibrated_interval_pct
    assert p.prior.mean_pct == pytest.approx((lo + hi) / 2)
    assert "probe prior: mean" in certificate_text(cert)
    # the probe's measurement against the prediction made before it: a calibration outcome
    engine = open_store(url)
    try:
        outcomes = [o for o in certificate_outcomes(engine) if o.estimator == "transfer"]
    finally:
        engine.dispose()
    if cert.probe.outcome in ("safe", "unsafe") and cert.probe.slowdown_estimate_pct is not None:
        assert len(outcomes) == 1 and outcomes[0].lo_pct == p.lo_pct
    else:
        assert outcomes == []


def test_without_outcomes_the_prediction_is_shown_and_the_pair_is_probed(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    cert = admit(_request(estimators=("analytical",), decide=("analytical",)), db_url=url, now=lambda: T0)
    assert cert.decided_by == "canary"
    (p,) = cert.predictions
    assert not p.calibrated and p.used_as == "order-only" and p.prior is None
    assert "fewer than the 30 calibration needs" in p.calibration
    assert "uncalibrated" in certificate_text(cert)


def test_a_probe_that_books_nothing_still_records_its_certificate_and_calibrates(tmp_path: Path) -> None:
    """A warm run probes with ``reserve=False``: no booking, but the probe's evidence gets the
    certificate that explains it, so the prediction made before the probe becomes a calibration
    outcome measured by that probe (without it, warm runs never calibrate an estimator)."""
    from sqlalchemy import func, select

    from evidence_store.models import Certificate, CertificateEvidence

    url = migrated_sqlite(tmp_path / "e.sqlite3")
    cert = admit(_request(estimators=("analytical",), decide=()), db_url=url, now=lambda: T0, reserve=False)
    assert cert.decided_by == "canary" and cert.probe is not None and cert.resource_reservations == ()
    assert cert.evidence is not None and cert.evidence.ids, "the probe recorded no evidence"
    (p,) = cert.predictions
    engine = open_store(url)
    with session_scope(engine, read_only=True) as s:
        assert s.scalar(select(func.count()).select_from(Certificate)) == 1
        linked = set(s.scalars(select(CertificateEvidence.evidence_id)))
    assert linked == set(cert.evidence.ids)
    (outcome,) = [o for o in certificate_outcomes(engine) if o.estimator == "analytical"]
    assert (outcome.lo_pct, outcome.hi_pct) == (p.lo_pct, p.hi_pct)
    assert outcome.measured_pct == pytest.approx(cert.probe.slowdown_estimate_pct)


def test_calibration_reads_only_the_newest_outcomes_of_the_device_type(tmp_path: Path) -> None:
    """Each hybrid admission reads the certificates' outcomes: of its device type only, and at most the
    newest ``limit`` of them, so the read stays bounded as the store grows."""
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    req = _request(estimators=("analytical",), decide=())
    first = admit(req, db_url=url, now=lambda: T0, reserve=False)
    newer = dataclasses.replace(req, candidate=req.candidate.model_copy(update={"version": "9.9.9"}))
    second = admit(newer, db_url=url, now=lambda: T0 + dt.timedelta(hours=1), reserve=False)
    assert first.evidence is not None and second.evidence is not None
    engine = open_store(url)
    both = certificate_outcomes(engine, device_types=(req.spec.name,))
    assert {o.evidence_id for o in both} == {*first.evidence.ids, *second.evidence.ids}
    (newest,) = certificate_outcomes(engine, device_types=(req.spec.name,), limit=1)
    assert newest.evidence_id in second.evidence.ids
    assert certificate_outcomes(engine, device_types=("a100-sxm4-80gb",)) == []


def test_an_unknown_estimator_is_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    req = load_request(SNAP, EMB)
    policy = req.policy.model_validate({**req.policy.model_dump(), "estimators": ("crystal-ball",)})
    with pytest.raises(InputError, match="no estimator named 'crystal-ball'"):
        admit(dataclasses.replace(req, policy=policy), db_url=f"sqlite:///{tmp_path / 'e.sqlite3'}")
    assert not (tmp_path / "e.sqlite3").exists()


def test_a_policy_cannot_trust_an_estimator_it_does_not_consult() -> None:
    req = load_request(SNAP, EMB)
    with pytest.raises(ValueError, match="decide_on_prediction names analytical"):
        req.policy.model_validate({**req.policy.model_dump(), "decide_on_prediction": ("analytical",)})


def test_coverage_checked_on_two_outcomes_never_decides(tmp_path: Path) -> None:
    """The reported case in miniature: a policy that trusts transfer with min_calibration_outcomes 10,
    and a store of 12 records (11 transfer outcomes; at 0.9 the first 9 give the first finite quantile,
    so 2 are checked). The prediction is shown and the pair probed; the certificate says why."""
    path = tmp_path / "e.sqlite3"
    url = migrated_sqlite(path)
    req = _request()
    req = dataclasses.replace(req, policy=req.policy.model_validate(
        {**req.policy.model_dump(), "min_calibration_outcomes": 10}))
    _seed_history(url, req, n=12)
    cert = admit(req, db_url=url, now=lambda: T0)
    assert cert.decided_by != "predicted" and cert.probe is not None
    (p,) = cert.predictions
    assert p.outcomes == 11 and not p.calibrated and p.used_as != "decision"
    assert "over 2 checked of 11 outcomes" in p.calibration
    assert "coverage checked on 2 outcome(s); deciding needs 36 at 0.9" in p.calibration
    assert "deciding needs 36" in certificate_text(cert)


def test_a_consulted_estimator_that_cannot_predict_is_a_caveat(tmp_path: Path) -> None:
    """An empty store: transfer has no neighbouring evidence. Alone, the certificate has no prediction
    and says no consulted estimator could predict the resident; beside analytical, it says transfer
    could not."""
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    cert = admit(_request(estimators=("transfer",), decide=("transfer",)), db_url=url, now=lambda: T0)
    assert cert.predictions == ()
    assert any(c.startswith("no consulted estimator (transfer) could predict resident comms") for c in cert.caveats)
    assert "note: no consulted estimator (transfer) could predict resident comms" in certificate_text(cert)
    url2 = migrated_sqlite(tmp_path / "f.sqlite3")
    cert = admit(_request(estimators=("transfer", "analytical"), decide=()), db_url=url2, now=lambda: T0)
    (p,) = cert.predictions
    assert p.estimator == "analytical"
    assert any(c.startswith("estimator transfer could not predict resident comms: ") for c in cert.caveats)
