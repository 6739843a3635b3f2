"""What a nightly warm job and a driver revalidation report, as an operator reads them: a drift event
shows the evidence of its own moment, an aborted probe is not success, evidence about to expire is
due, every row names its pair the same way, and the simulator's re-probes are not replays."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from canary.jobs import warm
from canary.jobs.plan import PlannedPair, load_plan
from canary.policy import load_policy
from evidence_store import warm_queue
from evidence_store.database import make_engine, session_scope
from evidence_store.fleet_models import DriftEvent
from evidence_store.models import Evidence, WarmQueue
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env
from tests.support.stores import migrated_sqlite

PROFILES = EXAMPLES / "profiles"
NEW = "590.10.02"
#: A pair whose probe concludes (unsafe) on the simulator: its records decide, so it can be fresh.
PROBED = {"device": "h100", "candidate": str(PROFILES / "embedding-service.yaml"),
          "residents": [str(PROFILES / "resnet50-training.yaml")]}
#: Stage 1 refuses it at once (no MPS daemon on an idle simulated H100): never probed.
NO_FIT = {"device": "h100", "candidate": str(PROFILES / "etl-transcode.yaml"),
          "residents": [str(PROFILES / "llm-prefill.yaml")], "regime": "mps:40"}
PROBED_LABEL = "embedding-service beside resnet50-training on h100-sxm (timeslice)"


def _plan(tmp_path: Path, *pairs: dict[str, Any], name: str = "p", budget_s: float = 300) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"name": name, "budget_s": budget_s, "pairs": list(pairs)}))
    return str(path)


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.url = migrated_sqlite(tmp_path / "store.sqlite3")
        self.env = cli_env(tmp_path)
        self.capsys, self.monkeypatch = capsys, monkeypatch

    def __call__(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return run_in_process(["--db", self.url, *argv], capsys=self.capsys, monkeypatch=self.monkeypatch,
                              env=self.env)

    def records(self) -> list[Evidence]:
        eng = make_engine(self.url)
        try:
            with session_scope(eng, read_only=True) as s:
                rows = list(s.scalars(select(Evidence).order_by(Evidence.created_at)).all())
                s.expunge_all()
                return rows
        finally:
            eng.dispose()


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(tmp_path, capsys, monkeypatch)


@pytest.mark.slow
def test_a_drift_event_keeps_the_evidence_of_its_moment(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, PROBED)
    assert cli("warm", plan).returncode == 0
    (before,) = cli.records()  # the only record under the old driver when the change is detected
    rv = cli("revalidate", "--driver", NEW, "--device-type", "h100", "--plan", plan, "--json")
    assert rv.returncode == 0, rv.stderr
    (event_id,) = json.loads(rv.stdout)["drift_events"]
    reprobe = [r for r in cli.records() if r.driver_version == NEW]
    assert len(reprobe) == 1

    # later runs write records under both drivers: the old one re-probed (its evidence is stale), the
    # new one re-probed since --expiring-within makes its fresh evidence due
    assert cli("warm", plan, "--fleet", "--run-id", "later").returncode == 0
    assert cli("--sim-driver", NEW, "warm", plan, "--expiring-within", "30d").returncode == 0
    assert len(cli.records()) == 4

    (row,) = json.loads(cli("drift", event_id, "--json").stdout)["pairs"]
    assert (row["old_evidence_id"], row["old_outcome"], row["old_slowdown_pct"]) == (
        before.id, before.outcome, before.resident_slowdown_pct)
    assert (row["new_evidence_id"], row["new_slowdown_pct"]) == (reprobe[0].id, reprobe[0].resident_slowdown_pct)
    assert row["change_pct"] == pytest.approx(reprobe[0].resident_slowdown_pct - before.resident_slowdown_pct)


@pytest.mark.slow
def test_the_drift_list_counts_probed_pairs_and_an_id_prefix_names_an_event(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, PROBED, NO_FIT)
    assert cli("warm", plan).returncode == 0
    # NO_FIT has no record to mark: only PROBED's old driver makes an event, listing both h100 pairs
    rv = cli("revalidate", "--driver", NEW, "--device-type", "h100", "--plan", plan, "--json")
    (event_id,) = json.loads(rv.stdout)["drift_events"]
    (listed,) = json.loads(cli("drift", "--json").stdout)
    assert (listed["probed"], listed["probes"]) == (1, 2)  # one probed, one does not fit
    assert "1/2" in cli("drift").stdout

    by_prefix = cli("drift", event_id[:8], "--json")
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert json.loads(by_prefix.stdout)["id"] == event_id

    eng = make_engine(cli.url)
    try:
        with session_scope(eng) as s:
            for suffix in ("1", "2"):
                s.add(DriftEvent(id=f"abcdef0{suffix}-0000-0000-0000-000000000000", device_id="d", node="n",
                                 device_type="h100-sxm", old_driver="a", new_driver="b",
                                 detected_at=dt.datetime.now(dt.UTC), stale_marked=0, budget=0, probes_json=[]))
    finally:
        eng.dispose()
    ambiguous = cli("drift", "abcdef0")
    assert ambiguous.returncode == 2
    assert "abcdef01-" in ambiguous.stderr and "abcdef02-" in ambiguous.stderr and "Traceback" not in ambiguous.stderr
    assert cli("drift", "ffff").returncode == 2


@pytest.mark.slow
def test_a_reprobe_under_the_new_driver_is_not_the_old_attempt_replayed(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, PROBED)
    assert cli("warm", plan).returncode == 0
    rv = cli("revalidate", "--driver", NEW, "--device-type", "h100", "--plan", plan)
    assert rv.returncode == 0, rv.stderr
    old, new = sorted(cli.records(), key=lambda r: r.created_at)
    # the same seed simulates the same run: equal slowdowns to the last digit were a replay
    assert old.resident_slowdown_pct != new.resident_slowdown_pct
    assert "run-to-run noise" in rv.stdout and "never by the driver" in rv.stdout
    assert warm.driver_seed_offset(NEW) != warm.driver_seed_offset("591.0") != 0
    assert warm.driver_seed_offset(None) == 0


def test_revalidate_says_nothing_of_simulated_probes_when_none_ran(tmp_path: Path, cli: Cli) -> None:
    rv = cli("revalidate", "--driver", NEW, "--device-type", "h100", "--plan", _plan(tmp_path, NO_FIT))
    assert rv.returncode == 0, rv.stderr
    assert "does-not-fit" in rv.stdout and "reported driver" not in rv.stdout


def _aborted(index: int, pair: PlannedPair, **_: Any) -> warm.PairOutcome:
    why = "the resident breaches its SLO alone: p99 836 ms > 800 ms"
    return warm.PairOutcome(index, PROBED_LABEL, "probed", why, outcome="aborted")


def test_an_aborted_probe_is_not_success_and_says_why(tmp_path: Path, cli: Cli,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async def aborts(index: int, pair: PlannedPair, **kw: Any) -> warm.PairOutcome:
        return _aborted(index, pair)

    monkeypatch.setattr(warm, "_warm_one", aborts)
    out = cli("warm", _plan(tmp_path, PROBED))
    assert out.returncode == 3, out.stdout  # docs/jobs.md: evidence still missing, nothing failed
    assert "1: probed (aborted): the resident breaches its SLO alone: p99 836 ms > 800 ms" in out.stdout
    assert "aborted" in out.stderr


@pytest.mark.slow
def test_evidence_about_to_expire_is_due_with_expiring_within(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, PROBED)
    assert cli("warm", plan).returncode == 0
    (record,) = cli.records()
    ttl = record.expires_at - record.created_at
    assert ttl == dt.timedelta(seconds=load_policy("default").evidence_ttl_s)

    fresh = json.loads(cli("warm", plan, "--json").stdout)["pairs"][0]
    assert fresh["status"] == "fresh"
    assert dt.datetime.fromisoformat(fresh["expires_at"]) == record.expires_at.replace(tzinfo=dt.UTC)
    assert fresh["slowdown_pct"] == pytest.approx(record.resident_slowdown_pct)  # the evidence's, not '–'
    table = cli("warm", plan).stdout
    assert f"{record.expires_at:%Y-%m-%d %H:%M}Z" in table and f"{record.resident_slowdown_pct:+.1f}%" in table

    # expires well after an hour: still fresh; within the TTL plus a day: due, probed again
    within_hour = cli("warm", plan, "--expiring-within", "1h", "--json")
    assert json.loads(within_hour.stdout)["pairs"][0]["status"] == "fresh", within_hour.stderr
    due = cli("warm", plan, "--expiring-within", f"{ttl.days + 1}d", "--json")
    assert due.returncode == 0, due.stderr
    assert json.loads(due.stdout)["pairs"][0]["status"] == "probed"
    assert len(cli.records()) == 2


def test_a_probe_start_is_a_line_on_stderr(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    async def aborts(index: int, pair: PlannedPair, **kw: Any) -> warm.PairOutcome:
        await original(index, pair, **{**kw, "deadline": 0.0})  # reports the start, probes nothing
        return _aborted(index, pair)

    original = warm._warm_one
    monkeypatch.setattr(warm, "_warm_one", aborts)
    out = cli("-v", "warm", _plan(tmp_path, PROBED))
    started = [line for line in out.stderr.splitlines() if " probing " in line]
    assert started == [], "a pair skipped for its budget never started a probe"

    monkeypatch.setattr(warm, "_warm_one", original)
    out = cli("-v", "warm", _plan(tmp_path, PROBED, name="q"))
    budget = load_policy("default").budget_for("training")  # resnet50-training's class
    (line,) = [line for line in out.stderr.splitlines() if " probing " in line]
    assert line.startswith("[1/1] probing ") and PROBED_LABEL in line
    assert f"budget up to {budget.max_probe_time_s:g} s" in line and "policy default" in line


def test_rows_without_a_probe_name_the_pair_as_probed_rows_do(tmp_path: Path, cli: Cli) -> None:
    other = {**PROBED, "residents": [str(PROFILES / "llm-prefill.yaml")]}
    out = cli("warm", _plan(tmp_path, PROBED, other), "--budget-s", "0.000001", "--json")
    pairs = json.loads(out.stdout)["pairs"]
    assert [p["status"] for p in pairs] == ["skipped-budget", "skipped-budget"]
    assert [p["label"] for p in pairs] == [PROBED_LABEL, "embedding-service beside llm-prefill on h100-sxm (timeslice)"]

    bad = {**PROBED, "device": str(tmp_path / "gone.yaml")}  # cannot be loaded: named from its files
    assert warm.pair_label(PlannedPair.model_validate_json(json.dumps(bad))) == (
        f"embedding-service beside resnet50-training on {tmp_path / 'gone.yaml'}")


def test_a_leased_row_names_its_pair(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, NO_FIT)
    pairs_json = [p.model_dump(mode="json") for p in load_plan(plan).pairs]
    eng = make_engine(cli.url)
    try:
        with session_scope(eng) as s:
            warm_queue.enqueue(s, run_id="night", pairs=pairs_json, now=dt.datetime.now(dt.UTC))
            warm_queue.claim(s, run_id="night", owner="node-b:77:0", lease_s=900, now=dt.datetime.now(dt.UTC))
    finally:
        eng.dispose()
    out = cli("warm", plan, "--fleet", "--run-id", "night", "--budget-s", "0.5", "--json")
    (pair,) = json.loads(out.stdout)["pairs"]
    assert (pair["status"], pair["label"]) == ("leased", "etl-transcode beside llm-prefill on h100-sxm (mps:40)")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_recover_releases_leases_of_dead_local_holders(tmp_path: Path, cli: Cli) -> None:
    plan = _plan(tmp_path, NO_FIT, {**NO_FIT, "candidate": str(PROFILES / "llm-decode.yaml")},
                 {**NO_FIT, "candidate": str(PROFILES / "embedding-service.yaml")})
    pairs_json = [p.model_dump(mode="json") for p in load_plan(plan).pairs]
    host, dead = socket.gethostname(), _dead_pid()
    owners = [f"{host}:{dead}:0", f"{host}:{os.getpid()}:0", "node-b:77:0"]  # dead here, alive here, elsewhere
    now = dt.datetime.now(dt.UTC)
    eng = make_engine(cli.url)
    try:
        with session_scope(eng) as s:
            warm_queue.enqueue(s, run_id="k9", pairs=pairs_json, now=now)
            for owner in owners:
                assert warm_queue.claim(s, run_id="k9", owner=owner, lease_s=900, now=now) is not None
    finally:
        eng.dispose()

    out = cli("recover")
    assert out.returncode == 0, out.stderr
    assert f"lease of {owners[0]} released" in out.stdout and "1 fleet warm lease(s)" in out.stdout
    eng = make_engine(cli.url)
    try:
        with session_scope(eng, read_only=True) as s:
            rows = s.scalars(select(WarmQueue).where(WarmQueue.run_id == "k9").order_by(WarmQueue.position))
            assert [(r.state, r.owner) for r in rows] == [("queued", None), ("leased", owners[1]),
                                                          ("leased", owners[2])]
    finally:
        eng.dispose()


def test_a_bad_value_in_the_plan_names_the_plan_field(tmp_path: Path, cli: Cli) -> None:
    for key, value in (("policy", "nosuch"), ("regime", "mps:400")):
        plan = _plan(tmp_path, {**PROBED, key: value}, name=key)
        out = cli("warm", plan)
        assert out.returncode == 2
        assert f"{plan}: field 'pairs[0].{key}': pair 1 of the plan: " in out.stderr, out.stderr
        assert "--" not in out.stderr.split("pair 1 of the plan:")[1]
