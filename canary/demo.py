"""``make demo``: the whole flow on simulated GPUs with real example workloads.

1. Stage 1 on two counterexamples: a 35%-utilised H100 that is full, a 95%-utilised H200 with room.
2. ``canary admit`` of an embedding service next to a persistent NCCL-style kernel on a simulated
   H100 under MPS: the stage-1 table, the probe's progress, the certificate.
3. The same admission again: decided from the evidence cache in milliseconds.
4. A pair the canary rejects: the same service next to ResNet-50 training under time-slicing.

The evidence store is a fresh SQLite file, ``evidence.sqlite3``, in the folder ``$CANARY_DEMO_DIR``
names (created when missing; a relative path is relative to the working folder), else in
``.canary-demo/`` at the top of the repository. The default store in the user's data directory is left
alone, and every run removes the demo store it finds there first, so it starts from an empty cache.
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


#: The environment variable naming the demo store's folder.
DEMO_DIR_ENV = "CANARY_DEMO_DIR"


def demo_dir() -> Path:
    """The folder of the demo's store: ``$CANARY_DEMO_DIR``, else ``.canary-demo/`` in the repository."""
    given = os.environ.get(DEMO_DIR_ENV, "")
    return Path(given).absolute() if given else ROOT / ".canary-demo"


def _fresh_store(folder: Path) -> Path:
    """``folder/evidence.sqlite3`` with no store there (created folder, leftovers removed); an
    ``InputError`` naming ``$CANARY_DEMO_DIR`` when the folder cannot hold one."""
    from canary.errors import InputError

    given = bool(os.environ.get(DEMO_DIR_ENV))
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(20, "it is not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in folder.glob("evidence.sqlite3*"):
            leftover.unlink()
    except OSError as err:
        hint = "" if given else f" (set ${DEMO_DIR_ENV} to a folder the demo may write)"
        raise InputError(f"{folder} cannot hold the demo's store: {err.strerror or err}{hint}",
                         field=f"${DEMO_DIR_ENV}" if given else None) from None
    return folder / "evidence.sqlite3"


def run() -> int:
    from canary.errors import InputError

    try:
        store = _fresh_store(demo_dir())
    except InputError as err:
        sys.stderr.write(f"demo: {err}\n")
        return 2
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
