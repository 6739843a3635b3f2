"""Errors of the evidence store that ``canary.errors`` does not already name.

::

    CanaryError (canary.errors)
    ├── ReservationConflict   exit 1   the device has no room left for this booking: a reject, not a failure
    └── OperationalError (canary.errors)
        ├── LeaseLost                exit 4  a probe's journal lease was taken from it
        └── StoreUnavailable (canary.errors)
            └── TransientStoreError  exit 4  worth retrying (lock, serialization failure, lost connection)

A full device is an answer about the device, not a broken store: it maps to the *reject* exit code (1)
so that a script never mistakes "no room now" for "the database is down" (exit 4). Store and schema
failures use ``canary.errors.StoreUnavailable`` and ``SchemaOutOfDate`` (exit 4); bad records and
conflicting writes use ``canary.errors.InputError`` (exit 2).
"""

from __future__ import annotations

from typing import Literal

from canary.errors import EXIT_REJECT, CanaryError, InputError, OperationalError, StoreUnavailable

ConflictResource = Literal["memory", "mps", "mig"]


class NoSuchId(InputError):
    """An id (or id prefix) a user gave that names no record: bad input (exit 2) on the command line, a 404
    in the service — unlike an ambiguous prefix, which is bad input everywhere."""


class ReservationConflict(CanaryError):
    """The booking does not fit beside the active reservations of the device.

    ``requested``, ``reserved`` and ``capacity`` are in the unit of ``resource``: bytes for memory,
    percent for an MPS share; for a MIG instance they are 1, 1 and 1 (the instance is taken).
    """

    exit_code = EXIT_REJECT

    def __init__(
        self,
        *,
        device_id: str,
        resource: ConflictResource,
        requested: float,
        reserved: float,
        capacity: float,
        detail: str,
    ) -> None:
        self.device_id = device_id
        self.resource: ConflictResource = resource
        self.requested = requested
        self.reserved = reserved
        self.capacity = capacity
        super().__init__(f"device {device_id}: no room to reserve {resource}: {detail}")


class TransientStoreError(StoreUnavailable):
    """A store error worth retrying: connection refused or reset, serialization failure, deadlock,
    "database is locked". ``run_transaction`` retries these with bounded exponential backoff and
    raises a plain ``StoreUnavailable`` when the attempts are spent."""


class LeaseLost(OperationalError):
    """A probe tried to renew a lease it no longer holds: the journal says it is no longer running
    (``canary recover`` or another process marked it). The probe must stop and roll back."""
