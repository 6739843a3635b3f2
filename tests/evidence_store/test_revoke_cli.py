"""``canary evidence revoke`` on a record already revoked says so and changes nothing (exit 0, the
first reason kept); it printed ``revoked ID`` as if it had revoked it now, with the new reason silently
dropped."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from tests.evidence_store.evidence_store_testkit import T0, evidence
from tests.support.paths import canary_cmd, cli_env
from tests.support.stores import migrated_sqlite


def _store_with_one_record(tmp_path: Path) -> tuple[str, str]:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    eng = make_engine(url)
    try:
        with session_scope(eng) as session:
            record_id = record_evidence(session, evidence("p-a", created_at=T0)).id
    finally:
        eng.dispose()
    return url, record_id


def _canary(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*canary_cmd(), *args], capture_output=True, text=True, timeout=60, env=cli_env(tmp_path))


def test_revoking_a_revoked_record_says_so_and_keeps_the_first_reason(tmp_path: Path) -> None:
    url, record_id = _store_with_one_record(tmp_path)
    first = _canary(tmp_path, "--db", url, "evidence", "revoke", record_id[:8], "--why", "load generator broken")
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"revoked {record_id}\n"

    listed = _canary(tmp_path, "--db", url, "evidence", "list", "--json")
    (record,) = json.loads(listed.stdout)
    assert (record["status"], record["revoked_reason"]) == ("revoked", "load generator broken")
    # The time of the first revocation, as the tables show times (UTC, whole seconds).
    when = datetime.fromisoformat(record["status_changed_at"]).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")

    again = _canary(tmp_path, "--db", url, "evidence", "revoke", record_id[:8], "--why", "other")
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        f"{record_id} was already revoked at {when} (why: 'load generator broken'); nothing changed: "
        "the reason given now ('other') is not recorded\n"
    )
    same = _canary(tmp_path, "--db", url, "evidence", "revoke", record_id, "--why", "load generator broken")
    assert same.stdout == (
        f"{record_id} was already revoked at {when} (why: 'load generator broken'); nothing changed\n"
    )
    relisted = _canary(tmp_path, "--db", url, "evidence", "list", "--json")
    assert json.loads(relisted.stdout) == [record]  # the first reason and time stay


def test_a_blank_reason_is_refused_naming_the_option(tmp_path: Path) -> None:
    url, record_id = _store_with_one_record(tmp_path)
    out = _canary(tmp_path, "--db", url, "evidence", "revoke", record_id, "--why", "  ")
    assert out.returncode == 2 and "field '--why'" in out.stderr and "Traceback" not in out.stderr
    listed = _canary(tmp_path, "--db", url, "evidence", "list", "--json")
    assert [r["status"] for r in json.loads(listed.stdout)] == ["current"]
