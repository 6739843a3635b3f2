"""Reading devices that node agents publish (the service's decisions and extender, a node's device list).

A published snapshot is trusted only as long as it is fresh: one older than the policy's
``snapshot_max_age_s`` is turned into a snapshot whose residents and used memory are *unknown*
("snapshot is N s old"), so stage 1 answers unknown — never a yes drawn from a stale view.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

from canary._model import validate_document
from canary.errors import InputError
from canary.policy import Policy
from canary.snapshot import DeviceSnapshot

if TYPE_CHECKING:
    from canary.backends import ResolvedDevice
    from evidence_store.published import Published

PublishedGet = Callable[[str], "Published | None"]  # ref → the row a node agent publishes


def stale_view(snap: DeviceSnapshot, age_s: float, limit_s: float) -> DeviceSnapshot:
    """The snapshot as far as it can still be trusted: what it said about occupancy is unknown now."""
    why = f"snapshot is {age_s:.0f} s old (policy limit {limit_s:g} s): its agent has not published since"
    reasons = {**snap.unknown_reasons, "residents": why, "memory_used_bytes": why}
    return snap.model_copy(update={"memory_used_bytes": None, "unknown_reasons": reasons})


def published_device(ref: str, published: PublishedGet, policy: Policy,
                     now: dt.datetime | None = None) -> ResolvedDevice:
    """The ``ResolvedDevice`` for ``agent:NODE/NAME`` from the store; stale snapshots become unknown."""
    from canary.backends import ResolvedDevice
    from canary.catalog import lookup

    pub = published(ref)
    if pub is None:
        raise InputError(f"no node agent publishes {ref!r} (is `canary agent` running on that node?)", field="device")
    snap = validate_document(DeviceSnapshot, pub.snapshot_json, file=f"published snapshot {ref}")
    age = pub.age_s(now or dt.datetime.now(dt.UTC))
    if age > policy.snapshot_max_age_s:
        snap = stale_view(snap, age, policy.snapshot_max_age_s)
    elif pub.draining:
        why = f"node {pub.node} is draining (canary agent drain): it takes no new workloads"
        snap = snap.model_copy(update={"memory_used_bytes": None, "unknown_reasons": {
            **snap.unknown_reasons, "residents": why, "memory_used_bytes": why}})
    try:
        spec = lookup(snap.device_type)
    except InputError as exc:
        raise InputError(exc.problem, field="device.device_type") from None
    return ResolvedDevice(snapshot=snap, spec=spec, ref=pub.ref, kind="published")
