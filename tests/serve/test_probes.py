"""Probe coordination over real HTTP: one probe per pair key across server processes, never two probes on
one device, cancellation, and a server killed mid-probe. Assertions read what the store recorded."""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select

from evidence_store.database import make_engine, session_scope
from evidence_store.models import Evidence, ProbeJournal
from evidence_store.service.models import ServeProbe
from tests.serve.conftest import Server, make_token, profile_doc, snapshot_doc

pytestmark = pytest.mark.slow


def _rows(url: str, model: Any) -> list[Any]:
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            return list(session.scalars(select(model)).all())
    finally:
        engine.dispose()


async def _admit_and_wait(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(probe id or None, the certificate) for one admission, following a 202 to the end."""
    r = await client.post("/v1/admissions", json=body)
    if r.status_code == 200:
        return None, r.json()
    assert r.status_code == 202, r.text
    probe_id = r.json()["id"]
    for _ in range(40):
        status = (await client.get(r.headers["location"], params={"wait": "30s"})).json()
        if status["state"] not in ("queued", "running"):
            assert status["state"] == "done", status
            return probe_id, status["certificate"]
    raise AssertionError(f"probe {probe_id} never finished")


def test_storm_one_probe_per_pair_never_two_on_a_device(store_url: str, server_factory: Any) -> None:
    """200 concurrent admissions over 10 unseen pairs on 4 devices, served by 2 worker processes."""
    token = make_token(store_url, "admit")
    server = server_factory(store_url, "--workers", "2", "--sim-time-scale", "0.01")
    run = uuid.uuid4().hex[:6]
    candidates = [profile_doc(version=f"storm-{run}-{i}") for i in range(10)]
    devices = [snapshot_doc(uuid=f"GPU-storm-{run}-{d}") for d in range(4)]
    bodies = [{"device": devices[(j // 10) % 4], "candidate": candidates[j % 10], "reserve": False}
              for j in range(200)]
    answers: list[tuple[str | None, dict[str, Any]]] = [(None, {})] * len(bodies)

    async def storm() -> None:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=server.base, timeout=60.0, limits=limits,
                                     headers={"Authorization": f"Bearer {token}"}) as client:
            async def one(j: int) -> None:
                answers[j] = await _admit_and_wait(client, bodies[j])

            async with anyio.create_task_group() as tg:
                for j in range(len(bodies)):
                    tg.start_soon(one, j)

    anyio.run(storm)
    probes = [p for p in _rows(store_url, ServeProbe) if p.request_json["candidate"]["version"].startswith(f"storm-{run}")]
    assert len(probes) == 10 and all(p.state == "done" for p in probes)
    assert sorted(p.request_json["candidate"]["version"] for p in probes) == sorted(c["version"] for c in candidates)
    assert sum(p.waiters for p in probes) + sum(1 for pid, _ in answers if pid is None) == 200
    evidence = [e for e in _rows(store_url, Evidence) if e.candidate_version.startswith(f"storm-{run}")]
    assert len(evidence) == 10 and len({e.key_digest for e in evidence}) == 10
    assert len([j for j in _rows(store_url, ProbeJournal) if j.key_json["candidate_version"].startswith(
        f"storm-{run}")]) == 10
    # Never two probes on one device: the recorded running intervals of each device do not overlap.
    by_device: dict[str, list[tuple[datetime, datetime]]] = {}
    for p in probes:
        by_device.setdefault(p.device_id, []).append((p.started_at, p.finished_at))
    for spans in by_device.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"two probes overlapped on one device: {spans}"
    # Every request got its own pair's certificate, and the requests of one pair got the same decision.
    for body, (_, cert) in zip(bodies, answers, strict=True):
        assert cert["workload_version"] == body["candidate"]["version"]
        assert cert["verdict"] == "admit"
    probe_ids = {pid for pid, _ in answers if pid is not None}
    assert probe_ids <= {p.id for p in probes}


def _wait_running(client: httpx.Client, location: str) -> dict[str, Any]:
    for _ in range(600):
        status: dict[str, Any] = client.get(location, params={"wait": "100ms"}).json()
        if status["state"] != "queued":
            return status
    raise AssertionError("the probe never started")


def test_cancel_rolls_back_and_records_nothing(store_url: str, server_factory: Any) -> None:
    token = make_token(store_url, "admit")
    server = server_factory(store_url, "--sim-time-scale", "0.2")
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=f"cancel-{uuid.uuid4().hex[:6]}")}
    with server.client(token) as c:
        r = c.post("/v1/admissions", json=body)
        assert r.status_code == 202
        assert _wait_running(c, r.headers["location"])["state"] == "running"
        assert c.delete(r.headers["location"]).json()["cancel_requested"] is True
        final = c.get(r.headers["location"], params={"wait": "30s"}).json()
        assert final["state"] == "cancelled" and final["certificate"] is None
        assert "rolled back" in final["error"]
        assert c.get("/v1/evidence", params={"pair": f"2.21.5:{body['candidate']['version']}"}).json() == []
        assert c.get("/v1/reservations", params={"device": body["device"]["uuid"]}).json() == []
        # The pair is free again: the next admission starts a new probe.
        again = c.post("/v1/admissions", json=body)
        assert again.status_code == 202 and again.json()["id"] != r.json()["id"]
        c.delete(again.headers["location"])
    journal = [j for j in _rows(store_url, ProbeJournal) if j.key_json["candidate_version"] == body["candidate"]["version"]]
    assert journal and all(j.state != "recorded" for j in journal)


def test_killed_server_probe_is_recovered_and_waiters_fail_clearly(store_url: str, tmp_path: Path) -> None:
    token = make_token(store_url, "admit")
    first = Server(store_url, tmp_path, "--sim-time-scale", "1", name="first").start()
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=f"crash-{uuid.uuid4().hex[:6]}")}
    try:
        with first.client(token) as c:
            r = c.post("/v1/admissions", json=body)
            assert r.status_code == 202
            probe_id = r.json()["id"]
            assert _wait_running(c, r.headers["location"])["state"] == "running"
        waiter_error: list[BaseException] = []

        def wait_on_dead_server() -> None:
            try:
                with first.client(token) as w:
                    w.get(f"/v1/probes/{probe_id}", params={"wait": "60s"})
            except BaseException as exc:
                waiter_error.append(exc)

        waiter = threading.Thread(target=wait_on_dead_server)
        waiter.start()
        first.kill()
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        assert waiter_error and isinstance(waiter_error[0], httpx.TransportError)
    finally:
        first.kill()
    second = Server(store_url, tmp_path, name="second").start()
    try:
        with second.client(token) as c:
            status = c.get(f"/v1/probes/{probe_id}", params={"wait": "30s"}).json()
            assert status["state"] == "aborted", status
            assert "stopped" in status["error"] and "no evidence" in status["error"]
            assert c.get("/v1/evidence", params={"pair": f"2.21.5:{body['candidate']['version']}"}).json() == []
            again = c.post("/v1/admissions", json=body)
            assert again.status_code == 202 and again.json()["id"] != probe_id
            c.delete(again.headers["location"])
    finally:
        second.stop()
    journal = [j for j in _rows(store_url, ProbeJournal) if j.key_json["candidate_version"] == body["candidate"]["version"]]
    assert any(j.state == "aborted" for j in journal)
