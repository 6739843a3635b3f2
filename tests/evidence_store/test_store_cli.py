"""``canary db|evidence|reservations`` end to end on a real store: tables and JSON, export/import with
every kind of bad file, an old schema, an unreachable database."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from canary.cli import _run, build_parser
from evidence_store import database as store_database
from evidence_store.database import RetryPolicy, make_engine, session_scope
from evidence_store.evidence import record_evidence
from evidence_store.migrate import alembic_config, head_revisions, upgrade
from evidence_store.reservations import reserve
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence
from tests.support.helpers import free_port
from tests.support.stores import migrated_sqlite

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setattr(
        store_database, "DEFAULT_RETRY", RetryPolicy(attempts=3, initial_wait_s=0.01, max_wait_s=0.02)
    )
    # Whole rows, whatever width the test runner's environment gives (a worker may set $COLUMNS): the
    # tests read columns by their headers, and a narrow table drops some.
    monkeypatch.delenv("COLUMNS", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        parser = build_parser(modules=("evidence", "reservations", "db"))
        code = _run(parser, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path / "cli.sqlite3")


def _fill(url: str) -> list[str]:
    eng = make_engine(url)
    try:
        with session_scope(eng) as session:
            ids = [
                record_evidence(session, evidence("p-a", created_at=T0)).id,
                record_evidence(
                    session, evidence("p-b", created_at=T0 + timedelta(hours=1), outcome="unsafe")
                ).id,
                record_evidence(
                    session,
                    evidence(
                        "p-c",
                        key=KEY.__class__(**{**KEY.as_dict(), "device_type": "a100-80gb"}),
                        created_at=T0,
                    ),
                ).id,
            ]
            reserve(
                session,
                device_id="GPU-1",
                holder="admit-7",
                memory_bytes=2**33,
                capacity_memory_bytes=2**36,
                lease_s=10**9,
                now=T0,
            )
        return ids
    finally:
        eng.dispose()


def test_db_cycle_on_both_backends(cli: Run, empty_url: str) -> None:
    code, out, _ = cli("--db", empty_url, "db", "current")
    assert code == 0 and "no schema" in out
    code, out, _ = cli("--db", empty_url, "db", "upgrade")
    assert code == 0 and "(head)" in out
    code, out, _ = cli("--db", empty_url, "db", "downgrade")  # a preview, not an error
    assert code == 0 and "would migrate" in out and "--yes" in out
    (head,) = head_revisions()
    one_down = ScriptDirectory.from_config(alembic_config()).get_revision(head).down_revision  # type: ignore[union-attr]
    assert f"down to {one_down}," in out  # the revision it goes to, not "-1"
    code, out, _ = cli("--db", empty_url, "db", "current")
    assert "(head)" in out  # asking changed nothing
    code, out, _ = cli("--db", empty_url, "db", "downgrade", "--yes")
    assert code == 0 and "not at head" in out
    code, _, err = cli("--db", empty_url, "evidence", "list")
    assert code == 4 and "run canary db upgrade" in err
    code, _, err = cli("--db", empty_url, "reservations", "list")
    assert code == 4 and "run canary db upgrade" in err
    code, out, _ = cli("--db", empty_url, "db", "upgrade")
    assert code == 0 and "(head)" in out


def test_unreachable_database_is_exit_4_without_password(cli: Run) -> None:
    port = free_port()  # nothing listens there, and no other test is given it
    code, _, err = cli("--db", f"postgresql://canary:topsecret@127.0.0.1:{port}/evidence", "evidence", "list")
    assert code == 4
    assert f"127.0.0.1:{port}/evidence" in err and "topsecret" not in err
    assert "after 3 attempts" in err
    assert "Traceback" not in err


def test_list_show_and_filters(cli: Run, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whole rows, as a pipe gets them: a $COLUMNS left by the test runner's environment must not cut them.
    monkeypatch.delenv("COLUMNS", raising=False)
    a, b, _ = _fill(sqlite_url)
    code, out, _ = cli("--db", sqlite_url, "evidence", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("ID") and len(lines) == 2 + 3
    assert b[:8] in lines[2]  # newest first
    code, out, _ = cli("--db", sqlite_url, "evidence", "list", "--device-type", "a100-80gb", "--json")
    assert code == 0 and [r["probe_id"] for r in json.loads(out)] == ["p-c"]
    pair = f"{KEY.resident_version}:{KEY.candidate_version}"
    code, out, _ = cli(
        "--db", sqlite_url, "evidence", "list", "--pair", pair, "--status", "current", "--json"
    )
    assert sorted(r["probe_id"] for r in json.loads(out)) == ["p-a", "p-b", "p-c"]
    code, out, _ = cli("--db", sqlite_url, "evidence", "show", a[:8])
    assert code == 0 and f"id                  {a}" in out and "history of this pair (2 record(s)" in out
    code, out, _ = cli("--db", sqlite_url, "evidence", "show", a, "--json")
    shown = json.loads(out)
    assert shown["evidence"]["id"] == a and [r["id"] for r in shown["history"]] == [b, a]
    code, _, err = cli("--db", sqlite_url, "evidence", "show", "zzzz")
    assert code == 2 and "no evidence with id 'zzzz'" in err


def test_expire_and_revoke(cli: Run, sqlite_url: str) -> None:
    _, b, _ = _fill(sqlite_url)
    code, _, err = cli("--db", sqlite_url, "evidence", "expire", "--before", "2026-11-30T06:30:00")
    assert code == 2 and "no time zone" in err and "--before" in err
    code, out, _ = cli("--db", sqlite_url, "evidence", "expire", "--before", "2026-11-30T06:30:00Z")  # a preview
    assert code == 0 and "would mark 2 current record(s)" in out and "--yes" in out
    code, out, _ = cli("--db", sqlite_url, "evidence", "expire", "--before", "2026-11-30T06:30:00Z", "--yes")
    assert code == 0 and out.startswith("2 record(s)")
    code, out, _ = cli("--db", sqlite_url, "evidence", "revoke", b, "--why", "load generator misconfigured")
    assert code == 0 and b in out
    code, out, _ = cli("--db", sqlite_url, "evidence", "list", "--status", "revoked", "--json")
    assert [(r["id"], r["revoked_reason"]) for r in json.loads(out)] == [(b, "load generator misconfigured")]
    code, out, _ = cli("--db", sqlite_url, "evidence", "list", "--status", "current")
    assert out == "no evidence matches --status current\n"


def test_export_import_round_trip_and_conflicts(cli: Run, sqlite_url: str, tmp_path: Path) -> None:
    ids = _fill(sqlite_url)
    cli("--db", sqlite_url, "evidence", "revoke", ids[0], "--why", "bad run")
    dump = tmp_path / "evidence.jsonl"
    code, out, _ = cli("--db", sqlite_url, "evidence", "export", str(dump))
    assert code == 0 and "exported 3" in out
    lines = dump.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "canary-evidence", "version": 3}

    target = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    upgrade(target)
    code, out, _ = cli("--db", target, "evidence", "import", str(dump))
    assert code == 0 and "imported 3" in out
    code, out, _ = cli("--db", target, "evidence", "list", "--json")
    _, source_out, _ = cli("--db", sqlite_url, "evidence", "list", "--json")
    imported, exported = json.loads(out), json.loads(source_out)
    for rec, original in zip(imported, exported, strict=True):  # marked imported, with where it came from
        assert rec.pop("source") == "import" and original.pop("source") != "import"
        assert f"file {dump.name} imported" in rec.pop("origin") and original.pop("origin") is None
    assert imported == exported  # otherwise lossless, statuses and chain included
    code, out, _ = cli("--db", target, "evidence", "import", str(dump))
    assert code == 0 and "imported 0" in out and "3 already present" in out

    changed = json.loads(lines[2])
    changed["outcome"] = "safe" if changed["outcome"] == "unsafe" else "unsafe"
    fresh = evidence("p-new").model_dump(mode="json") | {"id": "00000000-0000-4000-8000-000000000001"}
    fresh |= {"key_digest": KEY.digest(), "status": "current"}
    conflicting = tmp_path / "conflict.jsonl"
    conflicting.write_text("\n".join([lines[0], json.dumps(fresh), json.dumps(changed)]) + "\n")
    code, _, err = cli("--db", target, "evidence", "import", str(conflicting))
    assert code == 2
    assert str(conflicting) in err and "line 3" in err and "'outcome'" in err and "nothing imported" in err
    code, out, _ = cli("--db", target, "evidence", "list", "--json")
    assert "p-new" not in {r["probe_id"] for r in json.loads(out)}  # all or nothing


GOOD_HEADER = '{"format":"canary-evidence","version":2}'


def _record_line(**changes: object) -> str:
    data = evidence("p-x").model_dump(mode="json") | {
        "id": "00000000-0000-4000-8000-000000000002",
        "key_digest": KEY.digest(),
        "status": "current",
    }
    data.update(changes)
    return json.dumps(data)


BAD_FILES: list[tuple[str, str, list[str]]] = [
    ("empty", "", ["line 1", "empty file"]),
    ("header not JSON", "canary evidence\n", ["line 1", "header is not JSON"]),
    ("wrong format", '{"format":"other","version":1}\n', ["line 1", "field 'format'"]),
    ("wrong version", '{"format":"canary-evidence","version":4}\n', ["line 1", "field 'version'"]),
    ("record not JSON", GOOD_HEADER + "\n" + _record_line() + "\n{oops\n", ["line 3", "not JSON"]),
    ("bad outcome", GOOD_HEADER + "\n" + _record_line(outcome="maybe") + "\n", ["line 2", "field 'outcome'"]),
    (
        "naive timestamp",
        GOOD_HEADER + "\n" + _record_line(created_at="2026-11-30T06:00:00") + "\n",
        ["line 2", "field 'created_at'"],
    ),
    (
        "bad key part",
        GOOD_HEADER + "\n" + _record_line(key={**KEY.as_dict(), "regime": ""}) + "\n",
        ["line 2", "field 'key.regime'"],
    ),
    ("missing field", GOOD_HEADER + "\n" + json.dumps({"probe_id": "p"}) + "\n", ["line 2", "field '"]),
    ("blank line", GOOD_HEADER + "\n\n" + _record_line() + "\n", ["line 2", "blank line"]),
]


@pytest.mark.parametrize(("content", "expected"), [pytest.param(c, e, id=n) for n, c, e in BAD_FILES])
def test_bad_import_files_are_exit_2_naming_file_line_field(
    cli: Run, sqlite_url: str, tmp_path: Path, content: str, expected: list[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    code, _, err = cli("--db", sqlite_url, "evidence", "import", str(path))
    assert code == 2, err
    assert str(path) in err
    for fragment in expected:
        assert fragment in err
    assert "Traceback" not in err
    code, out, _ = cli("--db", sqlite_url, "evidence", "list")
    assert out == "no evidence in the store\n"


def test_version_1_files_are_read_with_their_fractions_as_percent(cli: Run, sqlite_url: str, tmp_path: Path) -> None:
    """Exports written before the store kept percent (version 1: fractions, no ``_pct``) still import."""
    line = json.loads(_record_line())
    for name in ("resident_slowdown", "resident_slowdown_low", "resident_slowdown_high", "candidate_slowdown"):
        line.pop(f"{name}_pct")
    line |= {"resident_slowdown": 0.04, "resident_slowdown_low": 0.02, "resident_slowdown_high": 0.06,
             "candidate_slowdown": None}
    old = tmp_path / "v1.jsonl"
    old.write_text('{"format":"canary-evidence","version":1}\n' + json.dumps(line) + "\n")
    code, out, err = cli("--db", sqlite_url, "evidence", "import", str(old))
    assert code == 0 and "imported 1" in out, err
    code, out, _ = cli("--db", sqlite_url, "evidence", "list", "--json")
    (rec,) = json.loads(out)
    assert (rec["resident_slowdown_low_pct"], rec["resident_slowdown_pct"], rec["resident_slowdown_high_pct"]) == (
        pytest.approx(2.0), pytest.approx(4.0), pytest.approx(6.0))
    assert rec["candidate_slowdown_pct"] is None
    # A version-2 file with the old field names is refused, naming the field: the version says the unit.
    wrong = tmp_path / "v2-old-names.jsonl"
    wrong.write_text(GOOD_HEADER + "\n" + json.dumps(line) + "\n")
    code, _, err = cli("--db", sqlite_url, "evidence", "import", str(wrong))
    assert code == 2 and "line 2" in err and "resident_slowdown" in err


def test_import_of_a_missing_file_names_it(cli: Run, sqlite_url: str, tmp_path: Path) -> None:
    code, _, err = cli("--db", sqlite_url, "evidence", "import", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "nope.jsonl" in err and "file not found" in err


def test_reservations_list_and_release(cli: Run, sqlite_url: str) -> None:
    _fill(sqlite_url)
    code, out, _ = cli("--db", sqlite_url, "reservations", "list", "--json")
    (booking,) = json.loads(out)
    assert booking["device_id"] == "GPU-1" and booking["memory_bytes"] == 2**33 and booking["active"]
    code, out, _ = cli("--db", sqlite_url, "reservations", "list", "--device", "GPU-1")
    assert "admit-7" in out and "8.00" in out and "active" in out
    code, out, _ = cli("--db", sqlite_url, "reservations", "release", booking["id"][:8])
    assert code == 0 and booking["id"] in out
    code, out, _ = cli("--db", sqlite_url, "reservations", "list")
    assert out == "no active reservations\n"
    code, out, _ = cli("--db", sqlite_url, "reservations", "list", "--all")
    assert "released" in out
    code, _, err = cli("--db", sqlite_url, "reservations", "release", "ffff")
    assert code == 2 and "no reservation" in err
