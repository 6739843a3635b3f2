"""Several worker processes behind one port: metrics add up across them, the admission history is
complete, registry references stay right after new versions are put."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from evidence_store.database import make_engine, session_scope
from evidence_store.fleet_models import AdmissionLog
from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import HTTP_TIMEOUT, Api, Server, make_token, profile_doc, snapshot_doc

WAIT_S = 30.0


def _noop_count(text: str) -> float:
    m = re.search(r'^canary_http_responses_total\{route="/v1/noop",status="200"\} (\S+)$', text, re.M)
    return 0.0 if m is None else float(m.group(1))


def _fresh(server: Server, token: str, method: str, path: str) -> httpx.Response:
    """One request on a new connection, so that the kernel may hand it to any worker."""
    with httpx.Client(base_url=server.base, timeout=HTTP_TIMEOUT, headers={"Authorization": f"Bearer {token}"}) as c:
        return c.request(method, path)


@pytest.mark.slow
def test_two_workers_scrape_reports_the_whole_server(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    subprocess.run([*canary_cmd(), "--db", url, "db", "upgrade"], check=True, capture_output=True, timeout=120,
                   env=cli_env(tmp_path))
    token = make_token(url, "read")
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    server = Server(url, tmp_path, "--workers", "2")
    server.env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    server.start()
    try:
        n = 40
        for _ in range(n):
            assert _fresh(server, token, "GET", "/v1/noop").status_code == 200
        # Each worker writes its own files; one of them answers each scrape.
        pids = {m.group(1) for f in metrics_dir.iterdir() if (m := re.fullmatch(r"counter_(\d+)\.db", f.name))}
        assert len(pids) == 2, sorted(f.name for f in metrics_dir.iterdir())
        for _ in range(8):
            scrape = _fresh(server, token, "GET", "/metrics")
            assert scrape.status_code == 200, scrape.text
            assert _noop_count(scrape.text) == n, scrape.text[:2000]
            assert "canary_store_up 1.0" in scrape.text  # the store's gauges are there once, not per worker
            assert scrape.text.count("# TYPE canary_store_up gauge") == 1
    finally:
        server.stop()


@pytest.mark.slow
def test_workers_metrics_directory_is_private_and_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    token = make_token_after_upgrade(url, tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = Server(url, tmp_path, "--workers", "2")
    server.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server.env["TMPDIR"] = str(tmp)
    server.start()
    try:
        assert _fresh(server, token, "GET", "/v1/noop").status_code == 200
        made = [p for p in tmp.iterdir() if p.name.startswith("canary-metrics-")]
        assert len(made) == 1 and any(made[0].iterdir())
        assert _noop_count(_fresh(server, token, "GET", "/metrics").text) == 1
    finally:
        server.stop()
    assert not any(p.name.startswith("canary-metrics-") for p in tmp.iterdir())


def make_token_after_upgrade(url: str, tmp_path: Path) -> str:
    subprocess.run([*canary_cmd(), "--db", url, "db", "upgrade"], check=True, capture_output=True, timeout=120,
                   env=cli_env(tmp_path))
    return make_token(url, "read")


@pytest.mark.slow
def test_workers_refuse_a_missing_metrics_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evidence.sqlite3'}"
    make_token_after_upgrade(url, tmp_path)
    env = cli_env(tmp_path) | {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "nowhere")}
    out = subprocess.run([*canary_cmd(), "--db", url, "serve", "--port", "0", "--workers", "2"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 2, out.stderr
    assert "PROMETHEUS_MULTIPROC_DIR" in out.stderr and "nowhere" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "nowhere").exists()


def test_every_admission_reaches_the_history(api: Api) -> None:
    """The history is written after the answers, batched: all of them arrive, none twice."""
    version = f"hist-{uuid.uuid4().hex[:8]}"
    body = {"device": snapshot_doc(), "candidate": profile_doc(version=version), "probe": False, "reserve": False}
    n = 12
    with api.client("admit") as c:
        for _ in range(n):
            r = c.post("/v1/admissions", json=body)
            assert r.status_code == 200, r.text

    def logged() -> int:
        """Admissions the history counts for this candidate (a row counts those of its pair in one window)."""
        engine = make_engine(api.db_url)
        try:
            with session_scope(engine, read_only=True) as s:
                rows = s.scalars(select(AdmissionLog)).all()
                return sum(r.requests for r in rows if r.request_json["candidate"]["version"] == version)
        finally:
            engine.dispose()

    deadline = time.monotonic() + WAIT_S
    while logged() < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert logged() == n


def test_a_bare_registry_name_follows_new_versions(api: Api) -> None:
    """Exact references are cached per process (entries are immutable); a bare name is the newest."""
    name = f"reg-{uuid.uuid4().hex[:8]}"
    fits = profile_doc() | {"name": name, "version": "1"}
    huge = fits | {"version": "2", "memory": {"reserved_bytes": 200 * 2**30, "peak_bytes": 200 * 2**30}}
    with api.client("admin") as c:
        assert c.post("/v1/profiles", json={"document": fits}).status_code == 200
        first = c.post("/v1/fit", json={"device": "h100-sxm", "candidate": name})
        assert first.status_code == 200 and first.json()["verdict"] == "admit", first.text
        assert c.post("/v1/fit", json={"device": "h100-sxm", "candidate": f"{name}@1"}).json()["verdict"] == "admit"
        assert c.post("/v1/profiles", json={"document": huge}).status_code == 200
        newest = c.post("/v1/fit", json={"device": "h100-sxm", "candidate": name}).json()
        assert newest["verdict"] == "reject" and newest["workload_version"] == "2", newest
        assert c.post("/v1/fit", json={"device": "h100-sxm", "candidate": f"{name}@1"}).json()["verdict"] == "admit"




def test_the_worker_liveness_timeout_reaches_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn kills a worker that misses its 5 s liveness ping; on a CPU-starved node that drops every
    request the worker holds (seen as 'server disconnected' under load). The setting is passed through."""
    import uvicorn

    from canary.serve.config import ServeConfig
    from canary.serve.main import _run

    seen: dict[str, object] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: seen.update(kwargs))
    monkeypatch.delenv("CANARY_SERVE_CONFIG_JSON", raising=False)  # _run sets it; restored after
    _run(ServeConfig(db_url="sqlite:///unused.sqlite3", workers=2), log_level="warning", access_log=False)
    assert seen["timeout_worker_healthcheck"] == 30 and seen["workers"] == 2
    _run(ServeConfig(db_url="sqlite:///unused.sqlite3", workers=2, worker_healthcheck_s=90), log_level="warning",
         access_log=False)
    assert seen["timeout_worker_healthcheck"] == 90
    with pytest.raises(ValueError, match="worker_healthcheck_s"):
        ServeConfig(db_url="sqlite:///unused.sqlite3", worker_healthcheck_s=0)
