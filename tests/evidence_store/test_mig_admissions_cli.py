"""``canary admit`` again and again on a MIG card, on a fresh SQLite store, until the card is full:
every admission books its own placement, the next one sees it as taken, and the last one is a reject
that names the placements held.

``examples/snapshots/c-mig-95pct.yaml`` (H200, MIG on): a 3g.71gb instance holds memory slices [0,4).
The H200 table (``nvidia-smi mig -lgipp``, the 8-slice layout; ``canary/catalog/devices.yaml``):
1g.18gb = 1 slice, starts 0‥6; 2g.35gb = 2 slices, starts 0/2/4. Free 1g starts: 4, 5, 6 (slice 7 takes
no 1g instance). ``embedding-service`` (6 GiB peak + 512 MiB context) accepts 1g.18gb and 2g.35gb on
this device (its other names are not H200 profiles): 1g.18gb is the smaller, so it takes 4, 5 and 6;
then 2g.35gb has no start left (0 and 2 are the 3g's, 4 is booked): a reject.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

SNAPSHOT = EXAMPLES / "snapshots" / "c-mig-95pct.yaml"
EMBEDDING = EXAMPLES / "profiles" / "embedding-service.yaml"
GIB = 1 << 30


class Admit:
    """``canary --db URL admit … --json`` on one store. ``fresh``: the store does not exist yet and the
    first call, a real subprocess (what a user runs), creates it; the other calls run in-process (the
    same entry point, without the start-up). Otherwise the store is a migrated copy (fast)."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                 *, fresh: bool) -> None:
        (tmp_path / "store").mkdir()
        path = tmp_path / "store" / "evidence.sqlite3"
        self.db = f"sqlite:///{path}" if fresh else migrated_sqlite(path)
        self.env = cli_env(tmp_path)
        self.capsys, self.monkeypatch = capsys, monkeypatch
        self.fresh = fresh
        self.calls = 0

    def run(self, *argv: str, want: int) -> str:
        args = ["--db", self.db, *argv]
        if self.calls == 0 and self.fresh:
            done = subprocess.run([*canary_cmd(), *args], capture_output=True, text=True, env=self.env, timeout=120,
                                  check=False)
        else:
            done = run_in_process(args, capsys=self.capsys, monkeypatch=self.monkeypatch, env=self.env)
        self.calls += 1
        assert done.returncode == want, (argv, done.stdout[-3000:], done.stderr[-3000:])
        assert "Traceback" not in done.stderr
        return done.stdout

    def admit(self, profile: Path, *extra: str, want: int) -> dict[str, Any]:
        cert: dict[str, Any] = json.loads(self.run("admit", str(SNAPSHOT), str(profile), "--json", *extra, want=want))
        return cert

    def reservations(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.run("reservations", "list", "--json", want=0))
        return rows


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Admit:
    return Admit(tmp_path, capsys, monkeypatch, fresh=False)


@pytest.fixture
def fresh_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Admit:
    return Admit(tmp_path, capsys, monkeypatch, fresh=True)


def _finding(cert: dict[str, Any], resource: str) -> dict[str, Any]:
    found: dict[str, Any] = next(f for f in cert["findings"] if f["resource"] == resource)
    return found


def _profile(tmp_path: Path, name: str, peak: str, profiles: str) -> Path:
    text = EMBEDDING.read_text()
    text = text.replace("name: embedding-service", f"name: {name}").replace("peak_bytes: 6Gi", f"peak_bytes: {peak}")
    start = text.index("mig_profiles: [")
    text = text[:start] + f"mig_profiles: [{profiles}]" + text[text.index("]", start) + 1:]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_admissions_take_free_placements_one_by_one_until_the_card_is_full(fresh_cli: Admit) -> None:
    cli = fresh_cli
    assert not Path(cli.db.removeprefix("sqlite:///")).exists()  # the first admission creates the store
    starts = []
    for _ in range(3):
        cert = cli.admit(EMBEDDING, want=0)
        assert (cert["verdict"], cert["regime"], cert["hard_fit"]) == ("admit", "mig:1g.18gb", "yes"), cert["reason"]
        placement = _finding(cert, "mig_placement")["placement"]
        (booking,) = cert["resource_reservations"]
        assert booking["mig_instance"] == f"1g.18gb@{placement['start']}"  # booked where the certificate says
        starts.append(placement["start"])
    assert starts == [4, 5, 6]

    for _ in range(2):  # the card stays full: every further admission is a reject naming what holds it
        cert = cli.admit(EMBEDDING, want=1)
        assert (cert["verdict"], cert["hard_fit"], cert["limiting_resource"]) == ("reject", "no", "mig_placement")
        assert cert["resource_reservations"] == []
        assert _finding(cert, "mig_placement")["placement"] is None
        for start in starts:
            assert f"1g.18gb@{start}" in cert["reason"], cert["reason"]
        assert "2g.35gb" in cert["reason"]  # the other profile it accepts, and why it does not fit either
        assert "another admission booked" not in cert["reason"]  # stage 1 saw the bookings itself

    rows = cli.reservations()
    active = [r for r in rows if r["active"]]
    assert sorted(r["mig_instance"] for r in active) == ["1g.18gb@4", "1g.18gb@5", "1g.18gb@6"]
    uuid = "GPU-77c1d2e3-f405-4a6b-8c9d-0e1f2a3b4c5d"
    assert all(r["device_id"] == f"{uuid}/mig:{r['mig_instance']}" for r in active)
    assert all(r["memory_bytes"] == 6 * GIB + 512 * (1 << 20) for r in active)
    assert all(r["holder"] == "embedding-service@1.8.0" for r in active)


def test_a_given_regime_moves_along_the_free_starts_too(cli: Admit) -> None:
    starts = [cli.admit(EMBEDDING, "--regime", "mig:1g.18gb", want=0)["resource_reservations"][0]["mig_instance"]
              for _ in range(3)]
    assert starts == ["1g.18gb@4", "1g.18gb@5", "1g.18gb@6"]
    cert = cli.admit(EMBEDDING, "--regime", "mig:1g.18gb", want=1)
    assert cert["limiting_resource"] == "mig_placement" and cert["regime_chosen_by"] == "given (--regime)"
    assert all(s in cert["reason"] for s in starts), cert["reason"]


def test_a_larger_instance_booked_first_leaves_the_1g_at_6_then_nothing(cli: Admit, tmp_path: Path) -> None:
    # 20 GiB fits 2g.35gb (30.6 GiB usable) but not 1g.18gb (15 GiB): the list's order does not matter.
    big = _profile(tmp_path, "big", "20Gi", "1g.18gb, 2g.35gb")
    cert = cli.admit(big, want=0)
    assert cert["regime"] == "mig:2g.35gb" and cert["resource_reservations"][0]["mig_instance"] == "2g.35gb@4"
    cert = cli.admit(big, want=1)  # 2g.35gb: starts 0 and 2 are the 3g's, 4 is booked
    assert "1g.18gb: hbm (never)" in cert["reason"] and "2g.35gb: mig_placement (now)" in cert["reason"]
    cert = cli.admit(EMBEDDING, want=0)
    assert cert["resource_reservations"][0]["mig_instance"] == "1g.18gb@6"  # 4 and 5 are the 2g's
    cert = cli.admit(EMBEDDING, want=1)
    assert cert["limiting_resource"] == "mig_placement"
    assert "2g.35gb@4" in cert["reason"] and "1g.18gb@6" in cert["reason"]
    assert sorted(r["mig_instance"] for r in cli.reservations() if r["active"]) == ["1g.18gb@6", "2g.35gb@4"]


@pytest.mark.parametrize("profiles", ["1g.18gb, 2g.35gb", "2g.35gb, 1g.18gb"])
def test_the_profile_does_not_depend_on_the_lists_order(cli: Admit, tmp_path: Path, profiles: str) -> None:
    cert = cli.admit(_profile(tmp_path, "big", "20Gi", profiles), want=0)
    assert cert["regime"] == "mig:2g.35gb", cert["regime_chosen_by"]
    assert _finding(cert, "hbm")["verdict"] == "yes"


def test_a_placement_booked_after_the_decisions_read_is_seen_under_the_lock(tmp_path: Path) -> None:
    """Two admissions read the store at the same moment and both find start 4 free; the one that books
    second re-fits under the device's booking lock and takes start 5 (its certificate says so)."""
    from canary._model import utcnow
    from canary.admission import load_request
    from canary.admission.decisions import hard_fit, settle
    from canary.admission.flow import record_admission
    from canary.admission.store import EvidenceAccess
    from evidence_store.database import make_engine

    engine = make_engine(migrated_sqlite(tmp_path / "race.sqlite3"))
    try:
        access = EvidenceAccess.over(engine)
        both = []
        for _ in range(2):  # both read before either books
            req = access.with_mig_bookings(load_request(str(SNAPSHOT), str(EMBEDDING)), utcnow())
            hard = hard_fit(req)
            assert hard.mig_placement is not None and hard.mig_placement.start == 4
            both.append((req, hard, settle(req, hard, []).decision))
        certs = [record_admission(req, hard, decision, [], engine=engine, reserve=True, finished=utcnow())
                 for req, hard, decision in both]
    finally:
        engine.dispose()
    assert [c.verdict for c in certs] == ["admit", "admit"]
    assert [c.resource_reservations[0].mig_instance for c in certs] == ["1g.18gb@4", "1g.18gb@5"]
    placement = next(f for f in certs[1].findings if f.resource == "mig_placement")
    assert placement.placement is not None and placement.placement.start == 5
    assert "1g.18gb@4" in placement.detail
