"""Warm plans: the plan ``canary warm --from-history`` built, stored with its run id.

Functions take the caller's session and never commit; callers pass ``now`` (no clock is read here).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from evidence_store.fleet_models import WarmPlanRecord
from evidence_store.schemas import to_utc


def store_warm_plan(session: Session, *, run_id: str, params: dict[str, Any], plan: list[dict[str, Any]],
                    now: datetime) -> None:
    session.add(WarmPlanRecord(run_id=run_id, created_at=to_utc(now), params_json=dict(params), plan_json=list(plan)))
    session.flush()


def get_warm_plan(session: Session, run_id: str) -> WarmPlanRecord | None:
    return session.get(WarmPlanRecord, run_id)
