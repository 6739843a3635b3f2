"""Fixtures: the service runs as a real ``canary serve`` subprocess on a loopback port, against a real
store (a SQLite file, or a fresh database on the PostgreSQL server at 127.0.0.1:5432)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from evidence_store.database import make_engine, session_scope
from evidence_store.migrate import upgrade
from tests.conftest import canary_cmd, cli_env
from tests.evidence_store.conftest import BACKENDS, PgServer, _need_pg, pg_server
from tests.support.helpers import free_port

__all__ = ["free_port", "pg_server"]

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
HTTP_TIMEOUT = httpx.Timeout(30.0)


def make_token(url: str, *scopes: str) -> str:
    from evidence_store.service import tokens

    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            secret, _ = tokens.create(session, name=f"test-{'-'.join(scopes)}", scopes=scopes,
                                      now=dt.datetime.now(dt.UTC))
    finally:
        engine.dispose()
    return secret


class Server:
    """``canary serve`` in its own process group; ``base`` is its URL."""

    def __init__(self, db_url: str, tmp_path: Path, *args: str, name: str = "server") -> None:
        self.db_url = db_url
        self.args = args
        self.log = tmp_path / f"{name}.log"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = cli_env(tmp_path)

    def start(self, timeout_s: float = 60.0) -> Server:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*canary_cmd(), "--db", self.db_url, "serve", "--port", str(self.port), *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"canary serve exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"canary serve did not answer within {timeout_s}s: {self.log.read_text()[-2000:]}")

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=HTTP_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup runs (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, pg_server: PgServer | None) -> str:
    """A store migrated to head, private to the test."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    else:
        url = _need_pg(pg_server).create()
    upgrade(url)
    return url


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def start(db_url: str, *args: str, name: str = "server") -> Server:
        server = Server(db_url, tmp_path, *args, name=name)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@dataclass
class Api:
    server: Server
    db_url: str
    tokens: dict[str, str]

    def client(self, scope: str | None = "admin") -> httpx.Client:
        return self.server.client(None if scope is None else self.tokens[scope])


@pytest.fixture(scope="module", params=BACKENDS)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
        pg_server: PgServer | None) -> Iterator[Api]:
    """One authenticated server per module and backend, with a token per scope."""
    tmp = tmp_path_factory.mktemp(f"api-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'evidence.sqlite3'}"
    else:
        url = _need_pg(pg_server).create()
    upgrade(url)
    tokens = {scope: make_token(url, scope) for scope in ("read", "fit", "admit", "feedback", "admin")}
    server = Server(url, tmp, "--sim-time-scale", "0", "--node", f"gpu-node-a={EX / 'snapshots' / 'g-nccl-mps-room.yaml'}",
                    "--node", f"gpu-node-b={EX / 'snapshots' / 'a-persistent-35pct.yaml'}",
                    "--node", "gpu-node-idle=h100-sxm")
    server.start()
    try:
        yield Api(server, url, tokens)
    finally:
        server.stop()


def profile_doc(name: str = "embedding-service.yaml", **changes: Any) -> dict[str, Any]:
    from canary.profile import load_profile

    return load_profile(EX / "profiles" / name).model_dump(mode="json") | changes


def snapshot_doc(name: str = "g-nccl-mps-room.yaml", **changes: Any) -> dict[str, Any]:
    from canary.snapshot import load_snapshot

    return load_snapshot(EX / "snapshots" / name).model_dump(mode="json") | changes
