"""Lease arithmetic shared by the probe journal and device reservations."""

from __future__ import annotations

from datetime import datetime, timedelta

from canary.errors import InputError
from evidence_store.schemas import to_utc


def lease_until(now: datetime, lease_s: float) -> datetime:
    """When a lease of ``lease_s`` seconds taken at ``now`` ends; a lease must be positive."""
    if not lease_s > 0:
        raise InputError(f"a lease must be positive, got {lease_s} s", field="lease_s")
    return to_utc(now) + timedelta(seconds=lease_s)
