"""Shared test data for the evidence store tests (a uniquely named module, importable from the tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from canary._model import PairKey
from evidence_store.database import RetryPolicy
from evidence_store.schemas import EvidenceIn

FAST_RETRY = RetryPolicy(attempts=3, initial_wait_s=0.01, max_wait_s=0.02)
T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


KEY = PairKey(
    resident_version="llama-serve:1.4.2",
    resident_shape_family="bs<=32,seq<=4096",
    candidate_version="sha256:9f2c",
    candidate_shape_family="bs<=8",
    device_type="h100-sxm",
    regime="mps:50",
)


def evidence(
    probe_id: str,
    *,
    key: PairKey = KEY,
    outcome: str = "safe",
    source: str = "canary",
    driver_version: str | None = "550.54.15",
    created_at: datetime = T0,
    ttl: timedelta = timedelta(days=7),
    confidence: float | None = 0.95,
    slowdown: float | None = 4.0,
    interval: tuple[float, float] | None = (2.0, 6.0),
    samples: int = 200,
) -> EvidenceIn:
    return EvidenceIn.model_validate(
        {
            "probe_id": probe_id,
            "key": key,
            "driver_version": driver_version,
            "cuda_version": "12.4",
            "device_uuid": "GPU-1b2c3d4e",
            "source": source,
            "outcome": outcome,
            "resident_slowdown_pct": slowdown,
            "resident_slowdown_low_pct": interval[0] if interval else None,
            "resident_slowdown_high_pct": interval[1] if interval else None,
            "candidate_slowdown_pct": None,
            "samples": samples,
            "exposure_used": 120,
            "time_used_s": 42.5,
            "confidence": confidence,
            "created_at": created_at,
            "expires_at": created_at + ttl,
        }
    )
