"""Run the suite: ground truth, every policy on every scenario, tuning, metrics, invariants.

The only IO is the temporary evidence store of the full engine (a fresh SQLite file per run, so
the cache starts empty and fills as pairs repeat) and the wall clock, which is measured for the
report and kept in fields named ``wall_*`` — everything else in the results is a function of the
seed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import re
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from canary.bench.metrics import Outcome, by_family, summarize, tuning_key
from canary.bench.policies import (
    Decision,
    FullEngine,
    PlusMemory,
    PlusOccupancy,
    PlusPhases,
    PlusStaticResources,
    ScenarioView,
    UtilizationOnly,
    stage1_decision,
)
from canary.bench.scenarios import COUNTERS, FAMILIES, HARD_FIT_FAMILIES, Scenario, build_suite
from canary.bench.truth import Truth, ground_truth

TELEMETRY_WINDOW_S = 5.0
# A fixed simulated calendar: scenario i is asked at BASE + i minutes, so evidence timestamps,
# TTLs and reservation leases are reproducible.
BASE_TIME = dt.datetime(2026, 1, 5, 8, 0, tzinfo=dt.UTC)
UTIL_GRID_PCT: tuple[float, ...] = (*tuple(float(v) for v in range(0, 101, 5)), 101.0)
OCC_GRID_PCT: tuple[float, ...] = (*tuple(float(v) for v in range(0, 101, 10)), 101.0)

ENGINE = "+pairwise evidence (full engine)"
PHASES = "+phase/time structure"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Row:
    """Everything about one scenario: truth, what the scheduler saw, and each policy's decision."""

    scenario: Scenario
    truth: Truth
    view: ScenarioView
    telemetry: dict[str, float | None]
    decisions: dict[str, Decision]
    wall_s: dict[str, float]


def scenario_seed(seed: int, scenario: Scenario, stream: str = "probe") -> int:
    """A seed per scenario and random stream from the run's seed and the scenario's id (a repeat uses
    its original's), so the quick subset draws the same numbers as the full run. The ``truth`` stream
    and the ``probe`` stream (telemetry, canary) are independent: a probe that shares the truth's
    random numbers would be judged against its own noise."""
    key = scenario.repeat_of or scenario.id
    return (seed * 1_000_003 + zlib.crc32(f"{stream}:{key}".encode())) % (2**31)


#: Families that are consistency checks, not evidence: their truth comes from the same physical rules
#: stage 1 implements (compute mode, MIG placement, occupancy), so the engine's score there shows that
#: the two agree, not that stage 1 is right against hardware.
CONSISTENCY_FAMILIES = HARD_FIT_FAMILIES
#: Families left out of the headline totals, with the reason.
OUT_OF_HEADLINE = {
    "gavel": "Gavel's V100 pairs are replayed under the simulator's calibrated time-slice regime, but the "
    "simulated probe's slowdowns miss Gavel's measurements by a median of about 49 points on these pairs "
    "(docs/benchmark.md): the family scores the simulator, not the engine; reported per family, not in the "
    "headline",
}


def deciding_rule(decision: Decision) -> str:
    """What decided one of the engine's answers: ``hard-fit`` (stage 1), ``cache`` (an earlier probe's
    evidence), ``not-now`` (the resident breaches its SLO alone, so the candidate never ran),
    ``unmeasurable`` (no window the budget allows holds a statistic), the probe's rule — ``judge``,
    ``guard``, ``slo``, ``stall``, ``futility``, ``budget`` — or ``error`` (the policy failed). A canary
    decision without a recorded rule says so (``unrecorded``) instead of borrowing one."""
    if decision.error is not None:
        return "error"
    if decision.decided_by == "canary":
        cause = (decision.probe or {}).get("abort_cause")
        if cause == "resident-over-slo":
            return "not-now"
        if cause:
            return str(cause)
        return decision.rule or "unrecorded"
    return decision.decided_by or "unrecorded"


def rejection_cause(decision: Decision) -> str | None:
    """What made the engine reject (``deciding_rule``; ``None`` when it did not reject)."""
    if decision.verdict != "reject":
        return None
    return deciding_rule(decision)


#: The probe's fields results.json keeps for the full engine's canary decisions (its id is random).
PROBE_FIELDS = ("outcome", "decided_by_rule", "abort_cause", "time_used_s", "exposure_used", "windows", "window_s",
                "window_plan", "safe_reachable", "attribution", "rollback_reason", "slowdown_estimate_pct", "slowdown_interval_pct",
                "slowdown_estimand", "confidence", "contrast_sd")


def probe_doc(decision: Decision) -> dict[str, Any] | None:
    """The probe behind a canary decision, as results.json keeps it (``None`` without a probe)."""
    if decision.probe is None:
        return None
    return {k: decision.probe.get(k) for k in PROBE_FIELDS}


def sim_params(sc: Scenario) -> Any:
    """The simulator parameters a scenario is replayed under: Gavel's measured pairs under the regime
    and parameters the simulator's calibration on them chose (``canary.sim.calibrated_regime()``:
    time-slicing, fitted slice and switch cost); every other family under the simulator's defaults
    (``None``)."""
    if sc.family != "gavel":
        return None
    from canary.sim import calibrated_regime

    return calibrated_regime().contention


def _telemetry(sc: Scenario, seed: int) -> Any:
    """Window averages the scheduler reads before the candidate arrives, from the simulated device
    with the residents; counters the scenario lacks are ``None``."""
    from canary.sim import SimDevice

    dev = SimDevice.from_snapshot(sc.snapshot, sc.spec, seed=seed, regime=sc.regime,
                                  params=sim_params(sc))
    telemetry = dev.run_window(TELEMETRY_WINDOW_S).telemetry
    if sc.missing_counters:
        telemetry = telemetry.model_copy(update=dict.fromkeys(sc.missing_counters))
    return telemetry


def _view(sc: Scenario, index: int, seed: int, db_url: str) -> ScenarioView:
    from canary.admission import build_request
    from canary.backends import ResolvedDevice
    from canary.policy import load_policy

    policy = load_policy("default")
    device = ResolvedDevice(snapshot=sc.snapshot, spec=sc.spec, ref=f"bench:{sc.id}", kind="file")
    req = build_request(device, sc.candidate, policy, regime=sc.regime)
    params = sim_params(sc)
    if params is not None:
        req = dataclasses.replace(req, sim_params=params)
    when = BASE_TIME + dt.timedelta(minutes=index)
    return ScenarioView(scenario_id=sc.id, request=req, telemetry=_telemetry(sc, seed),
                        telemetry_window_s=TELEMETRY_WINDOW_S, db_url=db_url, seed=seed, clock=lambda: when)


def _decide(policy: Any, view: ScenarioView) -> tuple[Decision, float]:
    from canary.errors import CanaryError

    started = time.perf_counter()
    try:
        decision = policy.decide(view)
    except CanaryError as exc:
        # A defect in one scenario is reported with its message, not hidden and not fatal.
        decision = Decision("unknown", None, 0.0, 0, decided_by="error", reason=str(exc),
                            error=f"{type(exc).__name__}: {exc}")
    return decision, time.perf_counter() - started


def _outcome(row: Row, decision: Decision) -> Outcome:
    t = row.truth
    return Outcome(
        scenario_id=row.scenario.id, family=row.scenario.family, truth_safe=t.safe, truth_resource=t.resource,
        bound_pct=t.bound_pct, resident_slowdown_pct=t.resident_slowdown_pct,
        resident_p99_slowdown_pct=t.resident_p99_slowdown_pct, verdict=decision.verdict,
        limiting_resource=decision.limiting_resource, time_to_admission_s=decision.time_to_admission_s,
        exposure=decision.exposure, error=decision.error)


def _tune(rows: Sequence[Row], make: Callable[[float, float], Callable[[Row], Decision]],
          grid: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The grid point with the best ``tuning_key`` on the suite (ties: the first in grid order)."""
    best: tuple[tuple[int, int, int], tuple[float, float]] | None = None
    for point in grid:
        decide = make(*point)
        key = tuning_key(_outcome(r, decide(r)) for r in rows)
        if best is None or key < best[0]:
            best = (key, point)
    assert best is not None
    return best[1]


def run_suite(*, quick: bool, seed: int, progress: Progress | None = None,
              families: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and return the results document (see docs/benchmark.md)."""
    from canary.policy import load_policy

    wall_start = time.perf_counter()
    policy = load_policy("default")
    suite, omitted = build_suite(quick=quick, seed=seed)
    if progress is not None:
        for why in omitted:
            progress(f"left out: {why}")
    if families is not None:
        suite = [s for s in suite if s.family in families]
    operator: list[Any] = [UtilizationOnly(), PlusMemory(), PlusOccupancy(), PlusStaticResources(), PlusPhases(),
                           FullEngine()]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="canary-bench-") as tmp:
        db_url = f"sqlite:///{Path(tmp) / 'evidence.sqlite3'}"
        for i, sc in enumerate(suite):
            truth = ground_truth(sc, policy, seed=scenario_seed(seed, sc, "truth"))
            view = _view(sc, i, scenario_seed(seed, sc, "probe"), db_url)
            decisions: dict[str, Decision] = {}
            walls: dict[str, float] = {}
            for p in operator:
                decisions[p.name], walls[p.name] = _decide(p, view)
            tel = {c: (getattr(view.telemetry, c).value if getattr(view.telemetry, c) is not None else None)
                   for c in COUNTERS}
            rows.append(Row(sc, truth, view, tel, decisions, walls))
            if progress is not None:
                e = decisions[ENGINE]
                progress(f"[{i + 1:>2}/{len(suite)}] {sc.family:<9} {sc.id:<48} truth={'safe' if truth.safe else 'unsafe':<6} "
                         f"engine={e.verdict}{' by ' + e.decided_by if e.decided_by else ''} "
                         f"({walls[ENGINE]:.2f}s wall)")

        # Tuned baselines: the best single threshold (pair) on this very suite.
        stage1 = {r.scenario.id: stage1_decision(r.view) for r in rows}
        util_grid = [(u, 0.0) for u in UTIL_GRID_PCT]
        pair_grid = [(u, o) for u in UTIL_GRID_PCT for o in OCC_GRID_PCT]
        tuned_util = _tune(rows, lambda u, _o: (lambda r: UtilizationOnly(u).decide(r.view)), util_grid)[0]
        tuned_mem = _tune(rows, lambda u, _o: (lambda r: PlusMemory(u).decide(r.view)), util_grid)[0]
        tuned_occ = _tune(rows, lambda u, o: (lambda r: PlusOccupancy(u, o).decide(r.view)), pair_grid)
        tuned_static = _tune(rows, lambda u, o: (lambda r: stage1[r.scenario.id] or PlusOccupancy(u, o).interference_decision(r.view)),
                             pair_grid)
        tuned: list[Any] = [UtilizationOnly(tuned_util), PlusMemory(tuned_mem), PlusOccupancy(*tuned_occ),
                            PlusStaticResources(*tuned_static)]
        for r in rows:
            for p in tuned:
                r.decisions[p.name], r.wall_s[p.name] = _decide(p, r.view)

    order = [operator[0].name, tuned[0].name, operator[1].name, tuned[1].name, operator[2].name, tuned[2].name,
             operator[3].name, tuned[3].name, PHASES, ENGINE]
    layers = {p.name: p.layer for p in operator + tuned}
    metrics: dict[str, Any] = {}
    for name in order:
        outs = [_outcome(r, r.decisions[name]) for r in rows]
        metrics[name] = {"overall": summarize(outs), "families": by_family(outs, FAMILIES),
                         "headline": summarize(o for o in outs if o.family not in OUT_OF_HEADLINE),
                         "wall_decide_s": {"mean": sum(r.wall_s[name] for r in rows) / len(rows) if rows else None,
                                           "max": max((r.wall_s[name] for r in rows), default=None)}}
    chain_tuned = [tuned[0].name, tuned[1].name, tuned[2].name, tuned[3].name, PHASES, ENGINE]
    chain_operator = [operator[0].name, operator[1].name, operator[2].name, operator[3].name, PHASES, ENGINE]
    doc: dict[str, Any] = {
        "benchmark": "canary bench",
        "seed": seed,
        "quick": quick,
        "policy": policy.name,
        "telemetry_window_s": TELEMETRY_WINDOW_S,
        "omitted": omitted,
        "families": [f for f in FAMILIES if any(r.scenario.family == f for r in rows)],
        "policies": order,
        "layers": layers,
        "tuned": {
            tuned[0].name: {"util_pct": tuned_util},
            tuned[1].name: {"util_pct": tuned_mem},
            tuned[2].name: {"util_pct": tuned_occ[0], "occupancy_pct": tuned_occ[1]},
            tuned[3].name: {"util_pct": tuned_static[0], "occupancy_pct": tuned_static[1]},
        },
        "scenarios": [_scenario_doc(r, order) for r in rows],
        "metrics": metrics,
        "attribution": {"tuned": attribution(rows, chain_tuned), "operator": attribution(rows, chain_operator)},
        "util_memory_matches_engine": _matches(metrics, [operator[1].name, tuned[1].name]),
        "invariants": invariants(metrics, order),
        "engine_defects": _engine_defects(rows),
        "engine_rejections": _rejections(rows),
        "engine_why": engine_why(rows),
        "engine_canary_admits": canary_admit_times(rows),
        "engine_timeline": engine_timeline(rows),
        "consistency_families": [f for f in CONSISTENCY_FAMILIES if any(r.scenario.family == f for r in rows)],
        "out_of_headline": {f: why for f, why in OUT_OF_HEADLINE.items() if any(r.scenario.family == f for r in rows)},
        "seed_streams": "truth and probe draw from independent seeds per scenario (scenario_seed streams)",
    }
    doc["engine_why_counts"] = why_counts(doc["engine_why"])
    doc["engine_oracle_by_seed"] = {str(doc["seed"]): oracle_by_seed(doc["engine_why"])}
    doc["wall_total_s"] = time.perf_counter() - wall_start
    return doc


def _rejections(rows: Sequence[Row]) -> dict[str, dict[str, int]]:
    """The engine's rejections by cause: how many, and how many of them were false rejects."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        cause = rejection_cause(r.decisions[ENGINE])
        if cause is None:
            continue
        entry = out.setdefault(cause, {"rejections": 0, "false_rejects": 0})
        entry["rejections"] += 1
        entry["false_rejects"] += int(r.truth.safe)
    return dict(sorted(out.items()))


SPREAD_KEYS = ("false_admits", "false_rejects", "unknowns", "errors_total")


def run_seeds(*, quick: bool, seeds: Sequence[int], progress: Progress | None = None,
              families: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the suite once per seed. The document is the first seed's (every scenario in detail) plus
    ``across_seeds``: per policy, the headline counts of every seed with their mean, sample standard
    deviation, minimum and maximum, and the engine's rejections by cause per seed."""
    if not seeds:
        raise ValueError("at least one seed")
    docs = []
    for s in seeds:
        if progress is not None:
            progress(f"seed {s}")
        docs.append(run_suite(quick=quick, seed=s, progress=progress, families=families))
    doc = docs[0]
    across: dict[str, Any] = {}
    # Tuned baselines are re-tuned per seed, so their names (which carry the threshold) differ:
    # policies are matched by their position in the order, and named as in the first seed.
    for index, name in enumerate(doc["policies"]):
        per: dict[str, Any] = {}
        for key in SPREAD_KEYS:
            values = [d["metrics"][d["policies"][index]]["headline"][key] for d in docs]
            mean = sum(values) / len(values)
            sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
            per[key] = {"values": values, "mean": mean, "sd": sd, "min": min(values), "max": max(values)}
        across[name] = per
    doc["seeds"] = list(seeds)
    doc["across_seeds"] = across
    doc["engine_rejections_by_seed"] = {str(s): d["engine_rejections"] for s, d in zip(seeds, docs, strict=True)}
    doc["engine_defects_by_seed"] = {str(s): [x["scenario"] for x in d["engine_defects"]]
                                     for s, d in zip(seeds, docs, strict=True)}
    doc["engine_why_counts_by_seed"] = {str(s): d["engine_why_counts"] for s, d in zip(seeds, docs, strict=True)}
    doc["engine_oracle_by_seed"] = {str(s): oracle_by_seed(d["engine_why"]) for s, d in zip(seeds, docs, strict=True)}
    doc["engine_canary_admits_by_seed"] = {str(s): d["engine_canary_admits"] for s, d in zip(seeds, docs, strict=True)}
    pooled = [v for d in docs for v in d["engine_canary_admits"]["values_s"]]
    doc["engine_canary_admits_over_seeds"] = {"n": len(pooled), "median_s": statistics.median(pooled) if pooled else None}
    doc["engine_timeline_by_seed"] = {str(s): d["engine_timeline"] for s, d in zip(seeds, docs, strict=True)}
    doc["wall_total_s"] = sum(d["wall_total_s"] for d in docs)
    return doc


def _scenario_doc(r: Row, order: Sequence[str]) -> dict[str, Any]:
    sc = r.scenario
    return {
        "id": sc.id,
        "family": sc.family,
        "title": sc.title,
        "why": sc.why,
        "device": sc.snapshot.device_type,
        "regime": sc.regime,
        "residents": [res.name + ("" if res.profile else " (unprofiled)") for res in sc.snapshot.residents],
        "candidate": sc.candidate.name,
        "repeat_of": sc.repeat_of,
        "missing_counters": list(sc.missing_counters),
        "telemetry_pct": r.telemetry,
        "truth": asdict(r.truth),
        "decisions": {name: _decision_doc(r, name) for name in order},
    }


def _decision_doc(r: Row, name: str) -> dict[str, Any]:
    d = r.decisions[name]
    doc = {k: v for k, v in asdict(d).items() if k != "probe"}
    doc["wall_s"] = r.wall_s[name]
    if name == ENGINE:
        doc["deciding_rule"] = deciding_rule(d)
        doc["probe"] = probe_doc(d)
    return doc


def engine_why(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Every unknown and false reject of the full engine: the scenario, its truth, the verdict, the
    rule that decided and the probe's data behind it (``probe``: window plan, attribution, slowdown
    estimate and interval, time and exposure used; ``None`` when no probe ran)."""
    out = []
    for r in rows:
        d = r.decisions[ENGINE]
        o = _outcome(r, d)
        if not (o.unknown or o.false_reject):
            continue
        t = r.truth
        out.append({
            "scenario": r.scenario.id,
            "family": r.scenario.family,
            "headline": r.scenario.family not in OUT_OF_HEADLINE,
            "kind": "false reject" if o.false_reject else "unknown",
            "truth_safe": t.safe,
            "truth_resource": t.resource,
            "truth_slowdown_pct": t.resident_slowdown_pct,
            "truth_p99_slowdown_pct": t.resident_p99_slowdown_pct,
            "bound_pct": t.bound_pct,
            "verdict": d.verdict,
            "decided_by": d.decided_by,
            "rule": deciding_rule(d),
            "time_to_admission_s": d.time_to_admission_s,
            "exposure": d.exposure,
            "probe": probe_doc(d),
            "reason": d.reason,
            "error": d.error,
            "oracle_pairs": oracle_pairs(t, d),
            "probe_pairs": probe_pairs(d),
        })
    return out


def probe_pairs(decision: Decision) -> int | None:
    """The usable pairs a probe that ran out its budget (``budget``) or stopped as futile had — all the
    budget held, read from the judge's reason; ``None`` for a probe another rule ended."""
    if decision.probe is None or decision.probe.get("decided_by_rule") not in ("budget", "futility"):
        return None
    m = (re.search(r"the (\d+) pair\(s\) the budget allows", decision.reason or "")
         or re.search(r"settled after (\d+) pair", decision.reason or ""))
    return int(m.group(1)) if m else None


def oracle_by_seed(why: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The headline unknowns a probe ran out (``probe_pairs`` known): scenario, ``oracle_pairs``, ``probe_pairs``."""
    return [{"scenario": w["scenario"], "oracle_pairs": w["oracle_pairs"], "pairs": w["probe_pairs"]}
            for w in why if w["headline"] and w["kind"] == "unknown" and w["probe_pairs"] is not None]


def oracle_pairs(truth: Truth, decision: Decision) -> int | None:
    """Pairs a fixed-size one-sided test at the probe's confidence would need for an even chance of
    settling the bound, were it told the true slowdown and given the spread the probe measured:
    ``⌈(z · sd / |μ|)²⌉`` with ``μ = (1 + truth) / (1 + bound) − 1`` the mean contrast at the bound
    (docs/canary.md). A floor for any rule at that confidence, sequential ones need more; ``None``
    without a probe's spread, a truth or a bound, or with the truth on the bound."""
    p = decision.probe
    if p is None or truth.resident_slowdown_pct is None or truth.bound_pct is None:
        return None
    sd = p.get("contrast_sd")
    conf = p.get("confidence") or (p.get("budget") or {}).get("required_confidence") or decision.confidence
    if not isinstance(sd, int | float) or not isinstance(conf, int | float) or not 0.5 < conf < 1:
        return None
    mu = (1 + truth.resident_slowdown_pct / 100) / (1 + truth.bound_pct / 100) - 1
    if mu == 0:
        return None
    z = statistics.NormalDist().inv_cdf(conf)
    return math.ceil((z * sd / abs(mu)) ** 2)


def why_counts(why: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """``engine_why`` counted by rule: ``{"headline" | "out_of_headline": {rule: {"unknowns": n,
    "false_rejects": n, "safe_unreachable": n}}}`` — ``safe_unreachable``: of the unknowns, those whose
    probe's time budget could not hold the pairs a safe verdict needs (its plan said so before the
    candidate started)."""
    out: dict[str, dict[str, dict[str, int]]] = {"headline": {}, "out_of_headline": {}}
    for w in why:
        part = out["headline" if w["headline"] else "out_of_headline"]
        entry = part.setdefault(w["rule"], {"unknowns": 0, "false_rejects": 0, "safe_unreachable": 0})
        entry["false_rejects" if w["kind"] == "false reject" else "unknowns"] += 1
        if w["kind"] == "unknown" and (w.get("probe") or {}).get("safe_reachable") is False:
            entry["safe_unreachable"] += 1
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def canary_admit_times(rows: Sequence[Row]) -> dict[str, Any]:
    """Simulated seconds to a safe verdict decided by the canary (the engine's admits ``by canary``),
    over the headline families: the values (in suite order), their count and median (``None`` when
    the canary admitted nothing)."""
    values = [r.decisions[ENGINE].time_to_admission_s for r in rows
              if r.scenario.family not in OUT_OF_HEADLINE and r.decisions[ENGINE].verdict == "admit"
              and r.decisions[ENGINE].decided_by == "canary" and r.decisions[ENGINE].error is None]
    return {"n": len(values), "median_s": statistics.median(values) if values else None, "values_s": values}


def engine_timeline(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per scenario, the full engine's verdict, what decided it and its simulated time to admission
    (kept for every seed, for the time-to-admission plot by family)."""
    return [{"scenario": r.scenario.id, "family": r.scenario.family,
             "engine": {"verdict": r.decisions[ENGINE].verdict, "decided_by": r.decisions[ENGINE].decided_by,
                        "rule": deciding_rule(r.decisions[ENGINE]),
                        "time_to_admission_s": r.decisions[ENGINE].time_to_admission_s}}
            for r in rows]


def attribution(rows: Sequence[Row], chain: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Per family, what each layer changed against the one before: errors removed and introduced."""
    out: dict[str, list[dict[str, Any]]] = {}
    for family in FAMILIES:
        fam = [r for r in rows if r.scenario.family == family]
        if not fam:
            continue
        steps = []
        for before, after in itertools.pairwise(chain):
            b = {r.scenario.id: _outcome(r, r.decisions[before]) for r in fam}
            a = {r.scenario.id: _outcome(r, r.decisions[after]) for r in fam}
            steps.append({
                "from": before, "to": after,
                "false_admits_removed": sorted(i for i in b if b[i].false_admit and not a[i].false_admit),
                "false_rejects_removed": sorted(i for i in b if b[i].false_reject and not a[i].false_reject),
                "false_admits_added": sorted(i for i in b if a[i].false_admit and not b[i].false_admit),
                "false_rejects_added": sorted(i for i in b if a[i].false_reject and not b[i].false_reject),
                "unknowns_added": sorted(i for i in b if a[i].unknown and not b[i].unknown),
                "unknowns_resolved": sorted(i for i in b if b[i].unknown and not a[i].unknown),
            })
        out[family] = steps
    return out


def _matches(metrics: dict[str, Any], baselines: Sequence[str]) -> dict[str, list[str]]:
    """Per family, the utilisation + memory baselines that are as good as the engine there
    (no more false admits + false rejects, no more unknowns)."""
    out: dict[str, list[str]] = {}
    engine = metrics[ENGINE]["families"]
    for family, e in engine.items():
        same = [b for b in baselines
                if metrics[b]["families"][family]["errors_total"] <= e["errors_total"]
                and metrics[b]["families"][family]["unknowns"] <= e["unknowns"]]
        out[family] = same
    return out


def invariants(metrics: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """The issue's acceptance conditions on the full engine, each with its numbers. The error totals are
    the headline's (families in ``OUT_OF_HEADLINE`` score the simulator, not the policies)."""
    engine = metrics[ENGINE]
    hard_fa = sum(engine["families"][f]["false_admits"] for f in HARD_FIT_FAMILIES if f in engine["families"])
    totals = {name: metrics[name]["headline"]["errors_total"] for name in order}
    others = [v for k, v in totals.items() if k != ENGINE]
    acc = engine["overall"]["limiting_resource_accuracy"]
    return {
        "zero_false_admits_on_hard_fit": {"ok": hard_fa == 0, "false_admits": hard_fa},
        "lowest_error_total": {"ok": all(totals[ENGINE] <= v for v in others),
                               "strictly_lowest": all(totals[ENGINE] < v for v in others),
                               "engine": totals[ENGINE], "best_other": min(others) if others else None,
                               "totals": totals},
        "limiting_resource_accuracy": {"ok": acc is not None and acc >= 0.95, "value": acc,
                                       "scored": engine["overall"]["limiting_resource_scored"]},
    }


def _engine_defects(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Scenarios where the engine is wrong (false admit, false reject, wrong resource) or failed:
    scenario, expected, got and the engine's own reason, for whoever fixes the engine."""
    out = []
    for r in rows:
        d = r.decisions[ENGINE]
        o = _outcome(r, d)
        wrong = o.false_admit or o.false_reject or (o.resource_scored and not o.resource_right) or o.error
        if not wrong:
            continue
        out.append({
            "scenario": r.scenario.id,
            "expected": ("admit" if r.truth.safe else f"reject ({r.truth.resource})"),
            "got": f"{d.verdict} ({d.limiting_resource})" if d.limiting_resource else d.verdict,
            "decided_by": d.decided_by,
            "engine_reason": d.reason,
            "truth": r.truth.detail,
            "error": d.error,
        })
    return out
