"""The built-in estimators on real inputs (example profiles, a migrated SQLite store, the simulator)
and third-party estimators through the ``canary.estimators`` entry point group."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest

from canary._model import PairKey
from canary.admission import load_request, pair_key
from canary.bench.policies import predicted_slowdown_pct
from canary.errors import InputError
from canary.estimate import (
    Estimate,
    EstimateQuery,
    NoEstimate,
    assess,
    available_estimators,
    load_estimator,
    value_of_information,
)
from canary.estimate.analytical import AnalyticalEstimator
from canary.estimate.simulator import SimulatorEstimator
from canary.estimate.store import StoreReader, transfer_outcomes
from canary.estimate.transfer import SIMILARITY, TransferEstimator, neighbour_kind
from canary.regime import Regime
from canary.snapshot import Resident
from evidence_store.database import session_scope
from evidence_store.evidence import record_evidence
from evidence_store.migrate import open_store
from evidence_store.schemas import EvidenceIn
from tests.support.paths import EXAMPLES
from tests.support.stores import migrated_sqlite

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
RESNET = str(EXAMPLES / "profiles" / "resnet50-training.yaml")
T0 = dt.datetime(2026, 1, 5, 8, 0, tzinfo=dt.UTC)


def _query(snapshot: str = SNAP, candidate: str = EMB, residents: tuple[str, ...] = (), reader: object = None,
           regime: str | None = None) -> EstimateQuery:
    req = load_request(snapshot, candidate, resident_paths=residents, regime=regime)
    kwargs = {"reader": reader} if reader is not None else {}
    return EstimateQuery(candidate=req.candidate, resident=req.snapshot.residents[-1], spec=req.spec,
                         regime=req.regime, residents=req.snapshot.residents, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- analytical


def test_analytical_is_the_benchmark_phase_layer() -> None:
    req = load_request("h100", EMB, resident_paths=(RESNET,))
    q = _query("h100", EMB, (RESNET,))
    est = AnalyticalEstimator().estimate(q)
    assert isinstance(est, Estimate)
    assert est.point_pct == pytest.approx(predicted_slowdown_pct(req))
    assert est.lo_pct < est.point_pct < est.hi_pct
    assert "regime" in " ".join(est.inputs)


def test_analytical_under_mig_predicts_no_slowdown() -> None:
    q = _query()
    q = EstimateQuery(candidate=q.candidate, resident=q.resident, spec=q.spec, regime=Regime("mig", mig_profile="1g.10gb"))
    est = AnalyticalEstimator().estimate(q)
    assert isinstance(est, Estimate) and est.point_pct == 0.0


def test_analytical_has_no_estimate_for_an_unprofiled_resident() -> None:
    q = _query()
    q = EstimateQuery(candidate=q.candidate, resident=Resident(name="mystery", pid=42), spec=q.spec, regime=q.regime)
    out = AnalyticalEstimator().estimate(q)
    assert isinstance(out, NoEstimate) and "mystery has no profile" in out.reason


# --------------------------------------------------------------------------- transfer


def _key(**changes: str) -> PairKey:
    q = _query()
    req = load_request(SNAP, EMB)
    key = pair_key(req, q.resident)
    assert key is not None
    return PairKey(**{**key.as_dict(), **changes})


def _record(url: str, key: PairKey, slowdown: float, at: dt.datetime, n: int, outcome: str = "safe") -> str:
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            out = record_evidence(session, EvidenceIn(
                probe_id=f"probe-{n}", key=key, source="canary", outcome=outcome,
                resident_slowdown_pct=slowdown, resident_slowdown_low_pct=slowdown - 1.0,
                resident_slowdown_high_pct=slowdown + 1.0, samples=100, exposure_used=10, time_used_s=30.0,
                confidence=0.95, created_at=at, expires_at=at + dt.timedelta(days=7)))
        return str(out.id)
    finally:
        engine.dispose()


@pytest.mark.parametrize(("changes", "kind"), [
    pytest.param({}, "same-key", id="the-pair-itself"),
    pytest.param({"device_type": "a100-80gb"}, "other-device", id="another-device-type"),
    pytest.param({"regime": "timeslice"}, "other-regime", id="another-regime"),
    pytest.param({"candidate_version": "0.9"}, "other-version", id="an-earlier-candidate-version"),
    pytest.param({"resident_shape_family": "x"}, "other-shape", id="another-shape-family"),
    pytest.param({"device_type": "a100-80gb", "regime": "timeslice"}, None, id="two-parts-differ-no-neighbour"),
])
def test_neighbour_kinds(changes: dict[str, str], kind: str | None) -> None:
    assert neighbour_kind(_key(), _key(**changes)) == kind


def test_transfer_from_another_device_type_is_wider_than_from_an_earlier_version(tmp_path: Path) -> None:
    near, far = migrated_sqlite(tmp_path / "near.sqlite3"), migrated_sqlite(tmp_path / "far.sqlite3")
    ev_near = _record(near, _key(candidate_version="0.9"), 4.0, T0, 1)
    _record(far, _key(regime="timeslice"), 4.0, T0, 1)
    a = TransferEstimator().estimate(_query(reader=StoreReader(open_store(near))))
    b = TransferEstimator().estimate(_query(reader=StoreReader(open_store(far))))
    assert isinstance(a, Estimate) and isinstance(b, Estimate)
    assert a.point_pct == b.point_pct == 4.0
    assert (a.hi_pct - a.lo_pct) < (b.hi_pct - b.lo_pct)  # similarity 0.7 against 0.5
    assert SIMILARITY["other-version"] > SIMILARITY["other-regime"]
    assert any(ev_near in i for i in a.inputs) and "other-version" in a.detail


def test_transfer_prefers_the_most_similar_neighbour(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    _record(url, _key(regime="timeslice"), 40.0, T0, 1, outcome="unsafe")
    _record(url, _key(candidate_version="0.9"), 2.0, T0, 2)
    est = TransferEstimator().estimate(_query(reader=StoreReader(open_store(url))))
    assert isinstance(est, Estimate) and est.point_pct == 2.0


def test_transfer_without_neighbours_is_no_estimate(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    _record(url, _key(device_type="a100-80gb", regime="timeslice"), 3.0, T0, 1)
    out = TransferEstimator().estimate(_query(reader=StoreReader(open_store(url))))
    assert isinstance(out, NoEstimate) and "no measured evidence on a neighbouring pair key" in out.reason


def test_transfer_outcomes_use_only_earlier_records(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "e.sqlite3")
    for i in range(4):
        _record(url, _key(candidate_version=f"0.{i}"), float(i), T0 + dt.timedelta(hours=i), i)
    outcomes = sorted(transfer_outcomes(StoreReader(open_store(url)).records()), key=lambda o: o.at)
    assert len(outcomes) == 3  # the oldest record has nothing before it
    assert {o.group for o in outcomes} == {"other-version"}
    assert outcomes[0].point_pct == 0.0 and outcomes[0].measured_pct == 1.0
    assert outcomes[-1].point_pct == pytest.approx(1.0) and outcomes[-1].measured_pct == 3.0


# --------------------------------------------------------------------------- simulator


def test_simulator_estimates_the_pair_and_the_unsafe_one_higher() -> None:
    safe = SimulatorEstimator(runs=2, duration_s=5.0).estimate(_query())
    unsafe = SimulatorEstimator(runs=2, duration_s=5.0).estimate(_query("h100", EMB, (RESNET,)))
    assert isinstance(safe, Estimate) and isinstance(unsafe, Estimate)
    assert safe.lo_pct <= safe.point_pct <= safe.hi_pct
    assert unsafe.point_pct > safe.point_pct + 10


# --------------------------------------------------------------------------- choosing and ordering


def test_assess_without_outcomes_is_uncalibrated_and_lists_what_it_tried() -> None:
    out = assess(_query(), [AnalyticalEstimator(), TransferEstimator()], [], confidence=0.95, min_outcomes=30)
    assert not isinstance(out, NoEstimate)
    assert out.estimate.estimator == "analytical" and out.calibrated_interval is None
    assert any(c.startswith("transfer: no measured evidence") for c in out.considered)


@pytest.mark.parametrize(("interval", "bound", "expected"), [
    pytest.param(None, 10.0, 1.0, id="nothing-known-is-worth-most"),
    pytest.param((0.0, 20.0), 10.0, 1.0, id="bound-in-the-middle"),
    pytest.param((8.0, 18.0), 10.0, 0.7, id="straddling-off-centre"),
    pytest.param((0.0, 5.0), 10.0, 0.5 / 2.0, id="clear-below-one-width-away"),
    pytest.param((30.0, 40.0), 10.0, 0.5 / 3.0, id="clear-above-two-widths-away"),
])
def test_value_of_information(interval: tuple[float, float] | None, bound: float, expected: float) -> None:
    assert value_of_information(interval, bound) == pytest.approx(expected)


# --------------------------------------------------------------------------- entry points


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, target: str, module_text: str) -> None:
    """A distribution in ``tmp_path`` (one module per test: a module name is imported once per process)
    whose entry point ``name`` in ``canary.estimators`` is ``MODULE:target``."""
    module = f"thirdparty_est_{name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(module_text), encoding="utf-8")
    dist = tmp_path / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[canary.estimators]\n{name} = {module}:{target}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_third_party_estimator_loads_through_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "constant", "Constant", """
        from canary.estimate import Estimate

        class Constant:
            name = "constant"

            def estimate(self, query):
                return Estimate("constant", 1.0, 3.0, 2.0, ("nothing",), "always 2%")
    """)
    assert "constant" in available_estimators()
    est = load_estimator("constant")
    out = est.estimate(_query())
    assert isinstance(out, Estimate) and out.point_pct == 2.0


def test_an_entry_point_that_misnames_itself_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "liar", "Liar", """
        class Liar:
            name = "someone-else"

            def estimate(self, query):
                raise AssertionError("never called")
    """)
    with pytest.raises(InputError, match="calls itself 'someone-else'"):
        load_estimator("liar")


def test_an_unknown_estimator_is_input_error_naming_the_field() -> None:
    with pytest.raises(InputError) as info:
        load_estimator("crystal-ball")
    assert info.value.field == "estimators" and "analytical" in str(info.value)
