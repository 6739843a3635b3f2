"""``canary evidence list|show|certificates``: workload names beside versions, digests shortened in
tables (whole in ``--json``), rows within the terminal's width, ``--pair`` by name, and the stored
certificates listed and shown."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from canary._model import PairKey
from evidence_store.certificates import record_certificate
from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from tests.evidence_store.evidence_store_testkit import T0, evidence
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

# The example profiles' identities (examples/profiles/llm-decode.yaml, the megakernel of
# examples/snapshots/a-persistent-35pct.yaml).
DECODE_DIGEST = "sha256:4f1c9a0e7d2b3c8e5a6f7d9e0b1a2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3"
KEY_NAMED = PairKey("0.9.3", "persistent", DECODE_DIGEST, "bs<=64,seq<=4096", "h100-sxm", "mps:50")
# A pair no certificate or registered profile names: its versions are all the store knows.
KEY_UNNAMED = PairKey("4.2.0", "bs<=8", "sha256:" + "ab" * 32, "bs<=8", "a100-80gb", "timeslice")


def _certificate(verdict: str, *, device: str, issued: str, reason: str) -> dict[str, Any]:
    return {
        "certificate_version": 1,
        "workload_name": "llm-decode",
        "workload_version": DECODE_DIGEST,
        "shape_family": "bs<=64,seq<=4096",
        "device": {"type": device, "uuid": "GPU-5a1f0c2e", "source": "file"},
        "residents": [{"name": "megakernel", "workload_version": "0.9.3", "shape_family": "persistent",
                       "profiled": True}],
        "verdict": verdict,
        "reason": reason,
        "regime": "mps:50",
        "decided_by": "canary",
        "issued_at": issued,
    }


@pytest.fixture
def store(tmp_path: Path) -> dict[str, Any]:
    url = migrated_sqlite(tmp_path / "names.sqlite3")
    eng = make_engine(url)
    try:
        with session_scope(eng) as session:
            named = record_evidence(session, evidence("p-named", key=KEY_NAMED, outcome="unsafe", created_at=T0))
            unnamed = record_evidence(session, evidence("p-unnamed", key=KEY_UNNAMED,
                                                        created_at=T0 + timedelta(hours=1)))
            admit = record_certificate(session, _certificate(
                "admit", device="h100-sxm", issued="2026-11-30T07:00:00Z", reason="fits, and evidence says so"),
                [named.id])
            reject = record_certificate(session, _certificate(
                "reject", device="a100-80gb", issued="2026-11-30T08:00:00Z",
                reason="does not fit: registers"), [])
    finally:
        eng.dispose()
    return {"url": url, "named": named.id, "unnamed": unnamed.id, "admit": admit, "reject": reject}


@pytest.fixture
def canary(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, store: dict[str, Any]) -> Any:
    def run(*argv: str, columns: int = 100) -> subprocess.CompletedProcess[str]:
        return run_in_process(["--db", store["url"], *argv], capsys=capsys, monkeypatch=monkeypatch,
                              env={"COLUMNS": str(columns)})

    return run


@pytest.mark.parametrize("columns", [80, 100, 120, 200])
def test_list_shows_names_and_short_digests_within_the_width(canary: Any, columns: int) -> None:
    proc = canary("evidence", "list", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    assert DECODE_DIGEST not in proc.stdout and "ab" * 32 not in proc.stdout
    if columns >= 120:
        # Container tools' convention: the algorithm and 12 hex characters of the digest.
        assert "megakernel@0.9.3 → llm-decode@sha256:4f1c9a0e7d2b" in proc.stdout
        assert "4.2.0 → sha256:abababababab" in proc.stdout  # no name known: the version alone
    else:  # a narrow terminal cuts the pair with an ellipsis, names first
        assert "megakernel@0.9.3 → " in proc.stdout and "…" in proc.stdout
    if columns < 200:
        assert f"(hidden to fit {columns} columns:" in proc.stdout


def test_json_keeps_full_versions_and_gives_the_names(canary: Any) -> None:
    proc = canary("evidence", "list", "--json")
    rows = {r["probe_id"]: r for r in json.loads(proc.stdout)}
    assert rows["p-named"]["key"]["candidate_version"] == DECODE_DIGEST
    assert rows["p-named"]["workload_names"] == {"resident": "megakernel", "candidate": "llm-decode"}
    assert rows["p-unnamed"]["workload_names"] == {"resident": None, "candidate": None}


@pytest.mark.parametrize(("pair", "expected"), [
    pytest.param("megakernel:llm-decode", ["p-named"], id="names"),
    pytest.param("megakernel@0.9.3:llm-decode@sha256:4f1c9a0e7d2b", ["p-named"], id="name-at-short-version"),
    pytest.param(f"megakernel@0.9.3:llm-decode@{DECODE_DIGEST}", ["p-named"], id="name-at-full-version"),
    pytest.param(f"0.9.3:{DECODE_DIGEST}", ["p-named"], id="full-versions-as-before"),
    pytest.param("megakernel:sha256:4f1c9a0e7d2b", ["p-named"], id="name-and-short-version"),
    pytest.param("4.2.0:sha256:abababababab", ["p-unnamed"], id="versions-of-an-unnamed-pair"),
])
def test_pair_filters_by_name_and_version(canary: Any, pair: str, expected: list[str]) -> None:
    proc = canary("evidence", "list", "--pair", pair, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["probe_id"] for r in json.loads(proc.stdout)] == expected


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--pair", "llm-decode:megakernel"],
                 "no evidence matches --pair llm-decode:megakernel (RESIDENT:CANDIDATE; 1 pair(s) match with "
                 "the two the other way round)", id="swapped"),
    pytest.param(["--pair", "megakernel:nope"], "no evidence matches --pair megakernel:nope (RESIDENT:CANDIDATE)",
                 id="unknown-name"),
    pytest.param(["--pair", "megakernel:llm-decode", "--status", "stale"],
                 "no evidence matches --pair megakernel:llm-decode, --status stale", id="other-filter"),
])
def test_a_filter_that_matches_nothing_says_so(canary: Any, argv: list[str], message: str) -> None:
    proc = canary("evidence", "list", *argv)
    assert proc.returncode == 0 and proc.stdout.startswith(message), proc.stdout


def test_a_pair_without_both_sides_is_bad_input(canary: Any) -> None:
    proc = canary("evidence", "list", "--pair", "llm-decode")
    assert proc.returncode == 2 and "--pair" in proc.stderr and "RESIDENT:CANDIDATE" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_show_names_the_workloads(canary: Any, store: dict[str, Any]) -> None:
    proc = canary("evidence", "show", store["named"][:8])
    assert "resident            megakernel, version 0.9.3 (persistent)" in proc.stdout
    assert f"candidate           llm-decode, version {DECODE_DIGEST} (bs<=64,seq<=4096)" in proc.stdout
    shown = json.loads(canary("evidence", "show", store["unnamed"], "--json").stdout)
    assert shown["workload_names"] == {"resident": None, "candidate": None}


@pytest.mark.parametrize(("argv", "expected"), [
    pytest.param([], ["reject", "admit"], id="all-newest-first"),
    pytest.param(["--verdict", "admit"], ["admit"], id="verdict"),
    pytest.param(["--device", "a100-80gb"], ["reject"], id="device-type"),
    pytest.param(["--device", "GPU-5a1f0c2e"], ["reject", "admit"], id="device-uuid"),
    pytest.param(["--workload", "llm-decode"], ["reject", "admit"], id="workload-name"),
    pytest.param(["--workload", f"llm-decode@{DECODE_DIGEST}"], ["reject", "admit"], id="name-at-version"),
    pytest.param(["--workload", "llm-decode@1.0"], [], id="other-version"),
    pytest.param(["--workload", "megakernel"], [], id="a-resident-is-not-the-workload"),
])
def test_certificates_list_filters(canary: Any, store: dict[str, Any], argv: list[str], expected: list[str]) -> None:
    proc = canary("evidence", "certificates", "list", *argv, "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert [c["id"] for c in got] == [store[name] for name in expected]
    if "admit" in expected:
        admit = next(c for c in got if c["id"] == store["admit"])
        assert admit["evidence_ids"] == [store["named"]]
    table = canary("evidence", "certificates", "list", *argv)
    if expected:
        assert all(store[name][:8] in table.stdout for name in expected)
    else:
        assert table.stdout.startswith("no certificate matches " + " ".join(argv[:2]))


def test_certificates_show_and_bad_ids(canary: Any, store: dict[str, Any]) -> None:
    proc = canary("evidence", "certificates", "show", store["admit"][:8], "--json")
    assert json.loads(proc.stdout)["certificate_json"]["reason"] == "fits, and evidence says so"
    proc = canary("evidence", "certificates", "show", "zzzz")
    assert proc.returncode == 2 and "no certificate with id 'zzzz'" in proc.stderr
    proc = canary("evidence", "certificates", "list", "--verdict", "maybe")
    assert proc.returncode == 2


def test_an_admission_certificate_is_listed_and_shown_by_the_installed_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real admission (simulated device) stores its certificate; the commands a user runs find it."""
    env = {**cli_env(tmp_path), "COLUMNS": "100"}
    env["CANARY_DB_URL"] = migrated_sqlite(tmp_path / "admit.sqlite3")

    def canary(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*canary_cmd(), *argv], capture_output=True, text=True, env=env, timeout=120)

    admit = canary("admit", str(EXAMPLES / "snapshots/a-persistent-35pct.yaml"),
                   str(EXAMPLES / "profiles/llm-decode.yaml"))
    assert admit.returncode == 1, admit.stderr  # registers do not fit beside the persistent megakernel
    listed = canary("evidence", "certificates", "list", "--workload", "llm-decode", "--verdict", "reject")
    assert listed.returncode == 0, listed.stderr
    row = listed.stdout.splitlines()[2]
    assert "reject" in row and "llm-decode@sha256:4f1c9a0e7d2b" in row and "megakernel@0.9.3" in row
    assert all(len(line) <= 100 for line in listed.stdout.splitlines())
    shown = run_in_process(["evidence", "certificates", "show", row.split()[0]], capsys=capsys,
                           monkeypatch=monkeypatch, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "REJECT  llm-decode" in shown.stdout and "limiting resource: registers" in shown.stdout
