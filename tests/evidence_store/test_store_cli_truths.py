"""What ``canary evidence|db`` say must be true: times with a zone as the messages suggest them, no
file left behind by a command that found no store, a confidence only where one was reached, a
downgrade preview that names its target and only what it removes, a listing's count of what matches,
and the time a record became stale or revoked (kept through the migration, export and import)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from canary.cli import _run, build_parser
from canary.errors import InputError
from evidence_store import database as store_database
from evidence_store.cli_support import parse_time
from evidence_store.database import RetryPolicy, make_engine, session_scope
from evidence_store.evidence import mark_stale, record_evidence
from evidence_store.migrate import alembic_config, current, head_revisions, upgrade
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence
from tests.support.stores import migrated_sqlite

Run = Callable[..., tuple[int, str, str]]
REPO = Path(__file__).resolve().parents[2]
H100 = KEY  # stored under the catalog name h100-sxm
A100 = KEY.__class__(**{**KEY.as_dict(), "device_type": "a100-80gb"})


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setattr(
        store_database, "DEFAULT_RETRY", RetryPolicy(attempts=3, initial_wait_s=0.01, max_wait_s=0.02)
    )
    # Whole rows, whatever width the test runner's environment gives (a worker may set $COLUMNS): the
    # tests read columns by their headers, and a narrow table drops some.
    monkeypatch.delenv("COLUMNS", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = _run(build_parser(modules=("evidence", "reservations", "db")), list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _add(url: str, *records: object) -> list[str]:
    eng = make_engine(url)
    try:
        with session_scope(eng) as session:
            return [record_evidence(session, rec).id for rec in records]  # type: ignore[arg-type]
    finally:
        eng.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path / "cli.sqlite3")


# --- 1. times: a date with a zone is midnight there; what a message suggests is accepted -------------


@pytest.mark.parametrize(
    ("given", "want"),
    [
        pytest.param("2026-12-03Z", datetime(2026, 12, 3, tzinfo=UTC), id="date-Z"),
        pytest.param("2026-12-03z", datetime(2026, 12, 3, tzinfo=UTC), id="date-lower-z"),
        pytest.param("2026-12-03+00:00", datetime(2026, 12, 3, tzinfo=UTC), id="date-utc-offset"),
        # Midnight at +02:00 is 22:00 UTC the day before; fromisoformat read this as 02:00 with no zone.
        pytest.param("2026-12-03+02:00", datetime(2026, 12, 2, 22, tzinfo=UTC), id="date-east"),
        pytest.param("2026-12-03-05:00", datetime(2026, 12, 3, 5, tzinfo=UTC), id="date-west"),
        pytest.param("2026-12-03T06:30:00Z", datetime(2026, 12, 3, 6, 30, tzinfo=UTC), id="time-Z"),
        pytest.param("2026-12-03T06:30+01:00", datetime(2026, 12, 3, 5, 30, tzinfo=UTC), id="time-offset"),
    ],
)
def test_times_with_a_zone_are_read_in_utc(given: str, want: datetime) -> None:
    assert parse_time(given, field="--before") == want


@pytest.mark.parametrize("given", ["2026-12-03", "2026-12-03T06:30", "2026-12-03T06:30:00"])
def test_the_zone_a_refusal_suggests_is_accepted(given: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_time(given, field="--before")
    suggested = re.search(r"e\.g\. (\S+)", str(refused.value))
    assert suggested is not None, str(refused.value)
    assert parse_time(suggested.group(1), field="--before").tzinfo is not None


@pytest.mark.parametrize("given", ["2026-13-03Z", "yesterday", "2026-12-03T25:00Z"])
def test_a_time_that_is_not_one_is_refused_with_an_example(given: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_time(given, field="--before")
    assert "2026-11-30Z" in str(refused.value) and refused.value.field == "--before"


@pytest.mark.parametrize(
    ("before", "would"),
    [
        pytest.param("2026-11-30Z", 0, id="midnight-utc-is-before-06:00"),
        pytest.param("2026-11-30+08:00", 0, id="midnight-at-+08-is-16:00-the-day-before"),
        pytest.param("2026-11-30-08:00", 1, id="midnight-at--08-is-08:00-utc"),
        pytest.param("2026-12-01Z", 1, id="next-day"),
    ],
)
def test_expire_before_a_date_with_a_zone(cli: Run, sqlite_url: str, before: str, would: int) -> None:
    _add(sqlite_url, evidence("p-a", created_at=T0))  # T0 is 2026-11-30T06:00Z
    code, out, err = cli("--db", sqlite_url, "evidence", "expire", "--before", before)
    assert code == 0, err
    assert f"would mark {would} current record(s) created before {before} stale" in out


# --- 2. a command that finds no store creates none --------------------------------------------------


def _export_file(tmp_path: Path, cli: Run) -> Path:
    url = migrated_sqlite(tmp_path / "source.sqlite3")
    _add(url, evidence("p-a", created_at=datetime.now(UTC) - timedelta(hours=1)))
    out = tmp_path / "dump.jsonl"
    code, _, err = cli("--db", url, "evidence", "export", str(out))
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(("evidence", "list"), id="evidence-list"),
        pytest.param(("evidence", "list", "--json"), id="evidence-list-json"),
        pytest.param(("evidence", "show", "abc"), id="evidence-show"),
        pytest.param(("evidence", "certificates", "list"), id="certificates-list"),
        pytest.param(("evidence", "certificates", "show", "abc"), id="certificates-show"),
        pytest.param(("evidence", "expire"), id="expire-preview"),
        pytest.param(("evidence", "expire", "--yes"), id="expire"),
        pytest.param(("evidence", "revoke", "abc", "--why", "x"), id="revoke"),
        pytest.param(("evidence", "export", "{tmp}/out.jsonl"), id="export"),
        pytest.param(("evidence", "import", "{dump}"), id="import"),
        pytest.param(("reservations", "list"), id="reservations-list"),
        pytest.param(("db", "downgrade"), id="downgrade-preview"),
        pytest.param(("db", "downgrade", "base", "--yes"), id="downgrade"),
    ],
)
def test_a_missing_sqlite_store_is_named_and_not_created(cli: Run, tmp_path: Path, argv: tuple[str, ...]) -> None:
    dump = _export_file(tmp_path, cli)
    work = tmp_path / "work"
    work.mkdir()
    typo = work / "typo.sqlite3"
    args = [a.format(tmp=work, dump=dump) for a in argv]
    code, out, err = cli("--db", f"sqlite:///{typo}", *args)
    assert code == 4, (out, err)
    assert f"no store at {typo}" in err and "canary db upgrade" in err, err
    assert sorted(p.name for p in work.iterdir()) == []  # no store file, no export file, no journal


# --- 3. the docs say what a round trip keeps and what it changes ------------------------------------


def test_the_docs_say_an_imported_record_is_marked_not_that_the_round_trip_is_lossless() -> None:
    doc = (REPO / "docs" / "evidence-store.md").read_text()
    section = doc[doc.index("## Export and import"):doc.index("## Reservations")]
    assert "lossless" not in section
    for promise in ("`source` becomes `import`", "`origin`", "`status_changed_at`"):
        assert promise in section, promise


def test_a_round_trip_keeps_every_field_but_source_and_origin(cli: Run, tmp_path: Path) -> None:
    src = migrated_sqlite(tmp_path / "a.sqlite3")
    dst = migrated_sqlite(tmp_path / "b.sqlite3")
    now = datetime.now(UTC)
    ids = _add(src, evidence("p-a", created_at=now - timedelta(hours=2)),
               evidence("p-b", created_at=now - timedelta(hours=1)))
    assert cli("--db", src, "evidence", "revoke", ids[0], "--why", "bad load")[0] == 0
    dump = tmp_path / "dump.jsonl"
    assert cli("--db", src, "evidence", "export", str(dump))[0] == 0
    code, _, err = cli("--db", dst, "evidence", "import", str(dump))
    assert code == 0, err

    def records(url: str) -> dict[str, dict[str, object]]:
        return {r["id"]: r for r in json.loads(cli("--db", url, "evidence", "list", "--json")[1])}

    before, after = records(src), records(dst)
    assert before.keys() == after.keys()
    for record_id, was in before.items():
        now_is = after[record_id]
        assert (was["source"], now_is["source"]) == ("canary", "import")
        assert was["origin"] is None and "exported with source canary" in str(now_is["origin"])
        changed = {k for k in was if was[k] != now_is[k]}
        assert changed == {"source", "origin"}, changed
    assert after[ids[0]]["status_changed_at"] is not None  # the revocation's time travelled with it


# --- 4. a confidence is shown only where one was reached -------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "conf_cell", "show_line"),
    [
        pytest.param("safe", "0.950", "0.950", id="safe"),
        pytest.param("unsafe", "0.950", "0.950", id="unsafe"),
        pytest.param("inconclusive", "-", "none reached: the probe was inconclusive (0.950 was asked)",
                     id="inconclusive"),
        pytest.param("aborted", "-", "none reached: the probe was aborted (0.950 was asked)", id="aborted"),
    ],
)
def test_the_confidence_shown_is_one_the_probe_reached(
    cli: Run, sqlite_url: str, outcome: str, conf_cell: str, show_line: str
) -> None:
    (record_id,) = _add(sqlite_url, evidence("p-a", outcome=outcome, confidence=0.95))
    code, out, _ = cli("--db", sqlite_url, "evidence", "list")
    assert code == 0
    header, row = out.splitlines()[0], out.splitlines()[2]  # a rule under the header
    assert row[header.index("CONF"):].split()[0] == conf_cell, out
    code, out, _ = cli("--db", sqlite_url, "evidence", "show", record_id)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("confidence")]
    assert line.split(None, 1)[1].strip() == show_line


# --- 5. a downgrade preview names where it goes and only what that removes -------------------------


def _previous(revision: str) -> str:
    script = ScriptDirectory.from_config(alembic_config())
    down = script.get_revision(revision).down_revision  # type: ignore[union-attr]
    assert isinstance(down, str)
    return down


def test_the_downgrade_preview_names_its_target_and_what_that_step_drops(cli: Run, store_url: str) -> None:
    (head,) = head_revisions()
    ids = _add(store_url, evidence("p-a"), evidence("p-b", created_at=T0 + timedelta(hours=1)))
    code, _, err = cli("--db", store_url, "evidence", "revoke", ids[0], "--why", "x")
    assert code == 0, err
    code, out, err = cli("--db", store_url, "db", "downgrade")
    assert code == 0, err
    previous = _previous(head)
    assert f"from revision {head} down to {previous}" in out
    assert "to -1" not in out
    assert current(store_url) == (head,)  # a preview changes nothing
    if head == "fa1f2187b9d5":  # this step adds evidence.status_changed_at: one of the two rows has one
        assert "drops column(s) evidence.status_changed_at (1 row(s) with a value)" in out
    # Only what the step touches: no other table is named with its rows.
    assert re.findall(r"([a-z_]+) \(\d+ row\(s\)\)", out) == []  # the step drops no table
    assert "certificates" not in out and "reservations" not in out and "probe_journal" not in out


def test_the_preview_to_base_counts_the_rows_each_table_holds(cli: Run, store_url: str) -> None:
    _add(store_url, evidence("p-a"), evidence("p-b", created_at=T0 + timedelta(hours=1)))
    code, out, err = cli("--db", store_url, "db", "downgrade", "base")
    assert code == 0, err
    assert "down to base (no tables)" in out
    assert "evidence (2 row(s))" in out and "reservations (0 row(s))" in out
    assert current(store_url) == head_revisions()


# --- 6. a limited listing says how many match, and how many it shows -------------------------------


@pytest.mark.parametrize(
    ("argv", "trailer"),
    [
        pytest.param(("--device-type", "h100", "--limit", "2"),
                     "(first 2 shown; 3 records match these filters; --limit 0 shows all)", id="filtered"),
        pytest.param(("--limit", "2"), "(first 2 shown; 5 records in the store; --limit 0 shows all)", id="all"),
        pytest.param(("--device-type", "h100", "--limit", "3"), None, id="limit-equals-matches"),
        pytest.param(("--status", "current", "--device-type", "a100-80gb", "--limit", "1"),
                     "(first 1 shown; 2 records match these filters; --limit 0 shows all)", id="two-filters"),
    ],
)
def test_a_limited_listing_counts_what_matches(
    cli: Run, sqlite_url: str, argv: tuple[str, ...], trailer: str | None
) -> None:
    _add(sqlite_url, *(evidence(f"h-{i}", key=H100, created_at=T0 + timedelta(minutes=i)) for i in range(3)),
         *(evidence(f"a-{i}", key=A100, created_at=T0 + timedelta(minutes=i)) for i in range(2)))
    code, out, err = cli("--db", sqlite_url, "evidence", "list", *argv)
    assert code == 0, err
    last = out.splitlines()[-1]
    if trailer is None:
        assert "shown" not in out
    else:
        assert last == trailer


# --- 7. when a record became stale or revoked -------------------------------------------------------


def _status_times(url: str) -> dict[str, datetime | None]:
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            rows = conn.execute(text("SELECT probe_id, status_changed_at FROM evidence")).all()
    finally:
        eng.dispose()
    from evidence_store.models import UTCDateTime

    reader = UTCDateTime().process_result_value
    out: dict[str, datetime | None] = {}
    for probe_id, value in rows:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        out[probe_id] = reader(value, None)  # type: ignore[arg-type]
    return out


def test_revoke_and_expire_record_when_the_status_changed(cli: Run, store_url: str) -> None:
    ids = _add(store_url, evidence("p-a"), evidence("p-b", created_at=T0 + timedelta(hours=1)),
               evidence("p-c", created_at=T0 + timedelta(hours=2)))
    start = datetime.now(UTC) - timedelta(seconds=1)
    assert cli("--db", store_url, "evidence", "revoke", ids[0], "--why", "bad load")[0] == 0
    code, _, err = cli("--db", store_url, "evidence", "expire", "--before", "2026-11-30T07:30:00Z", "--yes")
    assert code == 0, err
    end = datetime.now(UTC) + timedelta(seconds=1)
    times = _status_times(store_url)
    assert times["p-c"] is None  # still current
    for probe_id in ("p-a", "p-b"):
        when = times[probe_id]
        assert when is not None and start <= when <= end, (probe_id, when)

    code, out, _ = cli("--db", store_url, "evidence", "show", ids[0], "--json")
    shown = json.loads(out)["evidence"]
    assert shown["status"] == "revoked"
    assert datetime.fromisoformat(shown["status_changed_at"]) == times["p-a"]
    code, out, _ = cli("--db", store_url, "evidence", "show", ids[0])
    (line,) = [ln for ln in out.splitlines() if ln.startswith("status changed")]
    assert times["p-a"] is not None
    assert line.split(None, 2)[2].strip() == times["p-a"].strftime("%Y-%m-%d %H:%M:%SZ")
    code, out, _ = cli("--db", store_url, "evidence", "show", ids[2])
    (line,) = [ln for ln in out.splitlines() if ln.startswith("status changed")]
    assert line.split(None, 2)[2].strip() == "-"


def test_a_driver_change_records_the_time_from_the_store_clock_or_the_callers(store_url: str) -> None:
    _add(store_url, evidence("p-old", driver_version="535.0"), evidence("p-given", driver_version="536.0",
                                                                          key=A100))
    start = datetime.now(UTC) - timedelta(seconds=2)
    eng = make_engine(store_url)
    given = datetime(2026, 12, 1, 12, 0, 0, 123000, tzinfo=UTC)
    try:
        with session_scope(eng) as session:
            assert mark_stale(session, driver_not="550.54.15", device_type="h100-sxm") == 1
        with session_scope(eng) as session:
            assert mark_stale(session, driver_not="550.54.15", device_type="a100-80gb", now=given) == 1
    finally:
        eng.dispose()
    end = datetime.now(UTC) + timedelta(seconds=2)
    times = _status_times(store_url)
    assert times["p-old"] is not None and start <= times["p-old"] <= end
    assert times["p-given"] == given


def test_an_import_of_a_current_record_with_a_status_time_is_refused(cli: Run, tmp_path: Path) -> None:
    dump = _export_file(tmp_path, cli)
    lines = dump.read_text().splitlines()
    record = json.loads(lines[1])
    record["status_changed_at"] = "2026-12-01T00:00:00Z"
    dump.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
    url = migrated_sqlite(tmp_path / "dst.sqlite3")
    code, _, err = cli("--db", url, "evidence", "import", str(dump))
    assert code == 2 and "status_changed_at" in err and "line 2" in err, err


@pytest.fixture
def pre_status_time_store(empty_url: str) -> Iterator[str]:
    """A store at the revision before ``status_changed_at`` holding a revoked and a current record."""
    previous = _previous("fa1f2187b9d5")
    upgrade(empty_url, previous)
    eng = make_engine(empty_url)
    try:
        with session_scope(eng) as session:
            for n, probe_id in enumerate(("p-revoked", "p-current")):
                rec = evidence(probe_id, created_at=T0 + timedelta(hours=n))
                values = {
                    "id": f"00000000-0000-0000-0000-00000000000{n}", "key_digest": rec.key.digest(),
                    **{f: getattr(rec.key, f) for f in ("resident_version", "resident_shape_family",
                                                        "candidate_version", "candidate_shape_family",
                                                        "device_type", "regime")},
                    "probe_id": probe_id, "source": "canary", "outcome": "safe", "samples": 1,
                    "exposure_used": 1, "time_used_s": 1.0, "created_at": rec.created_at,
                    "expires_at": rec.expires_at,
                    "status": "revoked" if probe_id == "p-revoked" else "current",
                    "revoked_reason": "old" if probe_id == "p-revoked" else None,
                }
                columns = ", ".join(values)
                params = ", ".join(f":{k}" for k in values)
                if eng.dialect.name == "sqlite":
                    for k in ("created_at", "expires_at"):
                        values[k] = values[k].replace(tzinfo=None)  # type: ignore[attr-defined]
                session.execute(text(f"INSERT INTO evidence ({columns}) VALUES ({params})"), values)
    finally:
        eng.dispose()
    yield empty_url


def test_the_migration_keeps_old_rows_unknown_and_goes_down_again(cli: Run, pre_status_time_store: str) -> None:
    url = pre_status_time_store
    upgrade(url)
    assert _status_times(url) == {"p-revoked": None, "p-current": None}  # never guessed
    code, out, err = cli("--db", url, "evidence", "list", "--json")
    assert code == 0, err
    revoked = next(r for r in json.loads(out) if r["probe_id"] == "p-revoked")
    assert revoked["status_changed_at"] is None
    code, out, _ = cli("--db", url, "evidence", "show", revoked["id"])
    (line,) = [ln for ln in out.splitlines() if ln.startswith("status changed")]
    assert "unknown (before" in line
    from evidence_store.migrate import downgrade

    downgrade(url, _previous("fa1f2187b9d5"))
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("evidence")}
            rows = conn.execute(text("SELECT probe_id, status FROM evidence ORDER BY probe_id")).all()
    finally:
        eng.dispose()
    assert "status_changed_at" not in columns
    assert [tuple(r) for r in rows] == [("p-current", "current"), ("p-revoked", "revoked")]
