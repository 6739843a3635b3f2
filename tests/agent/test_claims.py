"""One live agent per device, with real ``canary agent run`` processes: a second agent for the same node
and device name refuses to start and names the holder; a stopped agent releases its devices; a killed
one's claim lapses with its heartbeat; an agent whose device another agent holds now stops.

Every wait ends on recorded state (the published row's agent and claim), never on another process's timing."""

from __future__ import annotations

import datetime as dt
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from evidence_store.database import make_engine, session_scope
from evidence_store.fleet_models import PublishedSnapshot
from tests.agent.conftest import WAIT_S, rows, wait_for, write_device
from tests.conftest import canary_cmd, cli_env

pytestmark = pytest.mark.slow

BEAT = ("--heartbeat-s", "0.5", "--claim-s", "4")


def _row(url: str) -> PublishedSnapshot:
    [row] = rows(url, PublishedSnapshot)
    return row


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_a_second_agent_for_the_same_device_is_refused_until_the_first_is_gone(
        store_url: str, tmp_path: Path, agent_factory: Any) -> None:
    device = write_device(tmp_path / "gpu0.yaml", uuid=f"GPU-{uuid.uuid4().hex[:6]}-claim")
    first = agent_factory(store_url, "n1", {"gpu0": device}, *BEAT)
    holder = _row(store_url).agent
    assert holder.startswith("agent/n1@")

    # a second agent for n1/gpu0 while the first runs: refused before it publishes anything
    second = subprocess.run([*canary_cmd(), "--db", store_url, "agent", "run", "--node", "n1", "--device",
                             f"gpu0={device}", *BEAT], capture_output=True, text=True, timeout=WAIT_S,
                            env=cli_env(tmp_path))
    assert second.returncode == 4, second.stderr
    assert f"agent:n1/gpu0 is held by agent {holder} (last heartbeat" in second.stderr
    assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert first.alive() and _row(store_url).agent == holder

    # stopped: the first agent releases the device, the next one takes it at once
    first.stop()
    assert first.proc.returncode == 0, first.log.read_text()[-2000:]
    released = _row(store_url)
    assert released.agent == holder and released.claim_expires_at <= _now()
    after_stop = agent_factory(store_url, "n1", {"gpu0": device}, *BEAT)
    taker = wait_for("the next agent to take the device", lambda: _row(store_url).agent != holder and
                     _row(store_url).agent)
    assert after_stop.alive() and taker.startswith("agent/n1@")

    # killed: nothing releases the claim; it lapses with the heartbeats, then a new agent starts
    after_stop.kill()
    wait_for("the killed agent's claim to lapse", lambda: _row(store_url).claim_expires_at < _now())
    agent_factory(store_url, "n1", {"gpu0": device}, *BEAT)
    newest = wait_for("a new agent to take the device", lambda: _row(store_url).agent not in (holder, taker) and
                      _row(store_url).agent)
    assert newest.startswith("agent/n1@")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_agent_whose_device_was_taken_over_stops(store_url: str, tmp_path: Path, agent_factory: Any) -> None:
    """An agent that stopped renewing (suspended, cut off) finds another live agent on its device at its next
    heartbeat: it stops running probes there and exits, naming that agent."""
    device = write_device(tmp_path / "gpu0.yaml", uuid=f"GPU-{uuid.uuid4().hex[:6]}-over")
    agent = agent_factory(store_url, "n1", {"gpu0": device}, *BEAT)
    intruder = "agent/n1@elsewhere:4242:feedbeef"
    engine = make_engine(store_url)
    try:
        with session_scope(engine) as session:  # what another agent's publish writes once the claim lapsed
            session.execute(update(PublishedSnapshot).values(agent=intruder,
                                                             claim_expires_at=_now() + dt.timedelta(hours=1)))
    finally:
        engine.dispose()
    wait_for("the agent to stop", lambda: not agent.alive())
    assert agent.proc.returncode == 4
    log = agent.log.read_text()
    assert f"agent:n1/gpu0 is held by agent {intruder}" in log and "Traceback" not in log, log[-2000:]
    assert _row(store_url).agent == intruder  # it released nothing of the other agent's
