"""Migrations: the whole chain up and down on both backends, models vs migrated schema (no drift),
file naming, and running from an installed copy of the packages (no repository, no alembic.ini)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from evidence_store.database import make_engine
from evidence_store.metadata import METADATA
from evidence_store.migrate import alembic_config, current, downgrade, head_revisions, migrations_dir, upgrade

REPO = Path(__file__).resolve().parents[2]


def _chain() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def _tables(url: str) -> set[str]:
    eng = make_engine(url)
    try:
        return set(inspect(eng).get_table_names()) - {"alembic_version"}
    finally:
        eng.dispose()


def test_version_files_are_named_by_date_revision_slug() -> None:
    files = sorted(p.name for p in (migrations_dir() / "versions").glob("*.py"))
    assert files, "no migrations found"
    for name in files:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}_[0-9a-f]{12}_[a-z0-9_]+\.py", name), name
    assert len(_chain()) == len(files)


def test_whole_chain_up_and_down(empty_url: str) -> None:
    chain = _chain()
    assert len(chain) >= 2
    seen_tables: list[set[str]] = [_tables(empty_url)]
    assert seen_tables[0] == set()
    for revision in chain:
        upgrade(empty_url, revision)
        assert current(empty_url) == (revision,)
        seen_tables.append(_tables(empty_url))
    assert seen_tables[-1] == set(METADATA.tables)
    for index in range(len(chain) - 1, -1, -1):
        target = chain[index - 1] if index > 0 else "base"
        downgrade(empty_url, target)
        assert _tables(empty_url) == seen_tables[index]
        assert current(empty_url) == ((target,) if target != "base" else ())
    upgrade(empty_url)
    assert current(empty_url) == head_revisions()


def test_models_match_the_migrated_schema(store_url: str) -> None:
    eng = make_engine(store_url)
    try:
        with eng.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, METADATA)
    finally:
        eng.dispose()
    assert diff == []


def test_migrations_run_from_an_installed_copy(tmp_path: Path) -> None:
    # Lay the packages out as an install would (package data only: no alembic.ini, no repo root).
    site = tmp_path / "site"
    for package in ("canary", "evidence_store", "migrations"):
        shutil.copytree(REPO / package, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.ini"))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    url = f"sqlite:///{tmp_path / 'installed.sqlite3'}"
    code = (
        "import migrations, evidence_store.migrate as e\n"
        f"e.upgrade({url!r})\n"
        f"print(migrations.__file__)\nprint(','.join(e.current({url!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    located, revision = out.stdout.strip().splitlines()
    assert located.startswith(str(site))
    assert revision == ",".join(head_revisions())


def test_slowdowns_kept_as_fractions_become_percent(empty_url: str) -> None:
    """``f6b2d8e4a713`` renames the slowdown columns to ``*_pct`` and multiplies the stored values by 100."""
    from sqlalchemy import text

    upgrade(empty_url, "e5a7c9d2b418")
    eng = make_engine(empty_url)
    row = {
        "id": "00000000-0000-4000-8000-0000000000aa", "key_digest": "d" * 64, "resident_version": "r@1",
        "resident_shape_family": "s", "candidate_version": "c@1", "candidate_shape_family": "s",
        "device_type": "H100-SXM5-80GB", "regime": "streams", "probe_id": "p-frac", "source": "canary",
        "outcome": "safe", "resident_slowdown": 0.04, "resident_slowdown_low": 0.02,
        "resident_slowdown_high": 0.06, "candidate_slowdown": None, "samples": 10, "exposure_used": 5,
        "time_used_s": 1.0, "confidence": 0.95, "created_at": "2026-12-01 00:00:00.000000",
        "expires_at": "2026-12-02 00:00:00.000000", "status": "current",
    }
    try:
        with eng.begin() as conn:
            conn.execute(text(f"INSERT INTO evidence ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"),
                         row)
        upgrade(empty_url, "f6b2d8e4a713")
        with eng.connect() as conn:
            got = conn.execute(text("SELECT resident_slowdown_low_pct, resident_slowdown_pct, "
                                    "resident_slowdown_high_pct, candidate_slowdown_pct FROM evidence")).one()
        assert tuple(got[:3]) == (pytest.approx(2.0), pytest.approx(4.0), pytest.approx(6.0))
        assert got[3] is None
        downgrade(empty_url, "e5a7c9d2b418")
        with eng.connect() as conn:
            back = conn.execute(text("SELECT resident_slowdown FROM evidence")).scalar_one()
        assert back == pytest.approx(0.04)
    finally:
        eng.dispose()


def test_history_rows_that_count_several_admissions_become_as_many_rows_on_downgrade(empty_url: str) -> None:
    """``a3e8c1f5d207``: a history row stands for ``requests`` admissions of one writer window; the schema
    before it counts one row per admission, so a downgrade writes a row per admission back."""
    import datetime as dt

    from sqlalchemy import text

    from evidence_store import admission_log
    from evidence_store.database import session_scope

    upgrade(empty_url, "a3e8c1f5d207")
    eng = make_engine(empty_url)
    t0 = dt.datetime(2026, 12, 2, 1, 0, tzinfo=dt.UTC)
    try:
        with session_scope(eng) as s:
            admission_log.log_admissions(s, [
                {"pair_digest": pair, "key_digests": [pair], "device_type": "h100-sxm", "device_id": "x",
                 "label": pair, "verdict": "admit", "request_json": {"n": n}, "now": t0 + dt.timedelta(seconds=n)}
                for n, pair in enumerate(["p", "q", "p", "p", "q"])])
        with eng.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM admission_log")).scalar_one() == 2
        downgrade(empty_url, "9c2d4e6f8a10")
        with eng.connect() as conn:
            rows = conn.execute(text("SELECT pair_digest, request_json, key_digests FROM admission_log")).all()
        import json

        def n_of(value: object) -> int:
            return int((json.loads(value) if isinstance(value, str) else value)["n"])  # type: ignore[arg-type,index]

        assert sorted((p, n_of(r)) for p, r, _ in rows) == [("p", 3), ("p", 3), ("p", 3), ("q", 4), ("q", 4)]
        upgrade(empty_url, "a3e8c1f5d207")
        with eng.connect() as conn:
            assert conn.execute(text("SELECT sum(requests), count(*) FROM admission_log")).one() == (5, 5)
    finally:
        eng.dispose()
