"""The probe queue moved to ``evidence_store.service.probe_queue``; this name is kept for importers not
yet moved, and new code imports the new module.

It is that same module object (``sys.modules``), not a copy of its names, so a test that patches a
function of ``evidence_store.probe_queue`` patches the one the queue calls."""

from __future__ import annotations

import sys

from evidence_store.service.probe_queue import (
    LIVE_STATES,
    NOTIFY_CHANNEL,
    TERMINAL_STATES,
    ProbeTicket,
    abort_orphaned_queued,
    any_queued,
    cancel,
    claim_next,
    count_by_state,
    finish,
    get,
    heartbeat,
    list_probes,
    notify_queued,
    pair_digest,
    recover_abandoned,
    submit,
    submit_and_notify,
)
from evidence_store.service.probe_queue import _done_since as _done_since  # patched by tests/serve

__all__ = [
    "LIVE_STATES",
    "NOTIFY_CHANNEL",
    "TERMINAL_STATES",
    "ProbeTicket",
    "abort_orphaned_queued",
    "any_queued",
    "cancel",
    "claim_next",
    "count_by_state",
    "finish",
    "get",
    "heartbeat",
    "list_probes",
    "notify_queued",
    "pair_digest",
    "recover_abandoned",
    "submit",
    "submit_and_notify",
]

from evidence_store.service import probe_queue as _moved

sys.modules[__name__] = _moved
