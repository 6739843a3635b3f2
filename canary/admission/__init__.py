"""The two-stage engine: stage 1 (hard fit) → evidence → probe → record → reserve → certificate.

One package, four parts (docs/architecture.md):

- ``request``: loading one admission question (``load_request``, ``build_request``,
  ``request_from_json``, ``fresh_until_from_json``, ``Request``, ``pair_key``);
- ``decisions``: what stage 1, the evidence and the probes mean, as pure functions
  (``hard_fit_decision``, ``cache_decision``, ``probe_decision`` → ``Decision``; ``make_certificate``);
- ``store``: admission's access to the evidence store (``EvidenceAccess``, ``store_url``,
  ``store_exists``, ``open_store_for_writing``);
- ``flow``: the thin flows that gather inputs and write results (``fit``, ``pairs_to_probe``,
  ``admit_async``, ``admit``, ``record_feedback``);

and ``recovery``, the clean-up of orphaned probes every probe start runs (and ``canary recover``).

Importing the package stays light for ``gpu-fit``: every part imports SQLAlchemy, the store and the
probe orchestrator only inside the functions that use them.
"""

from __future__ import annotations

from canary._model import utcnow
from canary.admission.decisions import (
    REVALIDATION_TRIGGERS,
    Decision,
    PairEvidence,
    ProbeRun,
    cache_decision,
    hard_fit,
    hard_fit_decision,
    make_certificate,
    probe_decision,
)
from canary.admission.flow import admit, admit_async, fit, pairs_to_probe, record_feedback
from canary.admission.request import (
    FRESH_UNTIL_FIELD,
    Request,
    build_request,
    fresh_until_from_json,
    load_request,
    pair_key,
    request_from_json,
)
from canary.admission.store import EvidenceAccess, open_store_for_writing, store_exists, store_url

__all__ = [
    "FRESH_UNTIL_FIELD",
    "REVALIDATION_TRIGGERS",
    "Decision",
    "EvidenceAccess",
    "PairEvidence",
    "ProbeRun",
    "Request",
    "admit",
    "admit_async",
    "build_request",
    "cache_decision",
    "fit",
    "fresh_until_from_json",
    "hard_fit",
    "hard_fit_decision",
    "load_request",
    "make_certificate",
    "open_store_for_writing",
    "pair_key",
    "pairs_to_probe",
    "probe_decision",
    "record_feedback",
    "request_from_json",
    "store_exists",
    "store_url",
    "utcnow",
]
