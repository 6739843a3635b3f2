"""``canary bench --strategies``: no probe, a fixed offline profile, pure analytical prediction, pure
canary and hybrid admission, compared on the design's three questions (docs/estimators.md).

The pairs are the suite's interference scenarios (families ``INTERFERENCE_FAMILIES``, no repeats;
Gavel's pairs stay out as in the headline: their simulated probes miss the measurements). Every pair
has a *history*: on ``rounds`` earlier days the canary probed it with an earlier version of the
candidate — each version's duty cycle and DRAM intensity drawn within ±``VERSION_SPREAD`` of
today's — and recorded the outcome (with the estimators' predictions in its certificate, as an
admission under the hybrid's policy without prediction-only decisions writes them). Today's
version is new to the store. Each strategy then starts from a copy of that store:

- **unseen pairs**: every pair asked once with today's candidate; scored against the simulated truth
  (false admits, false rejects, unknowns), time to decision, exposure, probes, and the resident's
  probe-time beside a candidate that truly breaks its bound (``resident_slo_impact``, seconds);
- **a resident's phase change**: one pair, safe before, asked every ``PHASE_ASK_EVERY_MIN`` minutes;
  after the ``PHASE_CHANGE_AFTER``-th ask the resident enters a heavier phase (its duty cycle and DRAM
  intensity × ``PHASE_FACTOR``, capped at 1, and a new shape family, as a re-profiled envelope declares
  it) and the pair is no longer safe. ``adaptation_s``: from the change until the first answer that is
  right again (the ask's offset plus its time to decision); ``None``: not within the asks;
- **a day of repeated admissions**: ``day`` admissions of pairs drawn at random from the pool, spread
  over 24 hours; ``probes_per_100``: probes run per 100 admissions.

Strategies: ``no-probe`` (stage 1, then admit: no interference check), ``offline-profile`` (each
pair's slowdown as measured once before today — the newest history record, keyed by workload names
whatever the version or phase — against the bound; never refreshed), ``analytical`` (stage 1, then the
analytical estimator's point against the bound: the benchmark's "+phase/time structure" layer),
``canary`` (the engine under the default policy) and ``hybrid`` (the engine with the transfer and
analytical estimators consulted and trusted to decide where calibrated). The simulator estimator is
not offered to the hybrid here: the truth is the same simulator, so it would be an oracle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import random
import shutil
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from canary.bench.policies import Decision, FullEngine, PlusPhases, ScenarioView, stage1_decision
from canary.bench.runner import BASE_TIME, OUT_OF_HEADLINE, scenario_seed, sim_params
from canary.bench.scenarios import Scenario, build_suite
from canary.bench.truth import INTERFERENCE, Truth, ground_truth, slowdown_bound_pct

STRATEGIES: tuple[str, ...] = ("no-probe", "offline-profile", "analytical", "canary", "hybrid")
INTERFERENCE_FAMILIES: tuple[str, ...] = ("dram", "temporal", "benign", "unknown")
HYBRID_ESTIMATORS: tuple[str, ...] = ("transfer", "analytical")
VERSION_SPREAD = 0.2
PHASE_FACTOR = 1.6
PHASE_ASK_EVERY_MIN = 30
PHASE_ASKS = 12
PHASE_CHANGE_AFTER = 4
ROW_FIELDS: tuple[str, ...] = ("name", "false_admits", "false_rejects", "unknowns", "tta_median_s", "tta_p90_s",
                               "exposure_median", "probes", "resident_slo_impact")
Progress = Callable[[str], None]


# ------------------------------------------------------------------------------------------ workloads


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def scaled_profile(profile: Any, *, version: str | None = None, shape_family: str | None = None,
                   duty: float = 1.0, dram: float = 1.0) -> Any:
    """``profile`` with its duty cycles and DRAM intensities (top level, per phase, per kernel) scaled
    (capped at 1) and, where given, a new version or shape family; validated again."""
    from canary.profile import WorkloadProfile

    d = profile.model_dump()
    if version is not None:
        d["version"] = version
    if shape_family is not None:
        d["shape_family"] = shape_family
    if d.get("duty_cycle") is not None:
        d["duty_cycle"] = _clip(d["duty_cycle"] * duty)
    if d.get("dram_intensity") is not None:
        d["dram_intensity"] = _clip(d["dram_intensity"] * dram)
    for ph in d.get("phases") or ():
        ph["duty_cycle"] = _clip(ph["duty_cycle"] * duty)
        ph["dram_intensity"] = _clip(ph["dram_intensity"] * dram)
    for k in d.get("kernels") or ():
        if k.get("dram_intensity") is not None:
            k["dram_intensity"] = _clip(k["dram_intensity"] * dram)
    return WorkloadProfile.model_validate(d)


def history_scenario(sc: Scenario, round_: int, seed: int) -> Scenario:
    """``sc`` with the candidate at an earlier version (``round_`` days before today): its duty cycle and
    DRAM intensity each drawn within ±``VERSION_SPREAD`` of today's."""
    rng = random.Random(zlib.crc32(f"{seed}:{round_}:{sc.id}".encode()))
    duty, dram = (1.0 + rng.uniform(-VERSION_SPREAD, VERSION_SPREAD) for _ in range(2))
    cand = scaled_profile(sc.candidate, version=f"{sc.candidate.version}-prev{round_}", duty=duty, dram=dram)
    return dataclasses.replace(sc, id=f"{sc.id}@prev{round_}", candidate=cand)


def phase_changed(sc: Scenario) -> Scenario:
    """``sc`` after its (first) resident entered a heavier phase (module docstring)."""
    residents = []
    for i, r in enumerate(sc.snapshot.residents):
        if i == 0 and r.profile is not None:
            r = r.model_copy(update={"profile": scaled_profile(
                r.profile, shape_family=f"{r.profile.shape_family},phase2", duty=PHASE_FACTOR, dram=PHASE_FACTOR)})
        residents.append(r)
    snap = sc.snapshot.model_copy(update={"residents": tuple(residents)})
    return dataclasses.replace(sc, id=f"{sc.id}@phase2", snapshot=snap)


# ------------------------------------------------------------------------------------------ asking


def _policy(name: str) -> Any:
    from canary.policy import Policy, load_policy

    base = load_policy("default")
    if name == "hybrid":
        return Policy.model_validate({**base.model_dump(), "estimators": HYBRID_ESTIMATORS,
                                      "decide_on_prediction": HYBRID_ESTIMATORS})
    if name == "history":  # predictions written into certificates, never deciding
        return Policy.model_validate({**base.model_dump(), "estimators": HYBRID_ESTIMATORS})
    return base


def _view(sc: Scenario, policy: Any, db_url: str, when: dt.datetime, seed: int) -> ScenarioView:
    from canary.admission import build_request
    from canary.backends import ResolvedDevice
    from canary.snapshot import Telemetry

    device = ResolvedDevice(snapshot=sc.snapshot, spec=sc.spec, ref=f"bench:{sc.id}", kind="file")
    req = build_request(device, sc.candidate, policy, regime=sc.regime)
    params = sim_params(sc)
    if params is not None:
        req = dataclasses.replace(req, sim_params=params)
    # No strategy here reads telemetry (stage 1, profiles, evidence and probes only).
    return ScenarioView(scenario_id=sc.id, request=req, telemetry=Telemetry(), telemetry_window_s=0.0,
                        db_url=db_url, seed=seed, clock=lambda: when)


OfflineTable = dict[tuple[str, ...], float | None]


def _pair_name(sc: Scenario) -> tuple[str, ...]:
    """What an offline profile table is keyed by: workload names, device type and regime."""
    return (sc.candidate.name, *(r.name for r in sc.snapshot.residents), sc.snapshot.device_type, sc.regime)


def _bound(sc: Scenario, policy: Any) -> float:
    return min(slowdown_bound_pct(policy, r.profile) for r in sc.snapshot.residents)


def decide(strategy: str, sc: Scenario, *, db_url: str, when: dt.datetime, seed: int,
           offline: OfflineTable) -> Decision:
    """One strategy's answer to one admission question (module docstring)."""
    from canary.errors import CanaryError

    policy = _policy(strategy)
    view = _view(sc, policy, db_url, when, seed)
    try:
        if strategy == "no-probe":
            return stage1_decision(view) or Decision("admit", None, 0.0, 0, decided_by="no-probe",
                                                     reason="fits; interference is not checked")
        if strategy == "analytical":
            return PlusPhases().decide(view)
        if strategy == "offline-profile":
            first = stage1_decision(view)
            if first is not None:
                return first
            measured = offline.get(_pair_name(sc))
            if measured is None:
                return Decision("unknown", INTERFERENCE, 0.0, 0, decided_by="offline-profile",
                                reason="no offline measurement of this pair")
            bound = _bound(sc, policy)
            if measured <= bound:
                return Decision("admit", None, 0.0, 0, decided_by="offline-profile",
                                reason=f"measured offline {measured:.1f}% vs {bound:g}%")
            return Decision("reject", INTERFERENCE, 0.0, 0,
                            decided_by="offline-profile", reason=f"measured offline {measured:.1f}% vs {bound:g}%")
        return FullEngine().decide(view)
    except CanaryError as exc:
        return Decision("unknown", None, 0.0, 0, decided_by="error", reason=str(exc),
                        error=f"{type(exc).__name__}: {exc}")


def ran_probe(d: Decision) -> bool:
    """Whether the decision cost a probe (any probe the engine started, whatever it concluded)."""
    return d.decided_by == "canary" and d.probe is not None


# ------------------------------------------------------------------------------------------ history


def build_history(pairs: Sequence[Scenario], rounds: int, seed: int, db_url: str,
                  progress: Progress | None) -> OfflineTable:
    """Probe every pair's earlier candidate versions into the store at ``db_url`` (one round a day,
    oldest first, under the history policy); return the offline table: per pair (by names), the newest
    round's measured slowdown (``None`` when that probe measured none)."""
    policy = _policy("history")
    table: OfflineTable = {}
    for r in range(rounds, 0, -1):  # prev{rounds} is the oldest
        day = BASE_TIME - dt.timedelta(days=r)
        for i, sc in enumerate(pairs):
            old = history_scenario(sc, r, seed)
            view = _view(old, policy, db_url, day + dt.timedelta(minutes=i), scenario_seed(seed + 7919 * r, sc))
            try:
                d = FullEngine().decide(view)
            except Exception as exc:  # a history probe that fails leaves a gap, as in a real store
                if progress is not None:
                    progress(f"history {old.id}: {type(exc).__name__}: {exc}")
                continue
            if r == 1:
                table[_pair_name(sc)] = (d.probe or {}).get("slowdown_estimate_pct") if d.probe else None
        if progress is not None:
            progress(f"history round prev{r}: {len(pairs)} pair(s) probed")
    return table


# ------------------------------------------------------------------------------------------ scoring


def _wrong(d: Decision, truth: Truth) -> str | None:
    if d.verdict == "unknown":
        return "unknown"
    if d.verdict == "admit" and not truth.safe:
        return "false admit"
    if d.verdict == "reject" and truth.safe:
        return "false reject"
    return None


def _p(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def score(decisions: Sequence[tuple[Decision, Truth]]) -> dict[str, Any]:
    """Counts and times over ``decisions`` (each with its truth)."""
    kinds = [_wrong(d, t) for d, t in decisions]
    tta = [d.time_to_admission_s for d, _ in decisions]
    exposure = [float(d.exposure) for d, _ in decisions]
    return {
        "decisions": len(decisions),
        "false_admits": kinds.count("false admit"),
        "false_rejects": kinds.count("false reject"),
        "unknowns": kinds.count("unknown"),
        "tta_median_s": statistics.median(tta) if tta else None,
        "tta_p90_s": _p(tta, 0.9),
        "exposure_median": statistics.median(exposure) if exposure else None,
        "probes": sum(1 for d, _ in decisions if ran_probe(d)),
        "resident_slo_impact": sum(d.time_to_admission_s for d, t in decisions if ran_probe(d) and not t.safe),
        "decided_by": dict(sorted(_count(d.decided_by or "?" for d, _ in decisions).items())),
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


# ------------------------------------------------------------------------------------------ the run


def run_strategies(*, quick: bool, seed: int = 0, progress: Progress | None = None,
                   day_admissions: int | None = None, rounds: int | None = None) -> dict[str, Any]:
    """Run the comparison; return the document ``strategies.json`` is written from (its ``rows``)."""
    from canary.policy import load_policy

    wall = time.perf_counter()
    base_policy = load_policy("default")
    suite, _ = build_suite(quick=quick, seed=seed)
    pairs = [s for s in suite if s.family in INTERFERENCE_FAMILIES and s.repeat_of is None
             and s.family not in OUT_OF_HEADLINE]
    truths = {s.id: ground_truth(s, base_policy, seed=scenario_seed(seed, s, "truth")) for s in pairs}
    rounds = rounds if rounds is not None else (10 if quick else 4)
    day_n = day_admissions if day_admissions is not None else (40 if quick else 100)
    phase_pair, phase_truth = _phase_pair(pairs, truths, base_policy, seed)
    rng = random.Random(seed)
    day_plan = [(rng.randrange(len(pairs)), BASE_TIME + dt.timedelta(hours=1, seconds=rng.uniform(0, 23 * 3600)))
                for _ in range(day_n)]
    day_plan.sort(key=lambda x: x[1])
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="canary-strategies-") as tmp:
        template = Path(tmp) / "history.sqlite3"
        offline = build_history(pairs, rounds, seed, f"sqlite:///{template}", progress)
        for name in STRATEGIES:
            started = time.perf_counter()

            def store(part: str, name: str = name) -> str:
                path = Path(tmp) / f"{name}-{part}.sqlite3"
                if template.exists():
                    shutil.copyfile(template, path)
                return f"sqlite:///{path}"

            url = store("unseen")
            unseen = [(decide(name, s, db_url=url, when=BASE_TIME + dt.timedelta(minutes=i),
                              seed=scenario_seed(seed, s), offline=offline), truths[s.id])
                      for i, s in enumerate(pairs)]
            phase = _run_phase(name, phase_pair, phase_truth, store("phase"), seed, offline)
            url = store("day")
            day = [(decide(name, pairs[k], db_url=url, when=when, seed=scenario_seed(seed, pairs[k]) + j,
                           offline=offline), truths[pairs[k].id]) for j, (k, when) in enumerate(day_plan)]
            results[name] = {"unseen": score(unseen), "phase_change": phase, "day": score(day),
                             "unseen_detail": [_detail(s, d, t) for s, (d, t) in zip(pairs, unseen, strict=True)],
                             "wall_s": time.perf_counter() - started}
            if progress is not None:
                u = results[name]["unseen"]
                median = "none decided" if u["tta_median_s"] is None else f"{u['tta_median_s']:.1f} s"
                adapts = "never" if phase["adaptation_s"] is None else f"{phase['adaptation_s']:.1f} s"
                progress(f"{name:<16} unseen: {u['false_admits']} FA, {u['false_rejects']} FR, {u['unknowns']} unknown, "
                         f"median {median}; phase adapts in {adapts}; "
                         f"day: {results[name]['day']['probes']} probes / {day_n}")
    rows = [_row(name, results[name], day_n) for name in STRATEGIES]
    return {
        "benchmark": "canary bench --strategies",
        "seed": seed,
        "quick": quick,
        "pairs": [s.id for s in pairs],
        "history_rounds": rounds,
        "version_spread": VERSION_SPREAD,
        "phase_change": {"pair": phase_pair.id if phase_pair else None, "factor": PHASE_FACTOR,
                         "asks": PHASE_ASKS, "change_after": PHASE_CHANGE_AFTER,
                         "ask_every_min": PHASE_ASK_EVERY_MIN,
                         "truth_before": truths[phase_pair.id].resident_slowdown_pct if phase_pair else None,
                         "truth_after": phase_truth.resident_slowdown_pct if phase_truth else None},
        "day_admissions": day_n,
        "rows": rows,
        "targets": targets(rows),
        "detail": results,
        "wall_total_s": time.perf_counter() - wall,
    }


def _detail(sc: Scenario, d: Decision, t: Truth) -> dict[str, Any]:
    return {"scenario": sc.id, "truth_safe": t.safe, "truth_slowdown_pct": t.resident_slowdown_pct,
            "bound_pct": t.bound_pct, "verdict": d.verdict, "decided_by": d.decided_by,
            "time_to_admission_s": d.time_to_admission_s, "exposure": d.exposure, "reason": d.reason}


def _phase_pair(pairs: Sequence[Scenario], truths: dict[str, Truth], policy: Any,
                seed: int) -> tuple[Scenario | None, Truth | None]:
    """The first pair (suite order) that is safe before the phase change and unsafe after it."""
    for sc in pairs:
        if not truths[sc.id].safe or not sc.snapshot.residents or sc.snapshot.residents[0].profile is None \
                or sc.placement.kind == "mig":
            continue
        changed = phase_changed(sc)
        after = ground_truth(changed, policy, seed=scenario_seed(seed, sc, "truth"))
        if not after.safe:
            return sc, after
    return None, None


def _run_phase(name: str, sc: Scenario | None, after: Truth | None, url: str, seed: int,
               offline: OfflineTable) -> dict[str, Any]:
    if sc is None or after is None:
        return {"adaptation_s": None, "wrong_after_change": None, "asks": 0,
                "note": "no pair in the suite turns unsafe under the phase change"}
    changed = phase_changed(sc)
    change_at = BASE_TIME + dt.timedelta(minutes=PHASE_ASK_EVERY_MIN * PHASE_CHANGE_AFTER)
    adaptation: float | None = None
    wrong_after = 0
    verdicts = []
    for k in range(PHASE_ASKS):
        when = BASE_TIME + dt.timedelta(minutes=PHASE_ASK_EVERY_MIN * k)
        now = changed if k >= PHASE_CHANGE_AFTER else sc
        d = decide(name, now, db_url=url, when=when, seed=scenario_seed(seed, sc) + k, offline=offline)
        verdicts.append(d.verdict)
        if k < PHASE_CHANGE_AFTER:
            continue
        right = d.verdict == "reject"
        if not right:
            wrong_after += 1
        elif adaptation is None:
            adaptation = (when - change_at).total_seconds() + d.time_to_admission_s
    return {"adaptation_s": adaptation, "wrong_after_change": wrong_after, "asks": PHASE_ASKS, "verdicts": verdicts}


def _row(name: str, res: dict[str, Any], day_n: int) -> dict[str, Any]:
    u = res["unseen"]
    row = {k: u[k] for k in ROW_FIELDS if k != "name"}
    row = {"name": name, **row}
    row["adaptation_s"] = res["phase_change"]["adaptation_s"]
    row["probes_per_100_repeated"] = 100.0 * res["day"]["probes"] / day_n if day_n else None
    row["day_false_admits"] = res["day"]["false_admits"]
    row["day_unknowns"] = res["day"]["unknowns"]
    return row


def targets(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's done-when conditions on the hybrid against the pure canary, each with its numbers."""
    by = {r["name"]: r for r in rows}
    h, c = by["hybrid"], by["canary"]
    half = None if c["tta_median_s"] is None or h["tta_median_s"] is None else h["tta_median_s"] <= c["tta_median_s"] / 2
    return {
        "no_more_false_admits": {"ok": h["false_admits"] <= c["false_admits"], "hybrid": h["false_admits"],
                                 "canary": c["false_admits"]},
        "no_more_unknowns": {"ok": h["unknowns"] <= c["unknowns"], "hybrid": h["unknowns"], "canary": c["unknowns"]},
        "half_median_tta": {"ok": half, "hybrid": h["tta_median_s"], "canary": c["tta_median_s"]},
        "fewer_probes_per_100": {"ok": h["probes_per_100_repeated"] < c["probes_per_100_repeated"],
                                 "hybrid": h["probes_per_100_repeated"], "canary": c["probes_per_100_repeated"]},
    }


# ------------------------------------------------------------------------------------------ output


def write_strategies(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """``strategies.json`` (the rows, with the document around them) and ``strategies.png``."""
    from canary.bench.report import _finite

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "strategies.json"
    path.write_text(json.dumps(_finite(doc), indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    return [path, _plot(doc, out_dir / "strategies.png")]


def _plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    names = [r["name"] for r in rows]
    panels = (("false_admits", "false admits (unseen)"), ("unknowns", "unknowns (unseen)"),
              ("tta_median_s", "median time to decision, s (unseen)"),
              ("probes_per_100_repeated", "probes per 100 admissions (day)"),
              ("adaptation_s", "adaptation after a phase change, s"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4))
    for ax, (field, title) in zip(axes, panels, strict=True):
        values = [r[field] for r in rows]
        heights = [v if isinstance(v, int | float) else 0.0 for v in values]
        bars = ax.bar(range(len(names)), heights, color=["#888", "#b97", "#79b", "#c55", "#5a5"])
        for bar, v in zip(bars, values, strict=True):
            ax.annotate("never" if v is None else f"{v:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"admission strategies ({len(doc['pairs'])} unseen pairs, seed {doc['seed']}"
                 f"{', quick' if doc['quick'] else ''})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
