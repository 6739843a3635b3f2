"""CLI parity: ``canary fit/admit --server URL`` (or $CANARY_SERVER) answer what the local commands answer,
with the same exit codes; ``canary tokens`` and ``canary profiles`` manage what the service uses."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import canary_cmd, cli_env
from tests.serve.conftest import EX

SNAP, PROF = EX / "snapshots", EX / "profiles"


def _canary(tmp_path: Path, db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = cli_env(tmp_path) | (env or {})
    return subprocess.run([*canary_cmd(), "--db", db, *args], capture_output=True, text=True, env=full, timeout=180)


@pytest.mark.slow
def test_fit_and_admit_through_the_service_match_local(store_url: str, server_factory: Any, tmp_path: Path) -> None:
    created = _canary(tmp_path, store_url, "tokens", "create", "--name", "cli", "--scope", "admit")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("cnr_") and "shown once" in created.stderr
    listed = _canary(tmp_path, store_url, "tokens", "list")
    assert "cli" in listed.stdout and token.split("_", 2)[2] not in listed.stdout
    server = server_factory(store_url)
    remote = {"CANARY_SERVER": server.base, "CANARY_TOKEN": token}
    cases = [
        ("fit", str(SNAP / "a-persistent-35pct.yaml"), str(PROF / "llm-decode.yaml"), 1),
        ("fit", str(SNAP / "c-mig-95pct.yaml"), str(PROF / "llm-decode.yaml"), 0),
        ("fit", "h100-sxm", str(PROF / "embedding-service.yaml"), 0),
    ]
    for command, device, profile, want in cases:
        here = _canary(tmp_path, store_url, command, device, profile, "--json")
        there = _canary(tmp_path, store_url, command, device, profile, "--json", env=remote)
        assert here.returncode == there.returncode == want, (here.stderr, there.stderr)
        mine, theirs = json.loads(here.stdout), json.loads(there.stdout)
        for field in ("verdict", "hard_fit", "limiting_resource", "findings", "regime", "decided_by"):
            assert mine[field] == theirs[field], field
    # admit through the service: a probe, then the cache; same exit code as a local admit would give.
    profile = tmp_path / "svc.yaml"
    doc = yaml.safe_load((PROF / "embedding-service.yaml").read_text()) | {"version": f"cli-{uuid.uuid4().hex[:6]}"}
    profile.write_text(yaml.safe_dump(doc))
    first = _canary(tmp_path, store_url, "admit", str(SNAP / "g-nccl-mps-room.yaml"), str(profile), "--json",
                    "--server", server.base, env={"CANARY_TOKEN": token})
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["decided_by"] == "canary" and "done" in first.stderr
    second = _canary(tmp_path, store_url, "admit", str(SNAP / "g-nccl-mps-room.yaml"), str(profile), "--json",
                     env=remote)
    assert second.returncode == 0 and json.loads(second.stdout)["decided_by"] == "cache"
    # Bad token: exit 2 with one line naming the service; unreachable service: exit 4.
    bad = _canary(tmp_path, store_url, "fit", "h100-sxm", str(profile), env=remote | {"CANARY_TOKEN": "cnr_x_y"})
    assert bad.returncode == 2 and "401" in bad.stderr and "Traceback" not in bad.stderr
    gone = _canary(tmp_path, store_url, "fit", "h100-sxm", str(profile), env={"CANARY_SERVER": "http://127.0.0.1:9"})
    assert gone.returncode == 4 and "did not answer" in gone.stderr


@pytest.mark.slow
def test_profiles_put_list_show(store_url: str, tmp_path: Path) -> None:
    put = _canary(tmp_path, store_url, "profiles", "put", str(PROF / "llm-decode.yaml"))
    assert put.returncode == 0 and "stored profile llm-decode@" in put.stdout
    assert "already stored" in _canary(tmp_path, store_url, "profiles", "put", str(PROF / "llm-decode.yaml")).stdout
    snap = _canary(tmp_path, store_url, "profiles", "put", "--snapshot", str(SNAP / "g-nccl-mps-room.yaml"),
                   "--name", "node-a-gpu0", "--version", "1")
    assert snap.returncode == 0, snap.stderr
    assert "node-a-gpu0@1" in _canary(tmp_path, store_url, "profiles", "list", "--snapshots").stdout
    version = yaml.safe_load((PROF / "llm-decode.yaml").read_text())["version"]
    shown = _canary(tmp_path, store_url, "profiles", "show", f"llm-decode@{version}")
    assert json.loads(shown.stdout)["name"] == "llm-decode"
    missing = _canary(tmp_path, store_url, "profiles", "show", "nope@1")
    assert missing.returncode == 2 and "nope@1" in missing.stderr
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(yaml.safe_dump(yaml.safe_load((PROF / "llm-decode.yaml").read_text()) | {
        "version": "evil", "canary": {"executor": "process", "command": ["/bin/true"]}}))
    refused = _canary(tmp_path, store_url, "profiles", "put", str(hostile))
    assert refused.returncode == 2 and "operator configuration" in refused.stderr


def test_serve_refuses_no_auth_off_loopback(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    r = _canary(tmp_path, db, "serve", "--no-auth", "--host", "0.0.0.0")
    assert r.returncode == 2 and "loopback" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "e.db")
