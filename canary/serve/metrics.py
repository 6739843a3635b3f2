"""Prometheus metrics of the service (``prometheus-client``), one registry per application.

Counters and histograms count what this server did. With one worker process they live in the
application's registry. With several (``--workers N``), ``canary serve`` runs them in
prometheus-client's multiprocess mode: each worker writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` (set before any worker starts, which is when prometheus-client chooses
its mode), and whichever worker answers a scrape adds up every worker's files
(``MultiProcessCollector``), so a scrape reports the whole server, not the one worker it reached.
The gauges that describe shared state — probes queued and running, and reservation bytes held per
device — are read from the store at scrape time, the same truth from every worker (the service
declares no in-process gauges, so no multiprocess gauge mode is involved). The Grafana dashboard in
``docs/grafana-dashboard.json`` is built on these names.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PROBE_BUCKETS = (0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
EXPOSURE_BUCKETS = (0, 1, 10, 50, 100, 250, 500, 1000, 5000, 10000)


class StoreState(Collector):
    """Gauges read from the store when Prometheus scrapes."""

    def __init__(self, read: Callable[[], tuple[dict[str, int], dict[str, int]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        probes = GaugeMetricFamily("canary_probes", "probes in the service's queue by state (store-wide)",
                                   labels=["state"])
        held = GaugeMetricFamily("canary_reservation_held_bytes", "memory booked by active reservations, per device",
                                 labels=["device"])
        up = GaugeMetricFamily("canary_store_up", "1 when the store answered the scrape's queries")
        try:
            by_state, by_device = self._read()
        except Exception:  # a scrape must not fail because the store is down: say so in a gauge instead
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for state in ("queued", "running"):
            probes.add_metric([state], by_state.get(state, 0))
        for device, n in sorted(by_device.items()):
            held.add_metric([device], n)
        yield up
        yield probes
        yield held


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The directory of multiprocess mode when this process's prometheus-client runs in it, else
    ``None``. The mode is fixed when prometheus-client is first imported (from the environment), so
    the answer comes from the mode in force, not from the variable as it may stand now."""
    if values.ValueClass is values.MutexValue:
        return None
    import os

    return os.environ.get(MULTIPROC_ENV)


class Metrics:
    def __init__(self) -> None:
        self.multiprocess_dir = multiprocess_dir()
        self._store_state: StoreState | None = None
        self.registry = CollectorRegistry()
        r = self.registry
        self.admissions = Counter("canary_admissions", "decisions answered, by endpoint, verdict and decider",
                                  ["endpoint", "verdict", "decided_by"], registry=r)
        self.decision_seconds = Histogram("canary_decision_seconds", "time to answer a decision request "
                                          "(without probe time)", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.cache = Counter("canary_evidence_cache_requests", "decisions needing evidence: hit (decided from "
                             "evidence) or miss (a probe is needed)", ["result"], registry=r)
        self.store_seconds = Histogram("canary_store_seconds", "time of one unit of work against the store",
                                       ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.probe_seconds = Histogram("canary_probe_duration_seconds", "wall time of a probe run by this process, "
                                       "by outcome", ["outcome"], buckets=PROBE_BUCKETS, registry=r)
        self.probe_exposure = Histogram("canary_probe_exposure_requests", "requests the candidate served in a probe",
                                        buckets=EXPOSURE_BUCKETS, registry=r)
        self.probes = Counter("canary_probes_finished", "probes this process finished, by final state",
                              ["state"], registry=r)
        self.coalesced = Counter("canary_probe_coalesced_requests", "admission requests that joined a probe "
                                 "already queued or running for their pair", registry=r)
        self.probes_started = Counter("canary_probes_queued", "probes this process queued (first request of a pair)",
                                      registry=r)
        self.http = Counter("canary_http_responses", "responses by route and status", ["route", "status"], registry=r)
        self.auth_failures = Counter("canary_auth_failures", "requests refused for a missing, bad or under-scoped "
                                     "token", ["reason"], registry=r)
        self.bodies = Counter("canary_request_bodies", "decision request bodies by route: 'kept' (seen before: decided "
                              "without validating or resolving it again), 'prepared' (validated and resolved, then "
                              "kept), 'not_kept' (its resolution can change: a bare registry name, an agent's device)",
                              ["route", "result"], registry=r)

        # A labelled series by its metric and label values: ``labels()`` validates and locks on every call,
        # and a decision touches five series. The label values are few (endpoints, verdicts, deciders,
        # route templates, status codes, store operations), so this stays small.
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}

    def series(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label values (``metric``: one of this object's,
        which live as long as it does, so its id names it)."""
        key = (id(metric), labels)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = metric.labels(*labels)
        return child

    def watch_store(self, read: Callable[[], tuple[dict[str, int], dict[str, int]]]) -> None:
        self._store_state = StoreState(read)
        self.registry.register(self._store_state)

    def exposition(self) -> bytes:
        """The scrape's body: this registry, or, in multiprocess mode, every worker's files added up
        plus the store's gauges."""
        if self.multiprocess_dir is None:
            return bytes(generate_latest(self.registry))
        from prometheus_client.multiprocess import MultiProcessCollector

        scrape = CollectorRegistry()
        MultiProcessCollector(scrape, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        if self._store_state is not None:
            scrape.register(self._store_state)
        return bytes(generate_latest(scrape))

    @contextmanager
    def store_op(self, operation: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.series(self.store_seconds, operation).observe(time.perf_counter() - t0)

    def decided(self, endpoint: str, cert: Any, seconds: float) -> None:
        self.series(self.admissions, endpoint, cert.verdict, cert.decided_by).inc()
        self.series(self.decision_seconds, endpoint).observe(seconds)
        if cert.decided_by == "cache":
            self.series(self.cache, "hit").inc()

    def probe_finished(self, state: str, started: dt.datetime | None, finished: dt.datetime,
                       cert: dict[str, Any] | None) -> None:
        self.probes.labels(state).inc()
        probe = (cert or {}).get("probe") or {}
        outcome = str(probe.get("outcome") or state)
        if started is not None:
            self.probe_seconds.labels(outcome).observe(max(0.0, (finished - started).total_seconds()))
        exposure = probe.get("exposure_used")
        if isinstance(exposure, int):
            self.probe_exposure.observe(exposure)
