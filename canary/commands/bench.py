"""``canary bench``: the counterexample benchmark and ablation, written as a report.

Kept light at import: the benchmark (simulator, numpy, matplotlib) is imported in the handler."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from canary.errors import InputError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "bench", help="run the counterexample benchmark and the policy ablation",
        description="Run the counterexample suite (simulated device states, Gavel's measured pairs) through "
                    "utilisation-only to full-engine policies and write report.md, results.json and PNG plots. "
                    "Exit 0 when the report is written, 2 on bad input, 4 on an operational failure.")
    parser.add_argument("--quick", action="store_true", help="the quick subset (under a minute)")
    parser.add_argument("--out", default="canary-bench", metavar="DIR",
                        help="output directory (default: ./canary-bench)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="first seed of every random draw (default 0)")
    parser.add_argument("--seeds", type=int, default=5, metavar="K",
                        help="run seeds N..N+K-1 and report the spread (default 5)")
    parser.add_argument("--strategies", action="store_true",
                        help="compare no-probe, offline-profile, analytical, canary and hybrid admission on unseen "
                             "pairs, a resident's phase change and a day of repeated admissions; writes "
                             "DIR/strategies.json and DIR/strategies.png (docs/estimators.md)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}", field="--seed")
    if not 1 <= args.seeds <= 100:
        raise InputError(f"--seeds must lie in 1..100, got {args.seeds}", field="--seeds")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", file=str(out), field="--out")

    def progress(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    if args.strategies:
        return _strategies(args, out, progress)
    from canary.bench import run_seeds, write_all

    seeds = list(range(int(args.seed), int(args.seed) + int(args.seeds)))
    doc = run_seeds(quick=bool(args.quick), seeds=seeds, progress=progress)
    command = ("canary bench" + (" --quick" if args.quick else "")
               + f" --seed {args.seed} --seeds {args.seeds} --out {args.out}")
    paths = write_all(doc, out, command=command)
    inv = doc["invariants"]
    spread = doc["across_seeds"]["+pairwise evidence (full engine)"]

    def mean_sd(key: str) -> str:
        return f"{spread[key]['mean']:.1f} ± {spread[key]['sd']:.1f}"

    sys.stdout.write(
        f"{len(doc['scenarios'])} scenarios x {len(seeds)} seed(s); full engine (headline, mean ± sd over seeds): "
        f"{mean_sd('false_admits')} false admits, {mean_sd('false_rejects')} false rejects, "
        f"{mean_sd('unknowns')} unknown; "
        f"hard-fit false admits {inv['zero_false_admits_on_hard_fit']['false_admits']}, "
        f"lowest FA+FR {'yes' if inv['lowest_error_total']['ok'] else 'no'}, "
        f"limiting-resource accuracy {inv['limiting_resource_accuracy']['value']}\n")
    for p in paths:
        sys.stdout.write(f"wrote {p}\n")
    return 0


def _strategies(args: argparse.Namespace, out: Path, progress: Any) -> int:
    from canary.bench.strategies import run_strategies, write_strategies

    doc = run_strategies(quick=bool(args.quick), seed=int(args.seed), progress=progress)
    paths = write_strategies(doc, out)
    for row in doc["rows"]:
        sys.stdout.write(
            f"{row['name']:<16} unseen: {row['false_admits']} false admits, {row['false_rejects']} false rejects, "
            f"{row['unknowns']} unknown, median {_s(row['tta_median_s'])} to decide, {row['probes']} probes; "
            f"phase change adapts in {_s(row['adaptation_s'])}; "
            f"{_n(row['probes_per_100_repeated'])} probes per 100 repeated admissions\n")
    met = ", ".join(f"{k} {'yes' if v['ok'] else 'no'}" for k, v in doc["targets"].items())
    sys.stdout.write(f"hybrid vs canary: {met}\n")
    for p in paths:
        sys.stdout.write(f"wrote {p}\n")
    return 0


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _n(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}"
