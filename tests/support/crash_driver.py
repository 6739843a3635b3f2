"""A prober that gets killed: runs one probe with the process executor and a store journal.

    python tests/support/crash_driver.py DB_URL PROBE_ID PORT

Prints ``PROBING <pgid>`` once the candidate runs, then keeps probing (long windows) until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio

from canary.policy import RiskBudget
from canary.probe.executors.process import ProcessExecutor
from canary.probe.orchestrator import ProbeProgress, run_probe
from evidence_store.database import make_engine
from evidence_store.journal import StoreJournal
from tests.support.doubles import Bench, FakeMonitor
from tests.support.helpers import candidate_profile

KEY = {
    "resident_version": "r1",
    "resident_shape_family": "any",
    "candidate_version": "c1",
    "candidate_shape_family": "any",
    "device_type": "h100-sxm",
    "regime": "timeslice",
}


def main() -> None:
    url, probe_id, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    executor = ProcessExecutor(candidate_profile(port, "--burners", "1"), mps_active_thread_pct=50)
    told = False

    def progress(p: ProbeProgress) -> None:
        nonlocal told
        if p.state == "PROBING" and not told:
            told = True
            print(f"PROBING {executor.pgid}", flush=True)

    budget = RiskBudget(
        max_probe_time_s=120,
        max_requests_exposed=100000,
        max_resident_slowdown_pct=10,
        required_confidence=0.95,
        baseline_window_s=0.1,
        sampling_window_s=5.0,
    )
    anyio.run(
        lambda: run_probe(
            probe_id=probe_id,
            budget=budget,
            executor=executor,
            monitor=FakeMonitor(Bench()),
            journal=StoreJournal(make_engine(url)),
            key_json=KEY,
            owner="crash-driver",
            progress=progress,
            lease_s=1.0,
        )
    )


if __name__ == "__main__":
    main()
