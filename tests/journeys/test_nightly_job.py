"""The nightly job's journey, on a PostgreSQL store (a fleet's): ``canary warm PLAN`` with two good
pairs on simulated H100s and one on ``nvml:0`` (no GPU on this machine), the same plan again
(resumable: nothing probed twice), an admission during the day, ``canary warm --from-history``, and
``canary evidence export``.

Stage 1 by hand (H100: 80 GiB; default policy: 512 MiB per context, max(1 GiB, 5%) = 4 GiB kept free;
the catalog's driver reserve ≤ 1 GiB): embedding-service needs 6 + 0.5 GiB; beside ResNet-50 training
(peak 22 GiB) on an idle H100 ≥ 53 GiB are free; on ``g-nccl-mps-room.yaml`` (an H100 under MPS, 3 GiB
used, a 40 GiB pinned-memory limit per client, 100 of 132 SMs free of resident blocks) it fits too.
Both have no evidence, so both are probed. ``nvml:0`` cannot be read here: that pair is an operational error (exit
4), reported, and the others still run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.journeys.conftest import EXAMPLES, Canary, Steps

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PROFILES = EXAMPLES / "profiles"


def _plan(tmp_path: Path) -> Path:
    plan = tmp_path / "nightly.yaml"
    plan.write_text(f"""\
name: nightly-journey
budget_s: 600
concurrency: 1
pairs:
  - device: h100
    candidate: {PROFILES / 'embedding-service.yaml'}
    residents: [{PROFILES / 'resnet50-training.yaml'}]
  - device: nvml:0
    candidate: {PROFILES / 'embedding-service.yaml'}
  - device: {EXAMPLES / 'snapshots' / 'g-nccl-mps-room.yaml'}
    candidate: {PROFILES / 'embedding-service.yaml'}
""")
    return plan


def test_nightly_job(pg_url: str, tmp_path: Path, steps: Steps) -> None:
    cli = Canary(pg_url, tmp_path)
    plan = _plan(tmp_path)
    good = {0: "resnet50-training", 2: "comms"}

    with steps.step("canary warm PLAN: good pairs probed, nvml:0 reported, exit 4"):
        _, report = cli.json("warm", plan, want=4)
        by_index = {p["index"]: p for p in report["pairs"]}
        assert sorted(by_index) == [0, 1, 2], report
        for index, resident in good.items():
            pair = by_index[index]
            assert pair["status"] == "probed", pair
            assert resident in pair["label"] and pair["outcome"] in ("safe", "unsafe", "inconclusive"), pair
        failing = by_index[1]
        assert failing["status"] == "error" and "nvml:0" in failing["label"], failing
        assert "NVIDIA" in failing["detail"] or "NVML" in failing["detail"], failing

    with steps.step("canary warm PLAN (text): the table names every pair and the failure"):
        done = cli.run("warm", plan, want=4)
        assert "nvml:0" in done.stdout + done.stderr and "fresh" in done.stdout, done.stdout

    with steps.step("the store holds one record per probed pair, under the simulator's driver"):
        records = cli.evidence()
        assert len(records) == 2, records
        assert {r["key"]["device_type"] for r in records} == {"h100-sxm"}
        # time-slicing on the idle H100; MPS at the candidate's declared 30% where MPS runs
        assert {r["key"]["regime"] for r in records} == {"timeslice", "mps:30"}
        assert all(r["status"] == "current" and r["driver_version"] for r in records), records

    with steps.step("canary warm PLAN again: the probed pairs are fresh, nothing probed twice"):
        _, again = cli.json("warm", plan, want=4)
        statuses = {p["index"]: p["status"] for p in again["pairs"]}
        assert statuses == {0: "fresh", 1: "error", 2: "fresh"}, again
        assert len(cli.evidence()) == 2

    with steps.step("an admission during the day (recorded in the admission history)"):
        _, cert = cli.json("admit", "h100", PROFILES / "embedding-service.yaml", "--resident",
                           PROFILES / "resnet50-training.yaml", "--quiet", want=(0, 1))
        assert cert["decided_by"] == "cache", cert  # the night's evidence decides it

    with steps.step("canary warm --from-history --expiring-within 30d: the requested pair, probed again"):
        # Evidence lives 7 days (default policy), inside the 30-day window: it counts as missing tonight.
        _, history = cli.json("warm", "--from-history", "--expiring-within", "30d", want=0)
        reasons = [e["reason"] for e in history["plan"]]
        assert "requested" in reasons, history["plan"]
        assert history["pairs"] and all(p["status"] == "probed" for p in history["pairs"]), history["pairs"]
        assert len(cli.evidence()) == 2 + len(history["pairs"])

    with steps.step("canary evidence export FILE: every record, format header first"):
        dump = tmp_path / "evidence.jsonl"
        cli.run("evidence", "export", dump, want=0)
        lines = dump.read_text().splitlines()
        assert json.loads(lines[0]) == {"format": "canary-evidence", "version": 3}
        exported = {json.loads(line)["id"] for line in lines[1:]}
        assert exported == {r["id"] for r in cli.evidence()}
    steps.verify()
