"""The counterexample benchmark and its ablation (``canary bench``).

``run_suite(quick=, seed=)`` returns the results document; ``write_all(doc, out_dir, command=)``
writes ``results.json``, ``report.md`` and the PNG plots. See docs/benchmark.md.
"""

from __future__ import annotations

from canary.bench.report import write_all
from canary.bench.runner import run_seeds, run_suite

__all__ = ["run_seeds", "run_suite", "write_all"]
