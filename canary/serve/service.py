"""What the routes share (``Service``): the store, the probe runner, metrics, the token cache, the
decision reads, the admission history writer and the caches of a process that is asked the same
questions again and again. One per application, built when it starts (``create_app``'s lifespan)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import anyio
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from canary.admission import EvidenceAccess, utcnow
from canary.admission.flow import Stage1Memo
from canary.fleetwork.runner import ProbeRunner, RunnerSettings
from canary.serve.auth import TokenCache
from canary.serve.bodies import PreparedBodies
from canary.serve.config import ServeConfig
from canary.serve.history import AdmissionHistory
from canary.serve.metrics import Metrics
from canary.serve.reads import DecisionReads
from canary.serve.resolve import Resolved, cached_policy, resolve
from canary.serve.schemas import DecisionRequest
from evidence_store.database import session_scope
from evidence_store.published import Published
from evidence_store.service import probe_queue, registry
from evidence_store.service.tokens import TokenInfo


def runner_settings(config: ServeConfig) -> RunnerSettings:
    return RunnerSettings(lease_s=config.probe_lease_s, max_concurrent=config.max_concurrent_probes,
                          sim_time_scale=config.sim_time_scale, agent_silence_s=config.agent_silence_s)


class Service:
    """What the routes share: the store, the probe runner, metrics, the token cache."""

    def __init__(self, config: ServeConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.metrics = Metrics()
        # every device but those node agents own; a queued request's policy read as the service reads it
        self.runner = ProbeRunner(engine, runner_settings(config), metrics=self.metrics, load_policy=cached_policy)
        self.tokens = TokenCache(self._verify_token, config.token_cache_s)
        self.metrics.watch_store(self._store_state)
        self.history = AdmissionHistory(self.db, window_s=config.history_window_s)
        self.decisions = anyio.CapacityLimiter(config.decision_threads)  # built in the lifespan: a loop runs
        self.stage1 = Stage1Memo()  # stage 1 by its exact inputs: the same documents arrive again and again
        self.reads = DecisionReads(engine, connections=config.read_connections, limiter=self.decisions,
                                   in_flight=config.reads_in_flight)
        # Request bodies validated and resolved before, by route (canary.serve.decide)
        self.prepared = {"fit": PreparedBodies(), "admissions": PreparedBodies()}
        # Registry entries are immutable once put (a different document under the same name@version is
        # refused), so an exact reference is read from the store once per process.
        self._registry_cache: dict[tuple[str, str, str], dict[str, Any]] = {}
        # Set when the process is asked to stop (SIGTERM, SIGINT: ``watch_stop_signals``): long-polls
        # answer at once instead of holding the connection until uvicorn's graceful timeout cancels them.
        self.stopping = anyio.Event()

    def watch_stop_signals(self) -> Callable[[], None]:
        """Chain a handler in front of the server's own for SIGTERM and SIGINT that sets ``stopping``
        (on the event loop); returns what restores the previous handlers. Only the main thread may set
        handlers: elsewhere (an application embedded in a test's thread) it does nothing."""
        import asyncio
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        previous: dict[int, Any] = {}

        def on_signal(sig: int, frame: Any) -> None:
            loop.call_soon_threadsafe(self.stopping.set)
            before = previous.get(sig)
            if callable(before):
                before(sig, frame)
            else:  # the default action (or ignored): as if this handler were not there
                signal.signal(sig, before if before is not None else signal.SIG_DFL)
                signal.raise_signal(sig)

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, handler in previous.items():
                if signal.getsignal(sig) is on_signal:
                    signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

        return restore

    def _verify_token(self, token: str, now: dt.datetime) -> TokenInfo | None:
        from evidence_store.service import tokens

        with self.metrics.store_op("token_verify"), session_scope(self.engine, read_only=True) as session:
            return tokens.verify(session, token, now=now)

    def _store_state(self) -> tuple[dict[str, int], dict[str, int]]:
        from sqlalchemy import func, select

        from evidence_store.models import Reservation

        now = utcnow()
        with session_scope(self.engine, read_only=True) as session:
            states = probe_queue.count_by_state(session)
            rows = session.execute(
                select(Reservation.device_id, func.sum(Reservation.memory_bytes))
                .where(Reservation.released_at.is_(None), Reservation.expires_at > now)
                .group_by(Reservation.device_id)).all()
        return states, {str(d): int(n or 0) for d, n in rows}

    @property
    def url(self) -> str:
        """The store URL with its password (``str(engine.url)`` masks it, which cannot connect)."""
        return str(self.engine.url.render_as_string(hide_password=False))

    def runner_wake(self) -> None:
        """Wake the probe runner from a worker thread (anyio events belong to the event loop)."""
        import anyio.from_thread

        anyio.from_thread.run_sync(self.runner.wake)

    def db(self, operation: str, fn: Callable[[Session], Any], *, read_only: bool = False) -> Any:
        with self.metrics.store_op(operation), session_scope(self.engine, read_only=read_only) as session:
            return fn(session)

    def registry_get(self, kind: str, name: str, version: str | None) -> dict[str, Any] | None:
        """A registry document; ``name@version`` from this process's cache after its first read (a bare
        name means the newest version, which a later put changes: always read)."""
        if version is not None:
            hit = self._registry_cache.get((kind, name, version))
            if hit is not None:
                return hit
        entry = self.db("registry_get", lambda s: registry.get(s, kind=kind, name=name, version=version),
                        read_only=True)
        if entry is None:
            return None
        document: dict[str, Any] = entry.document
        if version is not None:
            if len(self._registry_cache) >= 4096:  # bound memory: start over rather than grow
                self._registry_cache.clear()
            self._registry_cache[(kind, name, version)] = document
        return document

    def published_get(self, ref: str) -> Published | None:
        """A device a node agent publishes (``agent:NODE/NAME``), or ``None``."""
        from evidence_store.published import get_by_ref

        found: Published | None = self.db("published_get", lambda s: get_by_ref(s, ref), read_only=True)
        return found

    def resolve(self, body: DecisionRequest, *, reserve: bool = True, seed: int = 0) -> Resolved:
        return resolve(body, self.registry_get, default_policy=self.config.default_policy, reserve=reserve,
                       seed=seed, published=self.published_get)

    def access(self) -> EvidenceAccess:
        return EvidenceAccess.over(self.engine)
