"""The SRE's journey after a driver upgrade, on simulated devices: evidence recorded under driver
550.54.15, the node's driver becomes 570.86.10, ``canary fit`` no longer trusts the old evidence,
``canary revalidate --driver 570.86.10 --plan`` marks it stale (kept, never deleted) and re-probes the
hot pair, ``canary drift`` shows the change, and ``canary fit`` is decided again, from evidence
recorded under the new driver.

The simulated node is an idle H100 from the catalog with ResNet-50 training resident; the driver it
reports is ``$CANARY_SIM_DRIVER`` (``--sim-driver``), so the upgrade is a change of that variable.
Stage 1 by hand: H100 80 GiB, ResNet-50 training (peak 22 GiB), etl-transcode needs its peak +
512 MiB: far inside 80 − 22 − 4 GiB (headroom) − the driver reserve.
The default policy does not carry evidence across drivers, so after the upgrade the pair is unknown
(exit 3) until it is probed again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.journeys.conftest import EXAMPLES, Canary, Steps

pytestmark = pytest.mark.slow

OLD, NEW = "550.54.15", "570.86.10"
CANDIDATE = EXAMPLES / "profiles" / "etl-transcode.yaml"
RESIDENT = EXAMPLES / "profiles" / "resnet50-training.yaml"
EXIT_OF = {"admit": 0, "reject": 1, "unknown": 3}


def test_sre_after_a_driver_upgrade(tmp_path: Path, steps: Steps) -> None:
    cli = Canary(f"sqlite:///{tmp_path / 'evidence.sqlite3'}", tmp_path)
    cli.env["CANARY_SIM_DRIVER"] = OLD  # the simulated node runs the old driver
    pair = ("h100", CANDIDATE, "--resident", RESIDENT)
    plan = tmp_path / "hot.yaml"
    plan.write_text(f"name: hot-pairs\nbudget_s: 300\nconcurrency: 1\npairs:\n"
                    f"  - device: h100\n    candidate: {CANDIDATE}\n    residents: [{RESIDENT}]\n")

    with steps.step(f"canary admit under driver {OLD}: a probe, evidence under {OLD}"):
        code, cert = cli.json("admit", *pair, "--quiet", want=(0, 1))
        assert cert["decided_by"] == "canary" and code == EXIT_OF[cert["verdict"]], cert
        records = cli.evidence()
        assert [r["driver_version"] for r in records] == [OLD], records

    cli.env["CANARY_SIM_DRIVER"] = NEW  # the upgrade
    with steps.step(f"canary fit under driver {NEW} before revalidation: unknown (old-driver evidence)"):
        code, cert = cli.json("fit", *pair, want=3)
        assert cert["verdict"] == "unknown" and cert["hard_fit"] == "yes", cert
        assert OLD in cert["reason"] and NEW in cert["reason"], cert["reason"]

    with steps.step(f"canary revalidate --driver {NEW} --plan: stale marked, hot pair re-probed, drift"):
        code, report = cli.json("revalidate", "--driver", NEW, "--device-type", "h100-sxm", "--plan", plan,
                                want=0)
        assert report["stale_marked"] == 1, report
        [probed] = report["pairs"]
        assert probed["status"] == "probed" and probed["old_driver"] == OLD, probed
        assert probed["outcome"] in ("safe", "unsafe", "inconclusive") and probed["old_outcome"], probed

    with steps.step("the store keeps the old record as stale and holds a current one under the new driver"):
        records = cli.evidence()
        assert sorted((r["driver_version"], r["status"]) for r in records) == [(OLD, "stale"), (NEW, "current")]
        stale = next(r for r in records if r["status"] == "stale")
        assert NEW in (stale["stale_reason"] or ""), stale

    with steps.step("canary drift: the driver change is an event"):
        _, events = cli.json("drift", want=0)
        assert len(events) == 1, events
        event = events[0]
        assert (event["old_driver"], event["new_driver"]) == (OLD, NEW), event
        _, detail = cli.json("drift", str(event["id"]), want=0)
        text = str(detail)
        assert "trainer" in text or "etl-transcode" in text, detail

    with steps.step(f"canary fit under {NEW}: decided from evidence recorded under {NEW}"):
        code, cert = cli.json("fit", *pair, want=(0, 1))
        assert cert["decided_by"] == "cache" and code == EXIT_OF[cert["verdict"]], cert
        new_ids = {r["id"] for r in cli.evidence() if r["driver_version"] == NEW}
        assert cert["evidence"]["ids"] and set(cert["evidence"]["ids"]) <= new_ids, (cert["evidence"], new_ids)
        assert cert["evidence"]["cross_driver"] is False
    steps.verify()
