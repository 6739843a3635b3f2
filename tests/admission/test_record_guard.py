"""An admission's writes are guarded by the caller (the probe runner: a probe cancelled while it ran
records nothing, docs/serve.md ``DELETE /v1/probes/{id}``): ``before_record`` is asked first in the
recording transaction, and when it says no, the probes' evidence, the booking and the certificate are
all left unwritten; ``after_record`` runs last in that same transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from canary.admission import admit_async, load_request
from canary.admission.flow import RecordingCancelled
from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.slow

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
TABLES = ("evidence", "certificates", "reservations")


def _counts(tmp_path: Path) -> dict[str, int]:
    with sqlite3.connect(tmp_path / "evidence.sqlite3") as conn:
        return {t: int(conn.execute(f"select count(*) from {t}").fetchone()[0]) for t in TABLES}


@pytest.mark.anyio
async def test_before_record_refusing_writes_nothing(tmp_path: Path) -> None:
    asked: list[Any] = []

    def refuse(session: Any) -> bool:
        asked.append(session)
        return False

    with pytest.raises(RecordingCancelled):
        await admit_async(load_request(SNAP, EMB), db_url=f"sqlite:///{tmp_path / 'evidence.sqlite3'}",
                          before_record=refuse, after_record=lambda s, c: pytest.fail("recorded after a refusal"))
    assert len(asked) == 1  # the probe ran, then the guard was asked once, in the recording transaction
    assert _counts(tmp_path) == dict.fromkeys(TABLES, 0)


@pytest.mark.anyio
async def test_after_record_runs_in_the_recording_transaction(tmp_path: Path) -> None:
    seen: list[tuple[int, str]] = []

    def after(session: Any, cert: Any) -> None:
        from sqlalchemy import func, select

        from evidence_store.models import Evidence

        seen.append((int(session.scalar(select(func.count()).select_from(Evidence))), cert.verdict))

    cert = await admit_async(load_request(SNAP, EMB), db_url=f"sqlite:///{tmp_path / 'evidence.sqlite3'}",
                             before_record=lambda s: True, after_record=after)
    assert cert.verdict == "admit" and seen == [(1, "admit")]  # the probe's evidence, not yet committed, is seen
    assert _counts(tmp_path) == {"evidence": 1, "certificates": 1, "reservations": 1}
