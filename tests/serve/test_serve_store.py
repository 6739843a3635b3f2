"""The store side of the service: the probe queue (single flight, device exclusivity, leases), the
registry and the tokens, on SQLite and PostgreSQL, including racing processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from canary._model import PairKey
from canary.errors import InputError
from evidence_store.database import make_engine, session_scope
from evidence_store.errors import LeaseLost
from evidence_store.service import probe_queue, registry, tokens
from evidence_store.service.models import ServeProbe

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _key(i: int) -> PairKey:
    return PairKey(resident_version="r:1", resident_shape_family="bs<=8", candidate_version=f"c:{i}",
                   candidate_shape_family="bs<=8", device_type="h100-sxm", regime="mps:30")


def _submit(engine, i: int, device: str, now: datetime = T0):  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return probe_queue.submit(s, digest=probe_queue.pair_digest([_key(i)]), device_id=device,
                                  request_json={"pair": i}, now=now)


def test_same_pair_joins_one_probe(store_url: str) -> None:
    engine = make_engine(store_url)
    first, joined1 = _submit(engine, 1, "gpu-a")
    second, joined2 = _submit(engine, 1, "gpu-b")
    assert (joined1, joined2) == (False, True)
    assert second.id == first.id and second.waiters == 2


def test_pair_digest_ignores_order_and_needs_keys() -> None:
    assert probe_queue.pair_digest([_key(1), _key(2)]) == probe_queue.pair_digest([_key(2), _key(1)])
    with pytest.raises(InputError):
        probe_queue.pair_digest([])


def test_one_running_probe_per_device_and_leases(store_url: str) -> None:
    engine = make_engine(store_url)
    a, _ = _submit(engine, 1, "gpu-a")
    b, _ = _submit(engine, 2, "gpu-a", T0 + timedelta(seconds=1))
    c, _ = _submit(engine, 3, "gpu-b", T0 + timedelta(seconds=2))
    with session_scope(engine) as s:
        got1 = probe_queue.claim_next(s, owner="w1", lease_s=10, now=T0)
    with session_scope(engine) as s:
        got2 = probe_queue.claim_next(s, owner="w2", lease_s=10, now=T0)
    with session_scope(engine) as s:
        got3 = probe_queue.claim_next(s, owner="w3", lease_s=10, now=T0)
    assert got1 is not None and got1.id == a.id
    assert got2 is not None and got2.id == c.id  # b waits: gpu-a is busy
    assert got3 is None
    with session_scope(engine) as s, pytest.raises(LeaseLost):
        probe_queue.heartbeat(s, a.id, owner="w2", lease_s=10, now=T0)
    with session_scope(engine) as s:
        assert probe_queue.cancel(s, a.id, now=T0).cancel_requested is True  # type: ignore[union-attr]
    with session_scope(engine) as s:
        assert probe_queue.heartbeat(s, a.id, owner="w1", lease_s=10, now=T0) is True
    with session_scope(engine) as s:
        done = probe_queue.finish(s, a.id, owner="w1", state="cancelled", now=T0, error="cancelled")
    assert done.terminal
    with session_scope(engine) as s:
        got4 = probe_queue.claim_next(s, owner="w3", lease_s=10, now=T0)
    assert got4 is not None and got4.id == b.id  # gpu-a is free again
    # w2's lease on c expires: recovery aborts it and frees gpu-b and the pair.
    with session_scope(engine) as s:
        aborted = probe_queue.recover_abandoned(s, now=T0 + timedelta(seconds=11))
    assert {t.id for t in aborted} == {c.id, b.id}
    with session_scope(engine) as s, pytest.raises(LeaseLost):
        probe_queue.finish(s, c.id, owner="w2", state="done", now=T0)
    again, joined = _submit(engine, 3, "gpu-b", T0 + timedelta(seconds=12))
    assert not joined and again.id != c.id


def test_the_poller_peeks_before_it_claims(store_url: str) -> None:
    """``any_queued`` answers whether ``claim_next`` could find work: only queued probes count."""
    engine = make_engine(store_url)
    with session_scope(engine, read_only=True) as s:
        assert not probe_queue.any_queued(s)
    a, _ = _submit(engine, 1, "gpu-a")
    with session_scope(engine, read_only=True) as s:
        assert probe_queue.any_queued(s)
    with session_scope(engine) as s:
        assert probe_queue.claim_next(s, owner="w1", lease_s=10, now=T0) is not None
    with session_scope(engine, read_only=True) as s:
        assert not probe_queue.any_queued(s)  # running is not waiting
    with session_scope(engine) as s:
        probe_queue.finish(s, a.id, owner="w1", state="done", now=T0)
    with session_scope(engine, read_only=True) as s:
        assert not probe_queue.any_queued(s)


def test_cancelling_a_queued_probe_frees_its_pair(store_url: str) -> None:
    engine = make_engine(store_url)
    a, _ = _submit(engine, 7, "gpu-a")
    with session_scope(engine) as s:
        assert probe_queue.cancel(s, a.id, now=T0).state == "cancelled"  # type: ignore[union-attr]
        assert probe_queue.cancel(s, "missing", now=T0) is None
    b, joined = _submit(engine, 7, "gpu-a")
    assert not joined and b.id != a.id


def _run_to_end(engine, ticket, state: str, at: datetime) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        got = probe_queue.claim_next(s, owner="w", lease_s=30, now=at)
        assert got is not None and got.id == ticket.id
    with session_scope(engine) as s:
        probe_queue.finish(s, ticket.id, owner="w", state=state, now=at + timedelta(seconds=1),
                           certificate_json={"verdict": "admit"} if state == "done" else None)


def _submit_since(engine, i: int, since: datetime | None):  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return probe_queue.submit(s, digest=probe_queue.pair_digest([_key(i)]), device_id="gpu-a",
                                  request_json={"pair": i}, now=T0 + timedelta(seconds=5), since=since)


def test_a_probe_done_after_the_callers_look_is_joined_not_run_again(store_url: str) -> None:
    """The caller looked the evidence up at ``since``; the pair's probe ended ``done`` after that (its
    evidence was not there yet when the caller looked): the caller joins that finished probe."""
    engine = make_engine(store_url)
    first, _ = _submit(engine, 11, "gpu-a")
    _run_to_end(engine, first, "done", T0 + timedelta(seconds=1))  # finished at T0 + 2 s
    joined, was_joined = _submit_since(engine, 11, since=T0 + timedelta(seconds=2))
    assert was_joined and joined.id == first.id and joined.state == "done" and joined.waiters == 2
    assert joined.certificate_json == {"verdict": "admit"}
    # Looked after it finished: its evidence was visible then, so a new probe is this caller's choice.
    later, was_joined = _submit_since(engine, 11, since=T0 + timedelta(seconds=3))
    assert not was_joined and later.id != first.id and later.state == "queued"


def test_only_a_done_probe_is_joined_after_it_ended(store_url: str) -> None:
    """A failed or cancelled probe recorded no evidence: the caller queues a new one. Without ``since``
    (a revalidation that just marked evidence stale) a done probe is never joined."""
    engine = make_engine(store_url)
    failed, _ = _submit(engine, 12, "gpu-a")
    _run_to_end(engine, failed, "failed", T0 + timedelta(seconds=1))
    again, was_joined = _submit_since(engine, 12, since=T0)
    assert not was_joined and again.id != failed.id
    done, _ = _submit(engine, 13, "gpu-b")
    with session_scope(engine) as s:
        assert probe_queue.claim_next(s, owner="w", lease_s=30, now=T0, devices=["gpu-b"]) is not None
        probe_queue.finish(s, done.id, owner="w", state="done", now=T0 + timedelta(seconds=1))
    fresh, was_joined = _submit_since(engine, 13, since=None)
    assert not was_joined and fresh.id != done.id


def test_a_probe_that_ends_between_the_look_and_the_insert_is_joined(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrow race: the pair's probe was queued, run and finished after this caller saw no live probe
    but before its insert. Once the caller's row holds the pair, the finished probe is visible; the
    caller's row is removed and it joins the finished one."""
    engine = make_engine(store_url)
    first, _ = _submit(engine, 14, "gpu-a")
    _run_to_end(engine, first, "done", T0 + timedelta(seconds=1))
    real = probe_queue._done_since
    calls: list[int] = []

    def blind_first_look(session, digest, since):  # type: ignore[no-untyped-def]
        calls.append(1)
        return None if len(calls) == 1 else real(session, digest, since)

    monkeypatch.setattr(probe_queue, "_done_since", blind_first_look)
    joined, was_joined = _submit_since(engine, 14, since=T0)
    assert len(calls) == 2 and was_joined and joined.id == first.id
    with session_scope(engine, read_only=True) as s:
        rows = s.scalars(select(ServeProbe).where(ServeProbe.pair_digest == joined.pair_digest)).all()
    assert [r.id for r in rows] == [first.id]  # the caller's own queued row is gone


RACER = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime
    from evidence_store.database import make_engine, session_scope
    from evidence_store.service import probe_queue
    engine = make_engine(sys.argv[1])
    with session_scope(engine) as s:
        ticket, joined = probe_queue.submit(s, digest="d" * 64, device_id="gpu-" + sys.argv[2],
                                            request_json={}, now=datetime.now(UTC))
    print(ticket.id)
""")


@pytest.mark.slow
def test_racing_processes_share_one_probe(store_url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", RACER, store_url, str(i)], stdout=subprocess.PIPE, text=True)
             for i in range(8)]
    ids = set()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        ids.add(out.strip())
    assert len(ids) == 1
    engine = make_engine(store_url)
    with session_scope(engine, read_only=True) as s:
        assert probe_queue.get(s, ids.pop()).waiters == 8  # type: ignore[union-attr]


def test_registry_is_immutable(store_url: str) -> None:
    engine = make_engine(store_url)
    with session_scope(engine) as s:
        e, created = registry.put(s, kind="profile", name="svc", version="1", document={"a": 1}, now=T0)
        assert created and e.ref == "svc@1"
        assert registry.put(s, kind="profile", name="svc", version="1", document={"a": 1}, now=T0)[1] is False
        registry.put(s, kind="profile", name="svc", version="2", document={"a": 2}, now=T0 + timedelta(1))
    with session_scope(engine) as s, pytest.raises(registry.RegistryConflict):
        registry.put(s, kind="profile", name="svc", version="1", document={"a": 3}, now=T0)
    with session_scope(engine, read_only=True) as s:
        assert registry.get(s, kind="profile", name="svc", version=None).version == "2"  # type: ignore[union-attr]
        assert registry.get(s, kind="snapshot", name="svc", version="1") is None
    with pytest.raises(InputError):
        registry.parse_ref("svc@", field="ref")


def test_tokens_are_hashed_scoped_and_revocable(store_url: str) -> None:
    engine = make_engine(store_url)
    with session_scope(engine) as s:
        secret, info = tokens.create(s, name="ci", scopes=["fit", "read"], now=T0, expires_at=T0 + timedelta(days=1))
        with pytest.raises(InputError):
            tokens.create(s, name="x", scopes=["root"], now=T0)
    from evidence_store.service.models import ApiToken

    with session_scope(engine, read_only=True) as s:
        row = s.get(ApiToken, info.id)
        assert row is not None and secret.split("_", 2)[2] not in (row.secret_hash, row.salt)
        assert tokens.verify(s, secret, now=T0).scopes == {"fit", "read"}  # type: ignore[union-attr]
        assert tokens.verify(s, secret[:-1] + ("A" if secret[-1] != "A" else "B"), now=T0) is None
        assert tokens.verify(s, secret, now=T0 + timedelta(days=2)) is None  # expired
        assert tokens.verify(s, "not-a-token", now=T0) is None
    with session_scope(engine) as s:
        tokens.revoke(s, info.id, now=T0)
    with session_scope(engine, read_only=True) as s:
        assert tokens.verify(s, secret, now=T0) is None
