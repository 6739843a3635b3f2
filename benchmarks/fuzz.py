"""Fuzz every loader, the evidence import and the CLI's argument paths for a while, on fresh seeds.

    python benchmarks/fuzz.py [--minutes 5] [--seed N] [--target loaders|mutated|bytes|import|cli|all]

The targets are those CI runs briefly on a fixed seed (``tests/security/test_fuzz.py``). Prints, per
target, how many inputs ran and the first failure with the seed that reproduces it; exit 1 on a
failure. CI is a busy machine: run it under ``nice``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _counting(check: Callable[[Any], None], counter: list[int]) -> Callable[[Any], None]:
    def counted_check(value: Any) -> None:
        counter[0] += 1
        check(value)

    return counted_check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--target", default="all",
                        choices=("loaders", "mutated", "bytes", "json", "import", "cli", "all"))
    args = parser.parse_args()

    # Run as a script, this folder comes first on sys.path, where benchmarks/evidence_store.py would
    # shadow the evidence_store package; the project root must come first instead.
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != here]

    import json

    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from evidence_store.migrate import upgrade
    from tests.security.adversarial import POLICY, PROFILE, SNAPSHOT
    from tests.security.fuzz_targets import (
        check_cli,
        check_import,
        check_loaders,
        cli_argvs,
        export_files,
        json_values,
        mutated_documents,
        scratch_folder,
        yaml_texts,
    )

    folder = scratch_folder()
    store = f"sqlite:///{folder / 'store.sqlite3'}"
    upgrade(store)
    (folder / "doc.yaml").write_text("name: [unclosed\n")
    (folder / "export.jsonl").write_text('{"format":"canary-evidence","version":1}\n{"id": 1}\n')
    paths = {"profile": str(PROFILE), "snapshot": str(SNAPSHOT), "policy": str(POLICY),
             "doc": str(folder / "doc.yaml"), "export": str(folder / "export.jsonl"), "dir": str(folder)}
    import os

    os.environ["CANARY_DB_URL"] = store

    targets: dict[str, tuple[Any, Callable[[Any], None]]] = {
        "loaders": (yaml_texts, lambda t: check_loaders(t, folder)),
        "mutated": (mutated_documents(), lambda d: check_loaders(d[1], folder, kinds=(d[0],))),
        "bytes": (st.binary(max_size=400), lambda b: check_loaders(b, folder, kinds=("profile", "policy"))),
        "json": (json_values, lambda v: check_loaders(json.dumps(v, allow_nan=True), folder)),
        "import": (export_files(), lambda t: check_import(t, folder)),
        "cli": (cli_argvs, lambda a: check_cli(a[0], a[1], store=store, paths=paths)),
    }
    chosen = list(targets) if args.target == "all" else [args.target]
    share_s = args.minutes * 60 / len(chosen)
    first_seed = args.seed if args.seed is not None else random.randrange(2**32)
    failed = False
    print(f"{'target':<10} {'inputs':>8} {'seconds':>8}  result (first seed {first_seed})")
    for name in chosen:
        strategy, check = targets[name]
        counted = [0]
        counted_check = _counting(check, counted)

        started = time.monotonic()
        run_seed = first_seed
        result = "ok"
        while time.monotonic() - started < share_s:
            test = seed(run_seed)(settings(max_examples=200, deadline=None, database=None,
                                           suppress_health_check=list(HealthCheck))(given(strategy)(counted_check)))
            try:
                test()
            except Exception as exc:  # an assertion of a target, or several (hypothesis groups them)
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                result = f"FAILED (seed {run_seed}): {first[:300]}"
                failed = True
                break
            run_seed += 1
        print(f"{name:<10} {counted[0]:>8} {time.monotonic() - started:>8.1f}  {result}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
