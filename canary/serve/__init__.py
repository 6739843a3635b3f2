"""``canary serve``: the admission service platforms call.

An ASGI application (FastAPI on uvicorn) over the same decision core as the CLI
(``canary.admission``): ``/v1/fit``, ``/v1/admissions`` and ``/v1/probes/{id}``, evidence,
feedback, reservations, the profile/snapshot registry, the Kubernetes scheduler extender verbs,
``/healthz``, ``/readyz`` and ``/metrics``. Probes are coordinated through the evidence store
(``evidence_store.service.probe_queue``): one probe per pair key across every server process, never two on
one device. See ``docs/serve.md``.
"""

from __future__ import annotations

from canary.serve.config import ServeConfig

__all__ = ["ServeConfig"]
