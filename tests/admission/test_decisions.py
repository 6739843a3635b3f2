"""The admission decisions as tables: one row per case, inputs in (stage 1's result, the evidence per
pair, the probe results, the policy), the expected decision out. No store, no probe, no clock: the
decisions are pure functions (canary/admission/decisions.py). Each expectation follows from the rule
the row names (docs/canary.md, docs/architecture.md), not from running the code."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Literal

import pytest

from canary._model import PairKey
from canary.admission import Request, load_request, pair_key
from canary.admission.decisions import (
    REVALIDATION_TRIGGERS,
    Decision,
    PairEvidence,
    ProbeRun,
    ReservationPlan,
    bound_checked,
    cache_decision,
    hard_fit_decision,
    make_certificate,
    pairs_needing_probe,
    probe_decision,
    reservation_plan,
)
from canary.certificate import Finding, GpuInstancePlacement, HardFit
from canary.probe.judge import DecidingRule, Judgment
from canary.probe.orchestrator import Outcome, ProbeResult
from canary.regime import Regime
from canary.snapshot import Resident
from tests.support.paths import EXAMPLES

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
GiB = 1 << 30

Residents = Literal["none", "profiled", "unprofiled"]


def _request(
    *,
    residents: Residents = "profiled",
    regime: Regime | None = None,
    on_unprofiled: Literal["unknown", "reject"] = "unknown",
    on_inconclusive: Literal["unknown", "reject"] = "unknown",
    min_confidence: float | None = None,
) -> Request:
    """The example MPS room (one profiled resident, ``comms``), reshaped by the row's columns."""
    req = load_request(SNAP, EMB)
    snap = req.snapshot
    if residents == "none":  # nothing runs: no resident, and the MPS server has no client left
        snap = snap.model_copy(update={"residents": (), "mps": snap.mps.model_copy(update={"clients": 0})})
    elif residents == "unprofiled":
        snap = snap.model_copy(update={"residents": (*snap.residents, Resident(name="mystery", pid=4242))})
    changes: dict[str, object] = {"on_unprofiled_resident": on_unprofiled, "on_probe_inconclusive": on_inconclusive}
    if min_confidence is not None:
        changes["min_evidence_confidence"] = min_confidence
    policy = req.policy.model_copy(update=changes)
    device = dataclasses.replace(req.device, snapshot=snap)
    return dataclasses.replace(req, device=device, policy=policy, regime=regime or req.regime)


def _finding(resource: str, verdict: Literal["yes", "no", "unknown"], detail: str = "",
             available: int | str | None = 10 * GiB) -> Finding:
    return Finding(resource=resource, demand=GiB, available=available, unit="bytes", verdict=verdict,
                   source="test", detail=detail)


def _hard(verdict: Literal["yes", "no", "unknown"], *findings: Finding, limiting: str | None = None,
          regime: str = "mps:50") -> HardFit:
    return HardFit(regime=regime, verdict=verdict, findings=findings or (_finding("hbm", "yes"),),
                   limiting_resource=limiting)


# --------------------------------------------------------------------------- stage 1 alone

HARD_FIT_CASES = [
    pytest.param(
        _hard("no", _finding("hbm", "no", "4 GiB short"), limiting="hbm"), "profiled", None, "unknown",
        ("reject", "hard-fit", 1.0, "does not fit: hbm — 4 GiB short"),
        id="no-is-a-certain-reject",
    ),
    pytest.param(
        _hard("no", _finding("hbm", "no"), limiting="hbm"), "profiled", None, "unknown",
        ("reject", "hard-fit", 1.0, "does not fit: hbm — demand exceeds availability"),
        id="no-without-detail-says-demand-exceeds-availability",
    ),
    pytest.param(
        _hard("unknown", _finding("sm_coresidency", "unknown", "resident kernels unknown"),
              limiting="sm_coresidency"), "profiled", None, "reject",
        ("unknown", "hard-fit", None, "cannot tell whether it fits: sm_coresidency — resident kernels unknown"),
        id="unknown-stays-unknown-when-every-resident-is-profiled",
    ),
    pytest.param(
        _hard("unknown", _finding("hbm", "unknown", "resident memory unknown"), limiting="hbm"),
        "unprofiled", None, "unknown",
        ("unknown", "hard-fit", None, "cannot tell whether it fits: hbm — resident memory unknown"),
        id="unknown-next-to-unprofiled-is-unknown-by-default",
    ),
    pytest.param(
        _hard("unknown", _finding("hbm", "unknown", "resident memory unknown"), limiting="hbm"),
        "unprofiled", None, "reject",
        ("reject", "policy", None, "rejects next to unprofiled resident(s) mystery"),
        id="unknown-next-to-unprofiled-is-a-policy-reject-when-the-policy-says-so",
    ),
    pytest.param(
        _hard("yes"), "none", None, "unknown",
        ("admit", "hard-fit", 1.0, "nothing else runs on the device"),
        id="fits-on-an-empty-device",
    ),
    pytest.param(
        _hard("yes", regime="mig:1g.18gb"), "profiled", Regime("mig", mig_profile="1g.18gb"), "unknown",
        ("admit", "hard-fit", 1.0, "its own MIG instance"),
        id="fits-in-an-isolated-mig-instance",
    ),
    pytest.param(
        _hard("yes"), "profiled", None, "unknown", None,
        id="fits-next-to-a-resident-leaves-interference-to-judge",
    ),
    pytest.param(
        _hard("yes"), "unprofiled", None, "reject", None,
        id="fits-next-to-an-unprofiled-resident-is-still-for-the-evidence-to-judge",
    ),
]


@pytest.mark.parametrize(("hard", "residents", "regime", "on_unprofiled", "expected"), HARD_FIT_CASES)
def test_hard_fit_decision(
    hard: HardFit, residents: Residents, regime: Regime | None, on_unprofiled: Literal["unknown", "reject"],
    expected: tuple[str, str, float | None, str] | None,
) -> None:
    req = _request(residents=residents, regime=regime, on_unprofiled=on_unprofiled)
    decision = hard_fit_decision(req, hard, booked_bytes=0)  # the store read: nothing booked
    if expected is None:
        assert decision is None
        return
    assert decision is not None
    verdict, decided_by, confidence, reason = expected
    assert (decision.verdict, decision.decided_by, decision.confidence) == (verdict, decided_by, confidence)
    assert reason in decision.reason
    assert decision.evidence == () and decision.probe is None and decision.reservations == ()


# --------------------------------------------------------------------------- the evidence

KEY = PairKey(resident_version="1", resident_shape_family="f", candidate_version="2", candidate_shape_family="g",
              device_type="h100-sxm", regime="mps:50")
T1, T2 = NOW - dt.timedelta(hours=3), NOW - dt.timedelta(hours=1)


def _safe(resident: str, confidence: float | None, interval: tuple[float, float] | None,
          at: dt.datetime | None) -> PairEvidence:
    return PairEvidence(resident, KEY, "safe", ids=(f"ev-{resident}",), timestamp=at, confidence=confidence,
                        interval_pct=interval, sources=("canary",), reason="pooled")


UNSAFE = PairEvidence("b", KEY, "unsafe", ids=("ev-b",), timestamp=T1, confidence=0.97, interval_pct=(12.0, 30.0),
                      sources=("production",), reason="a production violation")
MISSING = PairEvidence("c", KEY, None, reason="no evidence for this pair")
UNKEYED = PairEvidence("d", None, None, reason="resident d has no profile")

CACHE_CASES = [
    pytest.param(
        [_safe("a", 0.99, (1.0, 4.0), T2), UNSAFE, MISSING], None,
        ("reject", "cache", 0.97, (12.0, 30.0), T1 + dt.timedelta(hours=1),
         "the pair with b is unsafe: a production violation"),
        id="unsafe-evidence-rejects-even-beside-missing-evidence-until-that-evidence-runs-out",
    ),
    pytest.param(
        [_safe("a", 0.99, (1.0, 4.0), T2), MISSING], None,
        ("unknown", "hard-fit", None, None, None, "c: no evidence for this pair"),
        id="a-pair-without-evidence-leaves-it-unknown",
    ),
    pytest.param(
        [_safe("a", 0.80, (1.0, 4.0), T2)], 0.9,
        ("unknown", "hard-fit", None, None, None, "a: evidence confidence 0.8 is below the policy's 0.9"),
        id="evidence-below-the-policy-confidence-is-not-enough",
    ),
    pytest.param(
        [_safe("a", None, (1.0, 4.0), T2)], 0.5,
        ("unknown", "hard-fit", None, None, None, "a: evidence confidence None is below the policy's 0.5"),
        id="evidence-without-a-confidence-counts-as-none",
    ),
    pytest.param(
        [_safe("a", 0.99, (1.0, 4.0), T2), _safe("b", 0.95, (-2.0, 3.0), T1)], 0.9,
        ("admit", "cache", 0.95, (-2.0, 4.0), T1 + dt.timedelta(hours=1), "fresh evidence says every pair"),
        id="fresh-evidence-for-every-pair-admits-with-the-weakest-confidence-and-the-oldest-expiry",
    ),
    pytest.param(
        [dataclasses.replace(_safe("a", 0.99, (1.0, 4.0), T2), expires_at=T2 + dt.timedelta(minutes=20)),
         _safe("b", 0.95, (-2.0, 3.0), T2)], 0.9,
        ("admit", "cache", 0.95, (-2.0, 4.0), T2 + dt.timedelta(minutes=20), "fresh evidence says every pair"),
        id="a-record-that-expires-before-its-ttl-ends-the-certificate-then",
    ),
    pytest.param(
        [_safe("a", 0.99, None, None)], 0.9,
        ("admit", "cache", 0.99, None, None, "fresh evidence says every pair"),
        id="evidence-without-interval-or-timestamp-predicts-no-range-and-no-expiry",
    ),
]


@pytest.mark.parametrize(("evidence", "min_confidence", "expected"), CACHE_CASES)
def test_cache_decision(
    evidence: list[PairEvidence], min_confidence: float | None,
    expected: tuple[str, str, float | None, tuple[float, float] | None, dt.datetime | None, str],
) -> None:
    req = _request(min_confidence=min_confidence)
    req = dataclasses.replace(req, policy=req.policy.model_copy(update={"evidence_ttl_s": 3600}))
    decision = cache_decision(req, evidence)
    verdict, decided_by, confidence, predicted, expires, reason = expected
    assert (decision.verdict, decision.decided_by, decision.confidence) == (verdict, decided_by, confidence)
    assert decision.predicted_slowdown_pct == predicted
    assert decision.expires_at == expires
    assert reason in decision.reason
    assert decision.evidence == tuple(evidence)


@pytest.mark.parametrize(("evidence", "expected"), [
    pytest.param([MISSING, _safe("a", 0.99, None, T1)], [KEY], id="only-the-pairs-without-evidence"),
    pytest.param([MISSING, UNKEYED], [], id="none-when-a-resident-without-profile-leaves-it-unknown-anyway"),
    pytest.param([_safe("a", 0.99, None, T1)], [], id="none-when-every-pair-has-evidence"),
])
def test_pairs_needing_probe(evidence: list[PairEvidence], expected: list[PairKey]) -> None:
    assert pairs_needing_probe(evidence) == expected


# --------------------------------------------------------------------------- the probes


def _run(resident: str, outcome: Outcome, estimate: float | None, interval: tuple[float, float] | None,
         confidence: float | None, reason: str = "judged", rule: DecidingRule = "judge") -> ProbeRun:
    req = _request()
    budget = req.policy.budget_for("online-inference")
    judgment = Judgment(label="safe" if outcome == "safe" else "unsafe" if outcome == "unsafe" else "inconclusive",
                        estimate_pct=estimate, interval_pct=interval, confidence=confidence or 0.0, window_pairs=8,
                        raw_samples=80, reason=reason, rule=rule)
    result = ProbeResult(
        probe_id=f"probe-{resident}", outcome=outcome, state="RECORDED", transitions=(), judgment=judgment,
        slowdown_estimate_pct=estimate, slowdown_interval_pct=interval, confidence=confidence, samples=80,
        window_pairs=8, exposure_used=40, time_used_s=4.0, wall_time_s=4.0, windows=16,
        rollback_reason="decided", rollback_verified=True, rollback_detail="", simulated=True, budget=budget)
    return ProbeRun(resident, KEY, result)


SAFE_A = _run("a", "safe", 1.5, (0.5, 3.0), 0.96)
SAFE_B = _run("b", "safe", 2.5, (1.0, 6.0), 0.93)
UNSAFE_B = _run("b", "unsafe", 25.0, (18.0, 31.0), 0.98, reason="the test rejects 'within 10%'")
INCONCLUSIVE_B = _run("b", "inconclusive", 4.0, (-5.0, 14.0), None, reason="budget spent")
CACHED_C = _safe("c", 0.91, (0.0, 2.0), T1)
# An SLO breach in the first on-window: no slowdown estimate, no confidence, the breach's own numbers.
SLO_BREACH_B = _run("b", "unsafe", None, None, None, rule="slo",
                    reason="slo-breach: resident p99 22.00 ms > SLO 20 ms with the canary on")

PROBE_CASES = [
    pytest.param(
        [SAFE_A, SAFE_B], [CACHED_C], "unknown",
        ("admit", 0.91, (0.5, 6.0), "every resident within its slowdown bound", "probe-b"),
        id="every-probe-safe-admits-with-the-weakest-confidence-of-probes-and-evidence",
    ),
    pytest.param(
        [SAFE_A, UNSAFE_B], [CACHED_C], "unknown",
        ("reject", 0.98, (18.0, 31.0), "resident b slowing down beyond its bound (25.0% vs", "probe-b"),
        id="one-unsafe-probe-rejects",
    ),
    pytest.param(
        [INCONCLUSIVE_B, SAFE_A], [], "unknown",
        ("unknown", None, None, "could not decide for resident b within its budget (inconclusive: budget spent)",
         "probe-a"),
        id="an-inconclusive-probe-leaves-it-unknown",
    ),
    pytest.param(
        [SAFE_A, INCONCLUSIVE_B], [], "reject",
        ("reject", None, None, "could not decide for resident b", "probe-b"),
        id="an-inconclusive-probe-rejects-when-the-policy-says-so",
    ),
    pytest.param(
        [UNSAFE_B, INCONCLUSIVE_B], [], "unknown",
        ("reject", 0.98, None, "resident b slowing down beyond its bound", "probe-b"),
        id="unsafe-outweighs-inconclusive",
    ),
    pytest.param(
        [SAFE_A, SLO_BREACH_B], [], "unknown",
        ("reject", None, None, "resident b past its latency SLO in an on-window and was rolled back at once "
         "(slo-breach: resident p99 22.00 ms > SLO 20 ms with the canary on)", "probe-b"),
        id="an-slo-breach-says-so-instead-of-an-unknown-slowdown-beyond-its-bound",
    ),
]


@pytest.mark.parametrize(("runs", "cached", "on_inconclusive", "expected"), PROBE_CASES)
def test_probe_decision(
    runs: list[ProbeRun], cached: list[PairEvidence], on_inconclusive: Literal["unknown", "reject"],
    expected: tuple[str, float | None, tuple[float, float] | None, str, str],
) -> None:
    decision = probe_decision(_request(on_inconclusive=on_inconclusive), runs, cached)
    verdict, confidence, predicted, reason, summarised = expected
    assert (decision.verdict, decision.decided_by, decision.confidence) == (verdict, "canary", confidence)
    assert reason in decision.reason
    assert decision.evidence == tuple(cached)
    assert decision.probe is not None and decision.probe.probe_id == summarised  # the last probe is summarised
    if verdict != "reject" or predicted is not None:
        assert decision.predicted_slowdown_pct == predicted


# --------------------------------------------------------------------------- booking and the certificate


UUID = "GPU-6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e"  # the example snapshot's device


@pytest.mark.parametrize(("regime", "placement", "expected"), [
    pytest.param(None, None, ReservationPlan(UUID, 2 * GiB, 13 * GiB),
                 id="shared-device-books-the-demand-against-what-bookings-share"),
    pytest.param(Regime("mig", mig_profile="1g.18gb"), GpuInstancePlacement(profile="1g.18gb", start=4, size=1),
                 ReservationPlan(f"{UUID}/mig:1g.18gb@4", 2 * GiB, 13 * GiB, "1g.18gb@4"),
                 id="mig-books-against-its-own-instance-named-by-its-start"),
])
def test_reservation_plan(regime: Regime | None, placement: GpuInstancePlacement | None,
                          expected: ReservationPlan) -> None:
    req = _request(regime=regime)
    hard = _hard("yes").model_copy(update={"memory_demand_bytes": 2 * GiB, "bookable_memory_bytes": 13 * GiB,
                                           "mig_placement": placement})
    assert reservation_plan(req, hard) == expected


@pytest.mark.parametrize(("regime", "numbers"), [
    pytest.param(None, {"memory_demand_bytes": None, "bookable_memory_bytes": 13 * GiB}, id="demand-unknown"),
    pytest.param(None, {"memory_demand_bytes": 2 * GiB, "bookable_memory_bytes": None}, id="capacity-unknown"),
    pytest.param(Regime("mig", mig_profile="1g.18gb"),
                 {"memory_demand_bytes": 2 * GiB, "bookable_memory_bytes": 13 * GiB, "mig_placement": None},
                 id="mig-without-placement"),
])
def test_nothing_is_booked_on_unknown_numbers(regime: Regime | None, numbers: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="nothing can be booked"):
        reservation_plan(_request(regime=regime), _hard("yes").model_copy(update=numbers))


@pytest.mark.parametrize(("decision", "expires", "ttl", "evidence_outcome"), [
    pytest.param(Decision("admit", "fits", "hard-fit", confidence=1.0), NOW + dt.timedelta(seconds=3600), 3600,
                 None, id="a-decided-verdict-expires-after-the-evidence-ttl"),
    pytest.param(Decision("admit", "cached", "cache", evidence=(_safe("comms", 0.99, (1.0, 2.0), T1),),
                          expires_at=T1 + dt.timedelta(seconds=3600)),
                 T1 + dt.timedelta(seconds=3600), 3600, "admit", id="a-cache-decision-expires-with-its-evidence"),
    pytest.param(Decision("unknown", "not known", "hard-fit", evidence=(MISSING,)), None, None, None,
                 id="unknown-never-expires-it-is-revalidated"),
])
def test_make_certificate(decision: Decision, expires: dt.datetime | None, ttl: int | None,
                          evidence_outcome: str | None) -> None:
    req = _request()
    req = dataclasses.replace(req, policy=req.policy.model_copy(update={"evidence_ttl_s": 3600}))
    cert = make_certificate(req, _hard("yes"), decision, NOW)
    assert (cert.verdict, cert.reason, cert.decided_by) == (decision.verdict, decision.reason, decision.decided_by)
    assert cert.expiry_or_revalidation_trigger.expires_at == expires
    assert cert.expiry_or_revalidation_trigger.ttl_s == ttl
    assert cert.expiry_or_revalidation_trigger.triggers == REVALIDATION_TRIGGERS
    assert cert.issued_at == NOW and cert.device.uuid == req.snapshot.uuid
    assert [r.name for r in cert.residents] == [r.name for r in req.snapshot.residents]
    if decision.evidence:
        assert cert.evidence is not None and cert.evidence.outcome == evidence_outcome
    else:
        assert cert.evidence is None


def test_pair_key_names_both_versions_the_device_and_the_regime() -> None:
    req = _request()
    resident = req.snapshot.residents[0]
    assert resident.profile is not None
    key = pair_key(req, resident)
    assert key is not None
    assert (key.resident_version, key.candidate_version) == (resident.profile.version, req.candidate.version)
    assert (key.device_type, key.regime) == (req.spec.name, str(req.regime))
    assert pair_key(req, Resident(name="mystery", pid=1)) is None


# --------------------------------------------------------------------------- evidence against today's bound

def _comms(outcome: str, estimate: float | None, interval: tuple[float, float] | None) -> PairEvidence:
    return PairEvidence("comms", KEY, outcome, ids=("ev-comms-0001",), timestamp=T2, confidence=0.95,
                        slowdown_pct=estimate, interval_pct=interval, sources=("import",), reason="pooled")


@pytest.mark.parametrize(("evidence", "kept"), [
    # The example room's resident `comms` is a training workload without an SLO bound of its own: the
    # default policy's training budget bounds it at 15%.
    pytest.param(_comms("safe", 20.0, None), False, id="safe-at-20-percent-is-not-safe-under-15"),
    pytest.param(_comms("safe", 9.0, (4.0, 15.5)), False, id="safe-whose-upper-end-passes-15-is-set-aside"),
    pytest.param(_comms("safe", 9.0, (4.0, 15.0)), True, id="safe-whose-upper-end-is-on-the-bound-holds"),
    pytest.param(_comms("safe", None, None), True, id="safe-without-numbers-stands-on-its-verdict"),
    pytest.param(_comms("unsafe", 14.0, (12.0, 30.0)), False, id="unsafe-whose-lower-end-is-under-15-is-set-aside"),
    pytest.param(_comms("unsafe", 40.0, (15.5, 60.0)), True, id="unsafe-whose-lower-end-passes-15-holds"),
])
def test_evidence_judged_against_another_bound_is_set_aside(evidence: PairEvidence, kept: bool) -> None:
    """A record's verdict was reached against the bound of its day (an import, a looser policy): under
    today's 15% it counts only while its interval (else its estimate) is on the same side. Set aside, the
    pair has no usable evidence: the decision is unknown and the pair is probed against today's bound."""
    req = _request()
    assert [r.name for r in req.snapshot.residents] == ["comms"]
    checked = bound_checked(req, [evidence])
    if kept:
        assert checked == [evidence]
        return
    (e,) = checked
    assert e.outcome is None and e.key == KEY and "the resident's bound of 15% today" in e.reason
    decision = cache_decision(req, checked)
    assert decision.verdict == "unknown" and pairs_needing_probe(checked) == [KEY]
