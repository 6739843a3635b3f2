"""The store's half of a cancel that records nothing (docs/serve.md, ``DELETE /v1/probes/{id}``): a probe
whose cancel was requested is never closed ``done``, and the locked re-read in the recording transaction
(``may_record``) refuses to record once a cancel came — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from canary._model import PairKey
from evidence_store.database import make_engine, session_scope
from evidence_store.errors import LeaseLost
from evidence_store.service import probe_queue

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
KEY = PairKey(resident_version="r:1", resident_shape_family="bs<=8", candidate_version="c:1",
              candidate_shape_family="bs<=8", device_type="h100-sxm", regime="mps:30")


def _running(store_url: str):  # type: ignore[no-untyped-def]
    engine = make_engine(store_url)
    with session_scope(engine) as s:
        ticket, _ = probe_queue.submit(s, digest=probe_queue.pair_digest([KEY]), device_id="gpu-a",
                                       request_json={}, now=T0)
    with session_scope(engine) as s:
        assert probe_queue.claim_next(s, owner="w1", lease_s=10, now=T0) is not None
    return engine, ticket.id


@pytest.mark.parametrize("cancelled", [pytest.param(False, id="no-cancel"), pytest.param(True, id="cancelled")])
def test_finish_done_after_a_cancel_ends_cancelled(store_url: str, cancelled: bool) -> None:
    engine, probe_id = _running(store_url)
    if cancelled:
        with session_scope(engine) as s:
            probe_queue.cancel(s, probe_id, now=T0)
    with session_scope(engine) as s:
        assert probe_queue.cancel_requested(s, probe_id) is cancelled
        assert probe_queue.may_record(s, probe_id, owner="w1") is (not cancelled)
    with session_scope(engine) as s:
        final = probe_queue.finish(s, probe_id, owner="w1", state="done", now=T0,
                                   certificate_json={"verdict": "admit"})
    if cancelled:
        assert (final.state, final.certificate_json) == ("cancelled", None)
        assert final.error is not None and "nothing was recorded" in final.error
    else:
        assert final.state == "done" and final.certificate_json is not None


def test_may_record_refuses_a_probe_that_is_no_longer_ours(store_url: str) -> None:
    engine, probe_id = _running(store_url)
    with session_scope(engine) as s, pytest.raises(LeaseLost):
        probe_queue.may_record(s, probe_id, owner="w2")
