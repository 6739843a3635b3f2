"""Every example snapshot reproduces its counterexample: verdict and limiting resource asserted."""

from __future__ import annotations

import json
import subprocess

import pytest

from canary.admission import fit, load_request
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

CASES = [
    # snapshot, candidate, regime, hard fit, verdict, limiting resource
    ("a-persistent-35pct", "llm-decode", None, "no", "reject", "registers"),
    ("b-idle-hbm-held", "resnet50-training", None, "no", "reject", "hbm"),
    ("c-mig-95pct", "llm-decode", None, "yes", "admit", None),
    # (d): both 3g.40gb placements are broken (now) and the 42 GiB peak exceeds a ~40 GB instance
    # (never): the permanent shortfall limits.
    ("d-mig-no-placement", "llm-decode", "mig:3g.40gb", "no", "reject", "hbm"),
    ("e-exclusive-process", "embedding-service", None, "no", "reject", "compute_mode"),
    ("f-unprofiled-resident", "embedding-service", None, "unknown", "unknown", "resident_kernels"),
    ("g-nccl-mps-room", "embedding-service", None, "yes", "unknown", None),
    ("h-hidden-context", "llm-decode", None, "no", "reject", "compute_mode"),
    ("i-uncatalogued-live", "llm-decode", None, "unknown", "unknown", "candidate_kernels"),
    ("j-mi300x-spx", "resnet50-training", None, "yes", "admit", None),
    # (d) with a candidate that fits a 3g.40gb instance (12.5 GiB of 37.5): only the placement is short.
    ("d-mig-no-placement", "sd-unet-serving", "mig:3g.40gb", "no", "reject", "mig_placement"),
]


@pytest.mark.parametrize(("snapshot", "candidate", "regime", "hard", "verdict", "limiting"), CASES)
def test_example_verdicts(snapshot: str, candidate: str, regime: str | None, hard: str, verdict: str,
                          limiting: str | None) -> None:
    from canary.admission import utcnow

    req = load_request(str(EXAMPLES / "snapshots" / f"{snapshot}.yaml"),
                       str(EXAMPLES / "profiles" / f"{candidate}.yaml"), regime=regime)
    cert = fit(req, None, utcnow())
    assert cert.hard_fit == hard
    assert cert.verdict == verdict
    assert cert.limiting_resource == limiting


def test_telemetry_does_not_predict_allocatability() -> None:
    """The point of the examples: a 35% card is full, a 95% card has room."""
    from canary.snapshot import load_snapshot

    busy = load_snapshot(EXAMPLES / "snapshots" / "c-mig-95pct.yaml")
    idle = load_snapshot(EXAMPLES / "snapshots" / "a-persistent-35pct.yaml")
    assert busy.telemetry.utilization_gpu_pct is not None and idle.telemetry.utilization_gpu_pct is not None
    assert busy.telemetry.utilization_gpu_pct.value > idle.telemetry.utilization_gpu_pct.value


@pytest.mark.parametrize(("snapshot", "candidate", "regime", "hard", "verdict", "limiting"), CASES[:6])
def test_example_verdicts_through_the_cli(tmp_path, snapshot, candidate, regime, hard, verdict, limiting) -> None:
    argv = [*canary_cmd(), "fit", str(EXAMPLES / "snapshots" / f"{snapshot}.yaml"),
            str(EXAMPLES / "profiles" / f"{candidate}.yaml"), "--json"]
    if regime:
        argv += ["--regime", regime]
    proc = subprocess.run(argv, capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == {"admit": 0, "reject": 1, "unknown": 3}[verdict], proc.stderr
    cert = json.loads(proc.stdout)
    assert cert["limiting_resource"] == limiting
    assert cert["verdict"] == verdict
    for f in cert["findings"]:
        assert set(f) >= {"resource", "demand", "available", "verdict", "source"}
