"""What the cached-admission path keeps between requests, and what it must read every time.

Kept: validated documents by the digest of their exact content, a pair key's digest, registry entries
by exact reference (immutable). Read on every request: evidence (freshness, revocation). The
history writer batches rows; idle pooled connections are pinged before use."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import event, func, select, text

from canary._model import PairKey
from canary.errors import InputError
from canary.profile import WorkloadProfile
from canary.serve import resolve as R
from canary.serve.history import AdmissionHistory
from canary.snapshot import DeviceSnapshot
from evidence_store import admission_log
from evidence_store.database import PING_AFTER_IDLE_S, make_engine, session_scope
from evidence_store.fleet_models import AdmissionLog
from evidence_store.lookup import key_digest
from evidence_store.migrate import upgrade
from tests.evidence_store.conftest import PgServer, _need_pg
from tests.serve.conftest import Api, profile_doc, snapshot_doc


def _probe_to_end(c: Any, location: str) -> dict[str, Any]:
    for _ in range(20):
        status: dict[str, Any] = c.get(location, params={"wait": "30s"}).json()
        if status["state"] not in ("queued", "running"):
            return status
    raise AssertionError(f"probe {location} still not final: {status}")


# ------------------------------------------------------------------ validated documents


def test_the_same_document_is_validated_once_a_changed_one_anew() -> None:
    doc = profile_doc(version=f"cache-{uuid.uuid4().hex[:8]}")
    first, digest = R.validated(WorkloadProfile, doc, file="candidate")
    again, digest_again = R.validated(WorkloadProfile, dict(doc), file="candidate")  # equal content, new dict
    assert again is first and digest_again == digest

    bigger = doc | {"memory": doc["memory"] | {"peak_bytes": doc["memory"]["peak_bytes"] + 1}}
    changed, changed_digest = R.validated(WorkloadProfile, bigger, file="candidate")
    assert changed is not first and changed_digest != digest
    assert changed.memory.peak_bytes == first.memory.peak_bytes + 1


def test_an_invalid_document_fails_every_time_with_its_own_error() -> None:
    bad = profile_doc(version=f"bad-{uuid.uuid4().hex[:8]}") | {"unknown_field": 1}
    for _ in range(2):
        with pytest.raises(InputError) as err:
            R.validated(WorkloadProfile, bad, file="candidate")
        assert "unknown_field" in str(err.value) and "candidate" in str(err.value)
    deep: Any = 1.0
    for _ in range(40):  # deeper than MAX_DOCUMENT_DEPTH: refused by the limits, never kept
        deep = [deep]
    for _ in range(2):
        with pytest.raises(InputError, match="nested deeper"):
            R.validated(DeviceSnapshot, snapshot_doc() | {"residents": deep}, file="device")


def test_the_cache_holds_at_most_its_size() -> None:
    base = profile_doc()
    for i in range(R.DOCUMENT_CACHE_SIZE + 5):
        R.validated(WorkloadProfile, base | {"version": f"size-{i}"}, file="candidate")
    assert len(R._documents) <= R.DOCUMENT_CACHE_SIZE


def test_an_inline_snapshot_ref_follows_its_content() -> None:
    snap = snapshot_doc()
    a = R._device(snap, lambda *_: None)
    b = R._device(dict(snap), lambda *_: None)
    c = R._device(snap | {"uuid": f"GPU-{uuid.uuid4()}"}, lambda *_: None)
    assert a.ref == b.ref and a.ref.startswith("inline:")
    assert c.ref != a.ref


def test_a_key_digest_is_the_keys_own() -> None:
    key = PairKey("r@1", "fam", "c@1", "fam2", "h100-sxm", "mps")
    assert key_digest(key) == key.digest()
    other = PairKey("r@1", "fam", "c@2", "fam2", "h100-sxm", "mps")
    assert key_digest(other) == other.digest() != key_digest(key)


# ------------------------------------------------------------------ through the service: read every time


def test_a_revoked_evidence_is_seen_by_the_next_cached_admission(api: Api) -> None:
    """A cached answer, then the evidence behind it is revoked: the very next request (same documents, so
    every kept document is reused) no longer answers from it."""
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=f"rv-{uuid.uuid4().hex[:8]}"), "reserve": False}
    with api.client("admin") as c:
        status = _probe_to_end(c, c.post("/v1/admissions", json=body).headers["location"])
        assert status["state"] == "done", status
        cached = c.post("/v1/admissions", json=body)
        assert cached.status_code == 200 and cached.json()["decided_by"] == "cache", cached.text
        for evidence_id in cached.json()["evidence"]["ids"]:
            assert c.post(f"/v1/evidence/{evidence_id}/revoke", json={"reason": "test"}).status_code == 200
        after = c.post("/v1/admissions", json=body)
    assert after.status_code == 202, after.text  # no current evidence: a probe, not the cached answer


def test_a_changed_document_is_decided_on_its_new_content(api: Api) -> None:
    version = f"chg-{uuid.uuid4().hex[:8]}"
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=version), "reserve": False, "probe": False}
    huge = profile_doc(version=version)
    huge["memory"] = huge["memory"] | {"reserved_bytes": 400 * 2**30, "peak_bytes": 400 * 2**30}
    with api.client("admin") as c:
        first = c.post("/v1/admissions", json=body).json()
        second = c.post("/v1/admissions", json=body | {"candidate": huge}).json()
    assert first["verdict"] != "reject", first  # it fits; only the changed memory does not
    assert second["verdict"] == "reject" and second["decided_by"] == "hard-fit", second


# ------------------------------------------------------------------ history writer


def _sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'h.sqlite3'}"
    upgrade(url)
    return url


def _entry(i: int) -> dict[str, Any]:
    import datetime as dt

    return {"pair_digest": f"p{i}", "key_digests": [f"k{i}"], "device_type": "h100-sxm", "device_id": "d",
            "label": f"row {i}", "verdict": "admit", "request_json": {"i": i}, "now": dt.datetime.now(dt.UTC)}


def test_rows_answered_within_the_window_share_one_insert_and_commit(tmp_path: Path) -> None:
    engine = make_engine(_sqlite(tmp_path))
    inserts: list[int] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _count(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO ADMISSION_LOG"):
            inserts.append(len(params) if executemany else 1)

    def db(_operation: str, fn: Any, **_: Any) -> Any:
        with session_scope(engine) as session:
            return fn(session)

    history = AdmissionHistory(db, window_s=3600.0)  # the test ends the window itself

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(history.serve)
            history.add(_entry(0))
            for _ in range(5):
                await anyio.sleep(0)  # the writer wakes and waits out its window
            for i in range(1, 6):
                history.add(_entry(i))
            history.add(None)  # nothing to record: not a row
            await anyio.sleep(0.05)
            assert history.written == 0  # still inside the window
            tg.cancel_scope.cancel()
        await history.flush()  # what a shutdown does: every waiting row is written

    try:
        anyio.run(main)
        assert history.written == 6 and history.transactions == 1 and history.dropped == 0
        assert inserts == [6]  # one multi-row INSERT
        with session_scope(engine, read_only=True) as s:
            assert sorted(s.scalars(select(AdmissionLog.pair_digest))) == [f"p{i}" for i in range(6)]
            assert s.scalar(select(func.count()).select_from(AdmissionLog)) == 6
    finally:
        engine.dispose()


def test_log_admission_still_writes_one_row(tmp_path: Path) -> None:
    engine = make_engine(_sqlite(tmp_path))
    try:
        with session_scope(engine) as s:
            e = _entry(7)
            admission_log.log_admission(s, **e)
            row = s.scalars(select(AdmissionLog)).one()  # visible in the same transaction
        assert row.pair_digest == "p7" and row.key_digests == ["k7"] and row.request_json == {"i": 7}
        with session_scope(engine) as s:
            admission_log.log_admissions(s, [])  # nothing: no statement
            assert s.scalar(select(func.count()).select_from(AdmissionLog)) == 1
    finally:
        engine.dispose()


# ------------------------------------------------------------------ pooled connections


def test_an_idle_connection_killed_by_the_server_is_replaced(pg_server: PgServer | None) -> None:
    """PostgreSQL ends every connection of the store (a restart, an idle timeout): after sitting in the
    pool longer than PING_AFTER_IDLE_S, the next read gets a working connection, not an error."""
    url = _need_pg(pg_server).create()
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        import psycopg

        with psycopg.connect(url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        time.sleep(PING_AFTER_IDLE_S + 0.2)
        with engine.connect() as conn:
            again = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert again != pid  # the dead connection was discarded and a new one made
    finally:
        engine.dispose()
