"""The limiting resource is a permanent shortfall (``never``) whenever one exists; a shortfall that
may go away (``now``) limits only when every shortfall is ``now``. Among equals, the resource order
(``RESOURCE_ORDER``) decides, as before. Naming a ``now`` shortfall while a ``never`` one stands
would tell an operator or a scheduler to retry for nothing.
"""

from __future__ import annotations

import subprocess

import pytest

from canary.catalog import lookup
from canary.certificate import Finding
from canary.hardfit import check, limiting_finding, parse_regime
from canary.policy import load_policy
from canary.profile import KernelSpec, MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigState, MpsState
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

GiB = 1 << 30
POLICY = load_policy("default")


def f(resource: str, verdict: str, shortfall: str | None = None) -> Finding:
    return Finding(resource=resource, demand=1, available=0, unit="x", verdict=verdict,  # type: ignore[arg-type]
                   source="test", shortfall=shortfall)  # type: ignore[arg-type]


@pytest.mark.parametrize(("findings", "want"), [
    pytest.param([f("a", "yes")], None, id="all-yes-none"),
    pytest.param([f("a", "unknown"), f("b", "yes")], ("a", "unknown", None), id="unknown-only"),
    pytest.param([f("a", "unknown"), f("b", "no", "now")], ("b", "no", "now"), id="no-beats-unknown"),
    # The shape: a placement short now comes first, memory short never comes later.
    pytest.param([f("mig_placement", "no", "now"), f("hbm", "no", "never")], ("hbm", "no", "never"),
                 id="never-beats-an-earlier-now"),
    pytest.param([f("a", "no", "now"), f("b", "no", "now")], ("a", "no", "now"), id="all-now-first-in-order"),
    pytest.param([f("a", "no", "never"), f("b", "no", "never")], ("a", "no", "never"),
                 id="several-never-first-in-order"),
    pytest.param([f("a", "unknown"), f("b", "no", "now"), f("c", "no", "never"), f("d", "no", "never")],
                 ("c", "no", "never"), id="mixed"),
])
def test_limiting_finding_prefers_never(findings: list[Finding], want: tuple[str, str, str | None] | None) -> None:
    got = limiting_finding(findings)
    assert (None if got is None else (got.resource, got.verdict, got.shortfall)) == want


def test_a_kernel_that_never_launches_outranks_a_mode_that_may_change() -> None:
    """EXCLUSIVE_PROCESS with a resident context: compute_mode is short now (the holder may exit).
    A 1024-thread block at 65 registers/thread needs 1024 × 65 = 66,560 > 65,536 registers (more after
    the 256-register warp rounding): it never launches on an H100 SM. compute_mode comes first in the
    resource order, but registers (never) limits."""
    snap = DeviceSnapshot(device_type="h100-sxm", compute_mode="EXCLUSIVE_PROCESS", mig=MigState(enabled=False),
                          mps=MpsState(running=False, clients=0), memory_total_bytes=80 * GiB,
                          memory_used_bytes=12 * GiB, memory_reserved_bytes=600 << 20, green_partitions_sms=(),
                          source="nvml")
    cand = WorkloadProfile(name="cand", version="v1",
                           memory=MemoryEnvelope(reserved_bytes=GiB, peak_bytes=GiB),
                           kernels=(KernelSpec(name="fat", registers_per_thread=65, threads_per_block=1024),),
                           sharing=SharingModes())
    hard = check(snap, lookup("h100-sxm"), cand, POLICY, parse_regime("timeslice"))
    by = {x.resource: x.shortfall for x in hard.findings if x.verdict == "no"}
    assert by.get("compute_mode") == "now" and by.get("registers") == "never", hard.findings
    assert (hard.verdict, hard.limiting_resource) == ("no", "registers")
    lim = hard.limiting_finding
    assert lim is not None and lim.shortfall == "never"


def test_the_headline_names_the_permanent_shortfall(tmp_path) -> None:
    """Example (d), hand-derived: both 3g.40gb placements ([0,4), [4,8)) are broken by the 1g.10gb
    instances at slices 1 and 5 (now: either may go); llm-decode's 42 GiB peak + 0.5 GiB context
    exceeds a 3g.40gb instance's 39.5 GiB − 2 GiB headroom = 37.5 GiB (never)."""
    argv = [*canary_cmd(), "fit", str(EXAMPLES / "snapshots" / "d-mig-no-placement.yaml"),
            str(EXAMPLES / "profiles" / "llm-decode.yaml"), "--regime", "mig:3g.40gb"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "limiting resource: hbm (never" in proc.stdout, proc.stdout
    assert "does not fit: hbm" in proc.stdout
    assert "NO (now)" in proc.stdout  # the placement row is still shown
