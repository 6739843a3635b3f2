"""Fixtures: node agents as real ``canary agent run`` processes (simulated devices: snapshot files the
test edits), beside the real ``canary serve`` of tests/serve, on a real store."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from evidence_store.database import make_engine, session_scope
from tests.conftest import canary_cmd, cli_env
from tests.evidence_store.conftest import PgServer, _need_pg
from tests.serve.conftest import EX, backend, pg_server, server_factory
from tests.support.stores import migrated_sqlite

__all__ = ["backend", "pg_server", "server_factory", "store_url"]

WAIT_S = 120.0  # generous: CI is a busy 2-core machine; every wait ends as soon as the state is recorded


@pytest.fixture
def store_url(backend: str, tmp_path: Path, pg_server: PgServer | None) -> str:
    """A store migrated to head, private to the test (a copy of one the session migrated)."""
    if backend == "sqlite":
        return migrated_sqlite(tmp_path / "evidence.sqlite3")
    return _need_pg(pg_server).migrated()


def rows(url: str, model: Any, *where: Any) -> list[Any]:
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            query = select(model)
            if where:
                query = query.where(*where)
            return list(session.scalars(query).all())
    finally:
        engine.dispose()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S, poll_s: float = 0.1) -> Any:
    """Poll recorded state until ``check`` returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def write_device(path: Path, *, uuid: str, driver: str = "580.95.05", source: str = "g-nccl-mps-room.yaml") -> Path:
    """A simulated device: an example snapshot with its own UUID and driver, resident profiles by path."""
    doc = yaml.safe_load((EX / "snapshots" / source).read_text())
    doc["uuid"], doc["driver_version"] = uuid, driver
    for resident in doc.get("residents", []):
        if isinstance(resident.get("profile"), str):
            resident["profile"] = str((EX / "snapshots" / resident["profile"]).resolve())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc))
    tmp.replace(path)  # atomic: the agent never reads half a file
    return path


class AgentProc:
    def __init__(self, db_url: str, tmp: Path, node: str, devices: dict[str, Path], *args: str) -> None:
        self.node = node
        self.log = tmp / f"agent-{node}.log"
        cmd = [*canary_cmd(), "--db", db_url, "agent", "run", "--node", node, *args]
        for name, path in devices.items():
            cmd += ["--device", f"{name}={path}"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=cli_env(tmp),
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the agent's process group: nothing of it runs any more (a node crash)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def agent_factory(tmp_path: Path) -> Iterator[Callable[..., AgentProc]]:
    started: list[AgentProc] = []

    def start(db_url: str, node: str, devices: dict[str, Path], *args: str) -> AgentProc:
        from evidence_store.fleet_models import PublishedSnapshot

        agent = AgentProc(db_url, tmp_path, node, devices, *args)
        started.append(agent)

        def published() -> bool:
            if not agent.alive():
                raise AssertionError(f"agent {node} exited {agent.proc.returncode}: {agent.log.read_text()[-2000:]}")
            return len(rows(db_url, PublishedSnapshot, PublishedSnapshot.node == node)) == len(devices)

        wait_for(f"agent {node} to publish its devices", published)
        return agent

    yield start
    for agent in started:
        agent.stop()
