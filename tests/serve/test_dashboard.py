"""Every series the Grafana dashboard queries is one the service exports (no panel stays empty
because of a renamed metric)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from canary.serve.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def _exported() -> set[str]:
    metrics = Metrics()
    metrics.watch_store(lambda: ({"running": 1}, {"gpu": 1}))
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        if family.type == "counter":  # a labelled counter with no child yet exports no sample
            names.add(f"{family.name}_total")
        for sample in family.samples:
            names.add(sample.name)
    for histogram in ("canary_decision_seconds", "canary_store_seconds", "canary_probe_duration_seconds",
                      "canary_probe_exposure_requests"):
        names.add(f"{histogram}_bucket")  # a histogram with no observation yet exports no bucket sample
    return names


def test_dashboard_queries_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bcanary_[a-z_]+", e)}
    assert used, "the dashboard queries nothing"
    missing = used - _exported()
    assert not missing, f"the dashboard queries metrics the service does not export: {sorted(missing)}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
