"""`canary admit` end to end on the simulator and a real SQLite store: probe, record, reserve,
certificate in one commit; the second admission from the cache; feedback that overrides passes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from canary.admission import admit, load_request, utcnow
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

SNAP = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")
EMB = str(EXAMPLES / "profiles" / "embedding-service.yaml")
RESNET = str(EXAMPLES / "profiles" / "resnet50-training.yaml")


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evidence.sqlite3'}"


def _count(tmp_path: Path, table: str) -> int:
    with sqlite3.connect(tmp_path / "evidence.sqlite3") as conn:
        return int(conn.execute(f"select count(*) from {table}").fetchone()[0])


def test_first_admission_probes_second_comes_from_cache(tmp_path: Path) -> None:
    db = _db(tmp_path)
    first = admit(load_request(SNAP, EMB), db_url=db)
    assert first.verdict == "admit" and first.decided_by == "canary"
    assert first.probe is not None and first.probe.outcome == "safe" and first.probe.simulated
    assert first.evidence is not None and len(first.evidence.ids) == 1
    assert len(first.resource_reservations) == 1
    second = admit(load_request(SNAP, EMB), db_url=db)
    assert second.decided_by == "cache" and second.verdict == "admit" and second.probe is None
    assert second.evidence is not None and second.evidence.ids == first.evidence.ids
    assert _count(tmp_path, "evidence") == 1
    assert _count(tmp_path, "certificates") == 2
    assert _count(tmp_path, "reservations") == 2


def test_reservations_are_counted_by_later_admissions(tmp_path: Path) -> None:
    db = _db(tmp_path)
    hbm = []
    for _ in range(3):
        cert = admit(load_request(SNAP, EMB), db_url=db)
        hbm.append(next(f.available for f in cert.findings if f.resource == "hbm"))
    booked = 6 * 2**30 + 512 * 2**20  # peak + context cost
    assert hbm[0] - hbm[1] == booked and hbm[1] - hbm[2] == booked


def test_unsafe_pair_is_rejected_and_books_nothing(tmp_path: Path) -> None:
    cert = admit(load_request("h100", EMB, resident_paths=(RESNET,)), db_url=_db(tmp_path))
    assert cert.verdict == "reject" and cert.decided_by == "canary"
    assert cert.probe is not None and cert.probe.outcome == "unsafe"
    assert cert.probe.slowdown_estimate_pct is not None and cert.probe.slowdown_estimate_pct > 15
    assert cert.resource_reservations == ()
    assert _count(tmp_path, "reservations") == 0
    assert _count(tmp_path, "evidence") == 1


def test_hard_fit_reject_never_probes(tmp_path: Path) -> None:
    cert = admit(load_request(str(EXAMPLES / "snapshots" / "a-persistent-35pct.yaml"),
                              str(EXAMPLES / "profiles" / "llm-decode.yaml")), db_url=_db(tmp_path))
    assert cert.verdict == "reject" and cert.decided_by == "hard-fit" and cert.probe is None
    assert _count(tmp_path, "evidence") == 0 and _count(tmp_path, "probe_journal") == 0


def test_no_probe_leaves_unseen_pairs_unknown(tmp_path: Path) -> None:
    cert = admit(load_request(SNAP, EMB), db_url=_db(tmp_path), probe=False)
    assert cert.verdict == "unknown" and cert.probe is None
    assert "not yet known" in cert.reason


def test_production_feedback_outweighs_earlier_passes(tmp_path: Path) -> None:
    from canary.admission import record_feedback

    db = _db(tmp_path)
    assert admit(load_request(SNAP, EMB), db_url=db).verdict == "admit"
    record_feedback(load_request(SNAP, EMB), resident_name="comms", db_url=db, observed_slowdown_pct=40.0,
                    now=utcnow())
    after = admit(load_request(SNAP, EMB), db_url=db)
    assert after.verdict == "reject" and after.decided_by == "cache"
    assert "production" in (after.evidence.sources if after.evidence else ())


@pytest.mark.slow
def test_admit_cli_json_and_progress(tmp_path: Path) -> None:
    proc = subprocess.run([*canary_cmd(), "admit", SNAP, EMB, "--json"], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)
    assert cert["decided_by"] == "canary" and cert["probe"]["exposure_used"] <= cert["probe"]["budget"]["max_requests_exposed"]
    assert "probe decided" in proc.stderr  # the progress display
    again = subprocess.run([*canary_cmd(), "fit", SNAP, EMB, "--json"], capture_output=True, text=True,
                           env=cli_env(tmp_path), timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout)["decided_by"] == "cache"


def test_store_on_an_older_schema_is_never_migrated_silently(tmp_path: Path) -> None:
    from evidence_store.migrate import current, upgrade

    db = _db(tmp_path)
    upgrade(db, "5e1d0c3a9b21")  # an existing store at the first revision: tables, but an older schema
    proc = subprocess.run([*canary_cmd(), "--db", db, "admit", SNAP, EMB], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 4 and "canary db upgrade" in proc.stderr and "Traceback" not in proc.stderr
    assert current(db) == ("5e1d0c3a9b21",)  # left as it was


@pytest.mark.parametrize("bad", ["mig:9g.999gb", "green:0"])
def test_bad_regime_on_admit(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (tests/support/cli.py); the tests around it run ``canary admit`` as a real process."""
    proc = run_in_process(["admit", SNAP, EMB, "--regime", bad], capsys=capsys, monkeypatch=monkeypatch,
                          env=cli_env(tmp_path))
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_read_that_left_a_blank_store_file_does_not_block_the_first_admission(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    listed = subprocess.run([*canary_cmd(), "evidence", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 4 and "canary db upgrade" in listed.stderr  # nothing recorded yet
    proc = subprocess.run([*canary_cmd(), "admit", "--quiet", "h100", EMB], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_mig_admission_books_the_new_instance_by_its_placement(tmp_path: Path) -> None:
    """c-mig-95pct: an H200 with MIG on and one 3g.71gb instance at memory slices [0,4). 3g.71gb
    instances start at slice 0 or 4 (NVIDIA MIG User Guide, H200 placements {0,4}:4), so the
    llm-decode candidate's new instance goes to 4, and its 42 GiB peak + 512 MiB context are
    booked against that instance, not the device."""
    cert = admit(load_request(str(EXAMPLES / "snapshots" / "c-mig-95pct.yaml"),
                              str(EXAMPLES / "profiles" / "llm-decode.yaml")), db_url=_db(tmp_path))
    assert cert.verdict == "admit" and cert.regime == "mig:3g.71gb"
    (booking,) = cert.resource_reservations
    assert booking.mig_instance == "3g.71gb@4"
    assert booking.memory_bytes == 42 * 2**30 + 512 * 2**20
    with sqlite3.connect(tmp_path / "evidence.sqlite3") as conn:
        rows = conn.execute("select device_id, mig_instance, memory_bytes from reservations").fetchall()
    assert rows == [("GPU-77c1d2e3-f405-4a6b-8c9d-0e1f2a3b4c5d/mig:3g.71gb@4", "3g.71gb@4", 42 * 2**30 + 512 * 2**20)]


def test_the_bookings_term_says_where_its_number_came_from(tmp_path: Path) -> None:
    """A 0 for other admissions' bookings names its source: the store read, no store yet, or not consulted."""
    from canary.admission import EvidenceAccess, fit

    def bookings_source(access: EvidenceAccess | None) -> str:
        cert = fit(load_request(SNAP, EMB), access, utcnow())
        hbm = next(f for f in cert.findings if f.resource == "hbm")
        return next(t.source for t in hbm.terms if t.name == "reservations")

    assert bookings_source(None).startswith("not counted: no evidence store consulted")
    assert bookings_source(EvidenceAccess(_db(tmp_path))).startswith("no evidence store yet")
    admit(load_request(SNAP, EMB), db_url=_db(tmp_path))  # creates the store and books memory
    assert bookings_source(EvidenceAccess(_db(tmp_path))).startswith("evidence store: memory booked")


@pytest.mark.parametrize("regime", ["mps:50", "MPS:50", "Mig:1g.10gb", "green:8"])
def test_an_nvidia_only_regime_on_an_amd_device_is_an_input_error(regime: str) -> None:
    """One check for the CLI and the service (both build the request through ``build_request``)."""
    from canary.admission import build_request
    from canary.backends import resolve_device
    from canary.errors import InputError
    from canary.policy import load_policy
    from canary.profile import load_profile

    snap = str(EXAMPLES / "snapshots" / "j-mi300x-spx.yaml")
    with pytest.raises(InputError, match="NVIDIA-only") as cli:
        load_request(snap, EMB, regime=regime)
    assert cli.value.field == "--regime"
    with pytest.raises(InputError, match="NVIDIA-only") as api:
        build_request(resolve_device(snap), load_profile(EMB), load_policy(), regime=regime)
    assert api.value.field == "regime"
