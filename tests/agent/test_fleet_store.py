"""The agents' store functions on both backends: publishing and driver-change detection, which probes a
server may claim, orphaned queued probes, hot-pair ranking, revalidation within its budget."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from canary.admission.request import QueuedRequest
from canary.agent.agent import revalidate
from canary.policy import load_policy
from evidence_store import admission_log, drift, published
from evidence_store.database import make_engine, session_scope
from evidence_store.service import probe_queue

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
SNAP = {"device_type": "h100-sxm", "driver_version": "580.95.05", "uuid": None}


@pytest.fixture
def engine(store_url: str) -> Any:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


def _publish(session: Any, node: str = "n1", *, driver: str | None = "580.95.05", uuid: str | None = None,
             at: dt.datetime = T0, draining: bool | None = None) -> published.PublishResult:
    return published.publish(session, node=node, name="gpu0", agent=f"agent/{node}", snapshot_json={**SNAP, "uuid": uuid},
                         device_type="h100-sxm", driver_version=driver, device_uuid=uuid, taken_at=at, now=at, claim_s=30,
                         draining=draining)


def test_publish_detects_driver_changes_and_keeps_drain(engine: Any) -> None:
    with session_scope(engine) as s:
        first = _publish(s)
        assert not first.driver_changed and first.published.device_id == "snapshot:agent:n1/gpu0"
        assert not _publish(s, at=T0 + dt.timedelta(seconds=5)).driver_changed
        published.set_draining(s, node="n1", draining=True)
        changed = _publish(s, driver="590.10.01", at=T0 + dt.timedelta(seconds=10))
        assert changed.driver_changed and changed.previous_driver == "580.95.05"
        assert changed.published.draining  # a heartbeat does not undo `canary agent drain`
        assert changed.published.age_s(T0 + dt.timedelta(seconds=70)) == pytest.approx(60)
        # the device behind the name changed (a new UUID): one row for the name, under the new id
        swapped = _publish(s, uuid="GPU-new", driver="590.10.01", at=T0 + dt.timedelta(seconds=15))
        assert not swapped.driver_changed
        assert [p.device_id for p in published.list_published(s)] == ["GPU-new"]


@pytest.mark.parametrize("name", ["", "a/b", "a b"], ids=["empty", "slash", "space"])
def test_agent_ref_refuses_bad_names(name: str) -> None:
    from canary.errors import InputError

    with pytest.raises(InputError):
        published.agent_ref(name, "gpu0")


def test_servers_never_claim_agent_probes(engine: Any) -> None:
    with session_scope(engine) as s:
        agent_dev = _publish(s).published.device_id
        on_agent, _ = probe_queue.submit(s, digest="a" * 64, device_id=agent_dev, request_json={}, now=T0)
        on_server, _ = probe_queue.submit(s, digest="b" * 64, device_id="sim:h100-sxm", request_json={},
                                          now=T0 + dt.timedelta(seconds=1))
    with session_scope(engine) as s:
        server = probe_queue.claim_next(s, owner="server", lease_s=5, now=T0, exclude=published.agent_device_ids(s))
        assert server is not None and server.id == on_server.id
        assert probe_queue.claim_next(s, owner="server", lease_s=5, now=T0, exclude=published.agent_device_ids(s)) is None
        agent = probe_queue.claim_next(s, owner="agent/n1", lease_s=5, now=T0, devices=[agent_dev])
        assert agent is not None and agent.id == on_agent.id


@pytest.mark.parametrize(("published_age_s", "draining", "aborted"), [
    pytest.param(10, False, False, id="fresh"),
    pytest.param(120, False, True, id="silent-agent"),
    pytest.param(10, True, True, id="draining"),
])
def test_queued_probes_of_absent_agents_are_aborted(engine: Any, published_age_s: float, draining: bool,
                                                    aborted: bool) -> None:
    now = T0 + dt.timedelta(seconds=published_age_s)
    with session_scope(engine) as s:
        dev = _publish(s, draining=draining).published.device_id
        ticket, _ = probe_queue.submit(s, digest="c" * 64, device_id=dev, request_json={}, now=T0)
    with session_scope(engine) as s:
        out = probe_queue.abort_orphaned_queued(s, now=now, max_age_s=60)
        row = probe_queue.get(s, ticket.id)
    assert row is not None
    assert [t.id for t in out] == ([ticket.id] if aborted else [])
    assert row.state == ("aborted" if aborted else "queued")
    if aborted:
        assert ("draining" if draining else "has not published for 120 s") in (row.error or "")


def _log(s: Any, digest: str, at: dt.datetime, device_type: str = "h100-sxm") -> None:
    admission_log.log_admission(s, pair_digest=digest, key_digests=[digest], device_type=device_type, device_id="d",
                        label=digest, verdict="admit", request_json={"device": {"ref": "x"}, "n": at.isoformat()},
                        now=at)


def test_hot_pairs_rank_by_count_then_recency(engine: Any) -> None:
    with session_scope(engine) as s:
        for i in range(3):
            _log(s, "p-three", T0 + dt.timedelta(minutes=i))
        _log(s, "p-two-old", T0 + dt.timedelta(minutes=1))
        _log(s, "p-two-old", T0 + dt.timedelta(minutes=2))
        _log(s, "p-two-new", T0 + dt.timedelta(minutes=3))
        _log(s, "p-two-new", T0 + dt.timedelta(minutes=4))
        _log(s, "p-before", T0 - dt.timedelta(days=2))
        _log(s, "p-other-type", T0, device_type="a100-sxm4-80gb")
    with session_scope(engine, read_only=True) as s:
        hot = admission_log.hot_pairs(s, since=T0 - dt.timedelta(hours=1), device_type="h100-sxm")
        assert [(h.pair_digest, h.requests) for h in hot] == [("p-three", 3), ("p-two-new", 2), ("p-two-old", 2)]
        assert hot[0].request_json["n"] == (T0 + dt.timedelta(minutes=2)).isoformat()  # the newest request
        assert [h.pair_digest for h in admission_log.hot_pairs(s, since=T0 - dt.timedelta(hours=1), limit=1)] == ["p-three"]


def _logged(seed: int = 0) -> dict[str, Any]:
    """A history row's request as the service stored it before ``QueuedRequest`` (no ``reserve``)."""
    from canary.profile import load_profile
    from tests.support.paths import ROOT

    candidate = load_profile(ROOT / "examples" / "profiles" / "embedding-service.yaml").model_dump(mode="json")
    return {"device": {"kind": "published", "ref": "x", "snapshot": dict(SNAP)}, "candidate": candidate,
            "residents": [], "regime": None, "policy": "default", "seed": seed}


@pytest.mark.parametrize("budget", [0, 1, 5], ids=["none", "one", "more-than-history"])
def test_revalidation_stays_within_its_budget(engine: Any, budget: int, tmp_path: Any) -> None:
    base = load_policy("default")
    policy = base.model_copy(update={"revalidation_budget_pairs": budget})
    with session_scope(engine) as s:
        for i, digest in enumerate(["d1" * 32, "d2" * 32, "d3" * 32]):
            for _ in range(3 - i):
                admission_log.log_admission(s, pair_digest=digest, key_digests=[digest], device_type="h100-sxm",
                                    device_id="x", label=digest[:4], verdict="admit", now=T0,
                                    request_json=_logged(seed=i))
        _publish(s)
        pub = _publish(s, driver="590.10.01", at=T0 + dt.timedelta(seconds=5))
        assert pub.driver_changed
        out = revalidate(s, pub.published, old_driver="580.95.05", policy=policy, now=T0 + dt.timedelta(seconds=5),
                         history_since=T0 - dt.timedelta(days=7))
    assert len(out.probes) == min(budget, 3)
    assert [p["pair_digest"] for p in out.probes] == ["d1" * 32, "d2" * 32, "d3" * 32][:budget]
    with session_scope(engine, read_only=True) as s:
        event = drift.get_drift(s, out.event_id)
        assert event is not None and event.budget == budget and len(event.probes_json) == len(out.probes)
        for p in out.probes:
            row = probe_queue.get(s, p["probe_id"])
            assert row is not None and row.device_id == pub.published.device_id and row.state == "queued"
            queued = QueuedRequest.read(row.request_json)
            assert queued.device.snapshot.driver_version == "590.10.01" and queued.device.ref == pub.published.ref
            assert queued.reserve is False and queued.seed == ["d1" * 32, "d2" * 32, "d3" * 32].index(p["pair_digest"])


def test_a_history_row_that_cannot_be_read_is_skipped_not_fatal(engine: Any) -> None:
    """A driver change revalidates the rows it can read; one it cannot (its documents no longer valid)
    is left out with a warning, instead of failing the heartbeat's transaction."""
    with session_scope(engine) as s:
        admission_log.log_admission(s, pair_digest="e1" * 32, key_digests=["e1" * 32], device_type="h100-sxm",
                            device_id="x", label="bad", verdict="admit", now=T0,
                            request_json={**_logged(), "candidate": {"name": "no-memory"}})
        admission_log.log_admission(s, pair_digest="e2" * 32, key_digests=["e2" * 32], device_type="h100-sxm",
                            device_id="x", label="good", verdict="admit", now=T0, request_json=_logged())
        _publish(s)
        pub = _publish(s, driver="590.10.01", at=T0 + dt.timedelta(seconds=5))
        out = revalidate(s, pub.published, old_driver="580.95.05", policy=load_policy("default"),
                         now=T0 + dt.timedelta(seconds=5), history_since=T0 - dt.timedelta(days=7))
    assert [p["label"] for p in out.probes] == ["good"]


def _claim(session: Any, agent: str, at: dt.datetime, *, uuid: str | None = "GPU-claimed", name: str = "gpu0",
           claim_s: float = 30) -> published.PublishResult:
    return published.publish(session, node="n1", name=name, agent=agent, snapshot_json={**SNAP, "uuid": uuid},
                         device_type="h100-sxm", driver_version="580.95.05", device_uuid=uuid, taken_at=at, now=at,
                         claim_s=claim_s)


@pytest.mark.parametrize(("second", "uuid", "at_s", "refused"), [
    pytest.param("agent/a", "GPU-claimed", 20, False, id="same-agent-renews"),
    pytest.param("agent/b", "GPU-claimed", 20, True, id="other-agent-while-live"),
    pytest.param("agent/b", "GPU-other", 20, True, id="other-agent-other-uuid-same-name"),
    pytest.param("agent/b", "GPU-claimed", 31, False, id="other-agent-after-lapse"),
])
def test_one_live_agent_per_device(engine: Any, second: str, uuid: str, at_s: float, refused: bool) -> None:
    with session_scope(engine) as s:
        _claim(s, "agent/a", T0)
    at = T0 + dt.timedelta(seconds=at_s)
    with session_scope(engine) as s:
        conflicts = published.claim_conflicts(s, node="n1", names=["gpu0", "gpu1"], agent=second, now=at)
    assert list(conflicts) == (["agent:n1/gpu0"] if refused else [])
    if refused:
        assert "agent agent/a (last heartbeat 20 s ago, claim expires in 10 s" in conflicts["agent:n1/gpu0"]
        with pytest.raises(published.DeviceClaimed, match="agent:n1/gpu0 is held by agent agent/a"), \
                session_scope(engine) as s:
            _claim(s, second, at, uuid=uuid)
    else:
        with session_scope(engine) as s:
            _claim(s, second, at, uuid=uuid)
    with session_scope(engine, read_only=True) as s:
        [row] = published.list_published(s)
    assert row.agent == ("agent/a" if refused else second)
    assert row.claim_expires_at == (T0 if refused else at) + dt.timedelta(seconds=30)


def test_the_same_gpu_under_another_name_is_refused_while_claimed(engine: Any) -> None:
    with session_scope(engine) as s:
        _claim(s, "agent/a", T0)
    with pytest.raises(published.DeviceClaimed, match=r"device GPU-claimed, published as agent:n1/gpu0"), \
            session_scope(engine) as s:
        _claim(s, "agent/b", T0 + dt.timedelta(seconds=1), name="gpu7")
    with session_scope(engine) as s:  # its own agent renaming it is fine: one row, under the new name
        _claim(s, "agent/a", T0 + dt.timedelta(seconds=2), name="gpu7")
        assert [p.ref for p in published.list_published(s)] == ["agent:n1/gpu7"]


def test_a_stopped_agent_releases_its_claims(engine: Any) -> None:
    with session_scope(engine) as s:
        _claim(s, "agent/a", T0)
        _claim(s, "agent/other", T0, uuid="GPU-other", name="gpu1")
    with session_scope(engine) as s:
        assert published.release_claims(s, agent="agent/a", now=T0 + dt.timedelta(seconds=2)) == 1
    later = T0 + dt.timedelta(seconds=3)
    with session_scope(engine) as s:
        assert list(published.claim_conflicts(s, node="n1", names=["gpu0", "gpu1"], agent="agent/b", now=later)) == [
            "agent:n1/gpu1"]
        assert _claim(s, "agent/b", later).published.agent == "agent/b"


def test_claim_needs_a_positive_duration(engine: Any) -> None:
    from canary.errors import InputError

    with pytest.raises(InputError, match="claim_s"), session_scope(engine) as s:
        _claim(s, "agent/a", T0, claim_s=0)


def test_prune_admission_log_deletes_only_what_is_older_in_batches(engine: Any, monkeypatch: Any) -> None:
    from canary.jobs.history import prune_admission_log
    from evidence_store.fleet_models import AdmissionLog

    monkeypatch.setattr(admission_log, "PRUNE_BATCH", 3)  # several batches, each its own transaction
    calls: list[int] = []
    real = admission_log.prune_admission_log
    monkeypatch.setattr(admission_log, "prune_admission_log", lambda s, **kw: calls.append(real(s, **kw)) or calls[-1])
    with session_scope(engine) as s:
        for i in range(8):
            _log(s, f"old-{i}", T0 - dt.timedelta(days=40, minutes=i))
        _log(s, "edge", T0 - dt.timedelta(days=30))  # exactly at the cut: kept (older than, not as old as)
        _log(s, "new", T0 - dt.timedelta(days=1))
    cut = T0 - dt.timedelta(days=30)
    dry = prune_admission_log(engine, before=cut, dry_run=True)
    assert dry.deleted == 8 and dry.remaining_oldest == T0 - dt.timedelta(days=40, minutes=7)
    report = prune_admission_log(engine, before=cut)
    assert report.deleted == 8 and report.remaining_oldest == cut
    assert calls == [3, 3, 2]
    with session_scope(engine, read_only=True) as s:
        from sqlalchemy import select

        assert sorted(s.scalars(select(AdmissionLog.pair_digest))) == ["edge", "new"]
    assert prune_admission_log(engine, before=cut).deleted == 0


def test_an_unreadable_device_keeps_its_claim_and_goes_stale(engine: Any) -> None:
    with session_scope(engine) as s:
        _claim(s, "agent/a", T0)
    later = T0 + dt.timedelta(seconds=25)
    with session_scope(engine) as s:
        assert published.renew_claim(s, node="n1", name="gpu0", agent="agent/a", now=later, claim_s=30)
        assert not published.renew_claim(s, node="n1", name="gpu9", agent="agent/a", now=later, claim_s=30)
    with session_scope(engine, read_only=True) as s:
        [row] = published.list_published(s)
    assert row.claim_expires_at == later + dt.timedelta(seconds=30) and row.published_at == T0  # not refreshed
    with pytest.raises(published.DeviceClaimed, match="held by agent agent/a"), session_scope(engine) as s:
        published.renew_claim(s, node="n1", name="gpu0", agent="agent/b", now=later, claim_s=30)


def test_a_window_of_admissions_is_one_row_per_pair_device_verdict_and_label(engine: Any) -> None:
    """The history writer's batch: admissions of one pair, device, verdict and label become one row that
    counts them, with the newest one's time and request; the ranking counts admissions, not rows."""
    from sqlalchemy import select

    from evidence_store.fleet_models import AdmissionLog

    def entry(n: int, pair: str, verdict: str = "admit", device: str = "x", second: int | None = None) -> dict[str, Any]:
        return {"pair_digest": pair, "key_digests": [f"k-{pair}"], "device_type": "h100-sxm", "device_id": device,
                "label": pair, "verdict": verdict, "request_json": {"device": {"ref": device}, "n": n},
                "now": T0 + dt.timedelta(seconds=n if second is None else second)}

    batch = [entry(0, "p-a"), entry(1, "p-b"), entry(2, "p-a"), entry(3, "p-a", verdict="reject"),
             entry(4, "p-a", device="y"), entry(5, "p-a", second=2),  # same time as n=2: the later one is newest
             entry(6, "p-b", second=0)]  # older than p-b's n=1: not the newest
    with session_scope(engine) as s:
        admission_log.log_admissions(s, batch)
    with session_scope(engine, read_only=True) as s:
        rows = {(r.pair_digest, r.device_id, r.verdict): (r.requests, r.request_json["n"], r.at)
                for r in s.scalars(select(AdmissionLog))}
        assert rows == {
            ("p-a", "x", "admit"): (3, 5, T0 + dt.timedelta(seconds=2)),
            ("p-a", "x", "reject"): (1, 3, T0 + dt.timedelta(seconds=3)),
            ("p-a", "y", "admit"): (1, 4, T0 + dt.timedelta(seconds=4)),
            ("p-b", "x", "admit"): (2, 1, T0 + dt.timedelta(seconds=1)),
        }
        hot = admission_log.hot_pairs(s, since=T0 - dt.timedelta(hours=1))
        assert [(h.pair_digest, h.requests, h.request_json["n"]) for h in hot] == [("p-a", 5, 4), ("p-b", 2, 1)]
    with session_scope(engine) as s:  # a later window adds rows; counts add up across them
        admission_log.log_admissions(s, [entry(9, "p-b"), entry(10, "p-b")])
    with session_scope(engine, read_only=True) as s:
        hot = admission_log.hot_pairs(s, since=T0 - dt.timedelta(hours=1))
        assert [(h.pair_digest, h.requests, h.request_json["n"]) for h in hot] == [("p-a", 5, 4), ("p-b", 4, 10)]
