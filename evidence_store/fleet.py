"""Node agents' store functions, kept under this name for importers not yet moved; each aggregate has
its module: ``published`` (device snapshots and agents' claims), ``admission_log`` (the admission
history), ``drift`` (driver drift events), ``warm_plans``; the probe queue's notification and orphan
sweep are ``service.probe_queue``'s, the expiring evidence ``evidence``'s. New code imports those."""

from __future__ import annotations

from evidence_store.admission_log import (
    ADMISSION_LOG_RETENTION_DAYS,
    PRUNE_BATCH,
    HotPair,
    count_admissions_before,
    hot_pairs,
    latest_request_for_keys,
    log_admission,
    log_admissions,
    oldest_admission,
    prune_admission_log,
)
from evidence_store.drift import (
    drift_report,
    get_drift,
    list_drift,
    record_drift,
)
from evidence_store.evidence import (
    expiring_evidence,
)
from evidence_store.published import (
    AGENT_REF_PREFIX,
    DeviceClaimed,
    Published,
    PublishResult,
    agent_device_id,
    agent_device_ids,
    agent_ref,
    claim_conflicts,
    forget_node,
    get_by_ref,
    list_published,
    publish,
    release_claims,
    renew_claim,
    set_draining,
)
from evidence_store.service.probe_queue import (
    NOTIFY_CHANNEL,
    abort_orphaned_queued,
    notify_queued,
    submit_and_notify,
)
from evidence_store.warm_plans import (
    get_warm_plan,
    store_warm_plan,
)

__all__ = [
    "ADMISSION_LOG_RETENTION_DAYS",
    "AGENT_REF_PREFIX",
    "NOTIFY_CHANNEL",
    "PRUNE_BATCH",
    "DeviceClaimed",
    "HotPair",
    "PublishResult",
    "Published",
    "abort_orphaned_queued",
    "agent_device_id",
    "agent_device_ids",
    "agent_ref",
    "claim_conflicts",
    "count_admissions_before",
    "drift_report",
    "expiring_evidence",
    "forget_node",
    "get_by_ref",
    "get_drift",
    "get_warm_plan",
    "hot_pairs",
    "latest_request_for_keys",
    "list_drift",
    "list_published",
    "log_admission",
    "log_admissions",
    "notify_queued",
    "oldest_admission",
    "prune_admission_log",
    "publish",
    "record_drift",
    "release_claims",
    "renew_claim",
    "set_draining",
    "store_warm_plan",
    "submit_and_notify",
]
