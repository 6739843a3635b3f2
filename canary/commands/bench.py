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
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of every random draw (default 0)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}", field="--seed")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", file=str(out), field="--out")

    from canary.bench import run_suite, write_all

    def progress(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    doc = run_suite(quick=bool(args.quick), seed=int(args.seed), progress=progress)
    command = "canary bench" + (" --quick" if args.quick else "") + f" --seed {args.seed} --out {args.out}"
    paths = write_all(doc, out, command=command)
    inv = doc["invariants"]
    engine = doc["metrics"]["+pairwise evidence (full engine)"]["overall"]
    sys.stdout.write(
        f"{len(doc['scenarios'])} scenarios; full engine: {engine['false_admits']} false admits, "
        f"{engine['false_rejects']} false rejects, {engine['unknowns']} unknown; "
        f"hard-fit false admits {inv['zero_false_admits_on_hard_fit']['false_admits']}, "
        f"lowest FA+FR {'yes' if inv['lowest_error_total']['ok'] else 'no'}, "
        f"limiting-resource accuracy {inv['limiting_resource_accuracy']['value']}\n")
    for p in paths:
        sys.stdout.write(f"wrote {p}\n")
    return 0
