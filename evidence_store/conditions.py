"""The store's concepts written once as SQL conditions, for every query that needs them.

* ``active_booking(now)``: a reservation counts against its device at ``now`` — never released, its
  lease not yet expired (an expired lease frees itself; nothing has to release it).
* ``usable_evidence(now, oldest)``: an evidence record a lookup may pool at ``now`` — status ``current``,
  not expired, created after ``oldest`` (``now`` less the policy's evidence TTL).

``now`` and ``oldest`` are either aware UTC datetimes (bound as literals of the statement) or bind
parameters (``bindparam("now")``) for a statement built once and executed with its parameters: the hot
paths (``lookup``, ``decision_read``, ``reserved_bytes``) build theirs once at import.
``ReservationOut.active_at`` is the same rule as ``active_booking`` on a row already read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeAlias

from sqlalchemy import ColumnElement, and_
from sqlalchemy.sql.elements import BindParameter

from evidence_store.models import Evidence, Reservation
from evidence_store.schemas import to_utc

When: TypeAlias = datetime | BindParameter[Any]


def _value(when: When) -> When:
    return to_utc(when) if isinstance(when, datetime) else when


def active_booking(now: When) -> ColumnElement[bool]:
    """The reservation counts at ``now``: unreleased, lease not expired."""
    return and_(Reservation.released_at.is_(None), Reservation.expires_at > _value(now))


def usable_evidence(now: When, oldest: When) -> ColumnElement[bool]:
    """The evidence record may be pooled at ``now``: current, unexpired, created after ``oldest``."""
    return and_(Evidence.status == "current", Evidence.expires_at > _value(now), Evidence.created_at > _value(oldest))
