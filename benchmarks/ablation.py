"""The counterexample ablation as a benchmark script: prints each policy's false admits, false
rejects and unknowns, and the full engine's error total against the best baseline measured in the
same run. Same as ``canary bench``; writes the report when ``--out`` is given.

    python benchmarks/ablation.py [--quick] [--seed N] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    # Run as a script, this folder comes first on sys.path, where benchmarks/evidence_store.py would
    # shadow the evidence_store package; the project root must come first instead.
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != here]

    from canary.bench import run_suite, write_all

    doc = run_suite(quick=args.quick, seed=args.seed, progress=lambda line: print(line, file=sys.stderr))
    print(f"{'policy':<55} {'FA':>4} {'FR':>4} {'unk':>4} {'FA+FR':>6}")
    for name in doc["policies"]:
        m = doc["metrics"][name]["overall"]
        print(f"{name:<55} {m['false_admits']:>4} {m['false_rejects']:>4} {m['unknowns']:>4} {m['errors_total']:>6}")
    totals = doc["invariants"]["lowest_error_total"]
    best = totals["best_other"]
    ratio = f"{totals['engine'] / best:.2f}" if best else "n/a"
    print(f"full engine FA+FR {totals['engine']} vs best baseline {best} (ratio {ratio}); "
          f"wall {doc['wall_total_s']:.1f} s")
    if args.out is not None:
        write_all(doc, args.out, command="python benchmarks/ablation.py" + (" --quick" if args.quick else "")
                  + f" --seed {args.seed} --out {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
