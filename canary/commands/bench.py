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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}", field="--seed")
    if not 1 <= args.seeds <= 100:
        raise InputError(f"--seeds must lie in 1..100, got {args.seeds}", field="--seeds")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", file=str(out), field="--out")

    from canary.bench import run_seeds, write_all

    def progress(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

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
