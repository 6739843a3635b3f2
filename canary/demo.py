"""``make demo``: the whole flow on simulated GPUs with real example workloads.

1. Stage 1 on two counterexamples: a 35%-utilised H100 that is full, a 95%-utilised H200 with room.
2. ``canary admit`` of an embedding service next to a persistent NCCL-style kernel on a simulated
   H100 under MPS: the stage-1 table, the probe's progress, the certificate.
3. The same admission again: decided from the evidence cache in milliseconds.
4. A pair the canary rejects: the same service next to ResNet-50 training under time-slicing.

The evidence store is a fresh SQLite file under ``.canary-demo/`` (the default store in the user's
data directory is left alone), so every run starts from an empty cache.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from canary.cli import main

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"


def _step(title: str, argv: list[str]) -> int:
    sys.stdout.write(f"\n=== {title}\n$ canary {' '.join(_short(a) for a in argv)}\n")
    sys.stdout.flush()
    t0 = time.perf_counter()
    code = main(argv)
    sys.stdout.write(f"(exit {code}, {time.perf_counter() - t0:.2f} s wall)\n")
    sys.stdout.flush()
    return code


def _short(arg: str) -> str:
    return os.path.relpath(arg, ROOT) if arg.startswith(str(ROOT)) else arg


def run() -> int:
    store = ROOT / ".canary-demo" / "evidence.sqlite3"
    store.parent.mkdir(exist_ok=True)
    for leftover in store.parent.glob("evidence.sqlite3*"):
        leftover.unlink()
    db = ["--db", f"sqlite:///{store}"]
    snap, prof = EX / "snapshots", EX / "profiles"
    codes = [
        _step("A 35%-utilised H100 that is full: a persistent kernel holds every SM's registers",
              [*db, "fit", str(snap / "a-persistent-35pct.yaml"), str(prof / "llm-decode.yaml")]),
        _step("A 95%-utilised H200 with room: a free MIG placement",
              [*db, "fit", str(snap / "c-mig-95pct.yaml"), str(prof / "llm-decode.yaml")]),
        _step("Admit an embedding service beside a persistent NCCL kernel (simulated H100, MPS): stage 1, probe, "
              "certificate", [*db, "admit", str(snap / "g-nccl-mps-room.yaml"), str(prof / "embedding-service.yaml")]),
        _step("The same admission again: decided from the evidence cache",
              [*db, "admit", str(snap / "g-nccl-mps-room.yaml"), str(prof / "embedding-service.yaml")]),
        _step("A pair the canary rejects: the same service beside ResNet-50 training under time-slicing",
              [*db, "admit", "h100", str(prof / "embedding-service.yaml"), "--resident",
               str(prof / "resnet50-training.yaml")]),
    ]
    expected = [1, 0, 0, 0, 1]
    if codes != expected:
        sys.stderr.write(f"demo: exit codes {codes}, expected {expected}\n")
        return 1
    sys.stdout.write(f"\nEvidence and certificates are in {store} — try:\n"
                     f"  .venv/bin/canary --db sqlite:///{_short(str(store))} evidence list\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
