"""The prior-informed judge: does a right prior decide sooner, and does a wrong one keep its level?

    python benchmarks/judge_prior.py [--trials 400] [--seed 0] [--workers 1] [--horizon 120]
                                     [--families a,b] [--json PATH]

Every family of ``benchmarks/judge.py`` and the held-out families below are generated exactly as
that benchmark generates them (its :func:`generate`: the orchestrator's schedule, Poisson requests,
the family's latency law, resident factor and slowdown process) and judged by the sequential judge
alone (its ``sequential`` method: :func:`canary.probe.judge.sequential_paths` after every pair, the
first verdict stops the probe, futility included) under four settings that differ only in
:attr:`canary.probe.judge.JudgeSettings.prior`, on the same windows:

- **none** — no prior (the judge as shipped);
- **right** — ``SlowdownPrior(truth, 2%)``: centred on the family's truth;
- **0%±0.5** — ``SlowdownPrior(0, 0.5)``: a confident "no slowdown" (wrong wherever the truth is at
  or beyond the bound: the prior that pushes towards a false admit);
- **30%±0.5** — ``SlowdownPrior(2 × bound, 0.5)``: a confident "twice the bound" (wrong wherever
  the truth is below it: the prior that pushes towards a false reject).

Per family and prior: false admits (a *safe* verdict with the truth at or beyond the bound) ± SE,
false rejects (*unsafe* with the truth below it), inconclusive, the median pairs to a verdict over the
decided trials, and the mean pairs a probe used (its verdict's pair; the horizon or the futility pair
when inconclusive). The check: false admits ≤ α + 2 SE (SE at least that of a rate α) in every
family, under every prior.

**Held-out families**: combinations of the same generators that ``benchmarks/judge.py`` does not
run (heavy tails with autocorrelation, iid slowdown noise, longer and stronger AR(1), denser bursts,
few requests with drift, a slow period with a step, truths just past the bound), with their own
random streams, so that nothing about the prior's design was tuned on them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
# Run as a script, this folder comes first on sys.path, where benchmarks/evidence_store.py would
# shadow the evidence_store package; the project root must come first instead.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from canary.probe.judge import JudgeSettings, SlowdownPrior  # noqa: E402


def _load_judge_benchmark() -> Any:
    """``benchmarks/judge.py`` as a module (``benchmarks`` is not a package); registered under its own
    name so that worker processes resolve its classes."""
    name = "canary_judge_benchmark"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "judge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bj = _load_judge_benchmark()
Family = bj.Family
BOUND_PCT: float = bj.BOUND_PCT
SETTINGS: JudgeSettings = bj.SETTINGS
ALPHA = 1.0 - SETTINGS.required_confidence
#: Held-out families' random streams start here (the judge benchmark's use their list index).
HELD_OUT_INDEX = 1000
RIGHT_SD_PCT = 2.0
WRONG_SD_PCT = 0.5
PRIORS = ("none", "right", "0%±0.5", "30%±0.5")


def held_out_families() -> list[Any]:
    b = BOUND_PCT
    return [
        Family("held-out: Pareto a2.5 + AR(1) phi 0.8 sd 0.1, at bound", "held-out", b, latency="pareto",
               ar_phi=0.8, ar_sd=0.1),
        Family("held-out: iid slowdown noise sd 0.2, at bound", "held-out", b, ar_phi=0.0, ar_sd=0.2),
        Family("held-out: AR(1) phi 0.9 sd 0.15, at bound", "held-out", b, ar_phi=0.9, ar_sd=0.15),
        Family("held-out: AR(1) phi 0.95 sd 0.2, Pareto, at bound", "held-out", b, latency="pareto",
               ar_phi=0.95, ar_sd=0.2),
        Family("held-out: bursts 30% of on-windows, at bound", "held-out", b, burst_rate=0.30),
        Family("held-out: heavy lognormal + bursts 10%, bound+2", "held-out", b + 2, latency="lognormal-heavy",
               burst_rate=0.10),
        Family("held-out: few requests 4.5/s + drift +0.5%/s, at bound", "held-out", b, rps=bj.FEW_RPS,
               drift_per_s=0.005),
        Family("held-out: periodic 12 s + step +30%, at bound", "held-out", b, period_s=12.0, step_at_fraction=True),
        Family("held-out: bound+1 (16%)", "held-out", b + 1),
        Family("held-out: Pareto a2.5, bound+1", "held-out", b + 1, latency="pareto"),
        Family("held-out: 10% (2/3 bound)", "held-out", 2 * b / 3),
        Family("held-out: 5%, Pareto + AR(1) phi 0.5 sd 0.1", "held-out", b / 3, latency="pareto", ar_phi=0.5,
               ar_sd=0.1),
        Family("held-out: 20% (bound+5), few requests 4.5/s", "held-out", b + 5, rps=bj.FEW_RPS),
        Family("held-out: 22% (bound+7)", "held-out", b + 7),
    ]


def prior_for(name: str, truth_pct: float) -> SlowdownPrior | None:
    if name == "none":
        return None
    if name == "right":
        return SlowdownPrior(truth_pct, RIGHT_SD_PCT)
    if name == "0%±0.5":
        return SlowdownPrior(0.0, WRONG_SD_PCT)
    if name == "30%±0.5":
        return SlowdownPrior(2 * BOUND_PCT, WRONG_SD_PCT)
    raise ValueError(name)


def run_family(args: tuple[Any, int, int, int, int, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    fam, index, trials, horizon, seed, sched = args
    began = time.perf_counter()
    w = bj.generate(fam, trials, horizon, seed, index, sched)
    rows: dict[str, Any] = {}
    for name in PRIORS:
        settings = replace(SETTINGS, prior=prior_for(name, fam.truth_pct))
        out = bj.sequential(w, settings, guard=False)
        row = bj.summarise(fam, out, w, BOUND_PCT).__dict__
        row["mean_pairs"] = float(np.mean(out.pairs_used))
        row["pairs_used"] = out.pairs_used.tolist()
        rows[name] = row
    return {"family": fam.__dict__, "index": index, "priors": rows, "wall_s": time.perf_counter() - began}


def fa_limit(fa_se: float, trials: int) -> float:
    return ALPHA + 2 * max(fa_se, math.sqrt(ALPHA * (1 - ALPHA) / trials))


def checks(results: Sequence[dict[str, Any]], trials: int) -> list[str]:
    lines = []
    for r in results:
        for name in PRIORS:
            m = r["priors"][name]
            if m["false_admit"] is None:
                continue
            limit = fa_limit(m["false_admit_se"], trials)
            ok = m["false_admit"] <= limit
            lines.append(f"{'PASS' if ok else 'FAIL'} false admits {m['false_admit']:.3f} <= {limit:.3f} "
                         f"(prior {name}): {r['family']['name']}")
    return lines


def table(results: Sequence[dict[str, Any]]) -> list[str]:
    head = f"{'family':<52} {'truth':>5} | " + " | ".join(f"{p + ' FA±SE / FR, inc, med/mean pairs':<38}" for p in PRIORS)
    lines = [head, "-" * len(head)]
    for r in results:
        cells = []
        for name in PRIORS:
            m = r["priors"][name]
            err = (f"FA {m['false_admit']:.3f}±{m['false_admit_se']:.3f}" if m["false_admit"] is not None
                   else f"FR {m['false_reject']:.3f}      ")
            med = m["median_pairs_decided"]
            cells.append(f"{err:<16} {m['inconclusive']:.2f} {'—' if med is None else round(med):>4}/{m['mean_pairs']:5.1f}")
        lines.append(f"{r['family']['name']:<52} {r['family']['truth_pct']:>5.1f} | " + " | ".join(f"{c:<38}" for c in cells))
    lines.append("-" * len(head))
    return lines


def summary(results: Sequence[dict[str, Any]], trials: int) -> list[str]:
    """Per prior: the worst false-admit rate against its limit, and the mean pairs per probe against no
    prior (families where it is lower / higher by more than 2%; the largest changes)."""
    lines = []
    for name in PRIORS:
        worst = max((r for r in results if r["priors"][name]["false_admit"] is not None),
                    key=lambda r: r["priors"][name]["false_admit"] - fa_limit(r["priors"][name]["false_admit_se"], trials),
                    default=None)
        text = f"# prior {name:<8}: "
        if worst is not None:
            m = worst["priors"][name]
            text += (f"worst false admits {m['false_admit']:.3f} ± {m['false_admit_se']:.3f} (limit "
                     f"{fa_limit(m['false_admit_se'], trials):.3f}) in {worst['family']['name']}")
        if name != "none":
            change = [(r["priors"][name]["mean_pairs"] / r["priors"]["none"]["mean_pairs"] - 1, r["family"]["name"]) for r in results]
            fewer = sum(c < -0.02 for c, _ in change)
            more = sum(c > 0.02 for c, _ in change)
            best, worst_change = min(change), max(change)
            text += (f"; mean pairs per probe vs none: lower in {fewer}, higher in {more} of {len(change)} families "
                     f"(from {best[0]:+.0%}, {best[1]}, to {worst_change[0]:+.0%}, {worst_change[1]})")
        lines.append(text)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="trials per family")
    parser.add_argument("--horizon", type=int, default=bj.HORIZON, help="window pairs the budget allows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes (families run in parallel)")
    parser.add_argument("--families", default="", help="comma-separated substrings of family names")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    if args.trials < 10 or args.horizon < bj.MIN_PAIRS:
        parser.error(f"--trials must be >= 10 and --horizon >= {bj.MIN_PAIRS}")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    indexed = bj.pick(list(enumerate(bj.families())) + [(HELD_OUT_INDEX + i, f) for i, f in enumerate(held_out_families())],
                      args.families)
    if not indexed:
        parser.error(f"--families {args.families!r} matches no family")
    began = time.perf_counter()
    print(f"# prior-informed judge: bound {BOUND_PCT:g}%, confidence {SETTINGS.required_confidence}, horizon "
          f"{args.horizon} pairs, {args.trials} trials per family, seed {args.seed}; priors: none, right = truth "
          f"± {RIGHT_SD_PCT:g}%, 0% ± {WRONG_SD_PCT:g}%, {2 * BOUND_PCT:g}% ± {WRONG_SD_PCT:g}%")
    results = bj.run_families(run_family, indexed, args.trials, args.horizon, args.seed, args.workers)
    for line in table(results):
        print(line)
    print("# FA = false admits (safe, truth >= bound) ± SE; FR = false rejects (unsafe, truth < bound); inc = "
          "inconclusive; med/mean pairs = median pairs to a verdict over decided trials / mean pairs used per probe")
    for line in summary(results, args.trials):
        print(line)
    lines = checks(results, args.trials)
    for line in lines:
        if line.startswith("FAIL"):
            print(line)
    failed = sum(line.startswith("FAIL") for line in lines)
    elapsed = time.perf_counter() - began
    print(f"# {len(results)} families x {len(PRIORS)} priors x {args.trials} trials in {elapsed:.1f} s; "
          f"false-admit checks: {len(lines) - failed} pass, {failed} fail")
    if args.json is not None:
        for r in results:
            for m in r["priors"].values():
                m.pop("pairs_used", None)
        doc = {"settings": {"bound_pct": BOUND_PCT, "confidence": SETTINGS.required_confidence,
                            "horizon_pairs": args.horizon, "trials": args.trials, "seed": args.seed,
                            "right_sd_pct": RIGHT_SD_PCT, "wrong_sd_pct": WRONG_SD_PCT, "priors": list(PRIORS)},
               "results": results, "checks": lines, "wall_s": elapsed}
        args.json.write_text(json.dumps(doc, indent=1, default=float), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
