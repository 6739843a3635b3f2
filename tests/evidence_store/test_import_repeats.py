"""An import file that holds one record twice, two records of one probe, or one id for two probes is
refused with both line numbers, nothing imported. One id for two probes reached the database, which
answered with its own words (``UNIQUE constraint failed: evidence.id``); an exact repeat was reported
as a conflict on 'probe_id' although no field differed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from canary.cli import _run, build_parser
from tests.evidence_store.evidence_store_testkit import KEY, evidence
from tests.support.paths import canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

HEADER = '{"format":"canary-evidence","version":2}'
ID_1 = "00000000-0000-4000-8000-000000000001"
ID_2 = "00000000-0000-4000-8000-000000000002"

Run = Callable[..., tuple[int, str, str]]


def _line(probe_id: str, record_id: str, **changes: object) -> str:
    data = evidence(probe_id).model_dump(mode="json") | {"id": record_id, "key_digest": KEY.digest(),
                                                          "status": "current"}
    return json.dumps(data | changes)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*argv: str) -> tuple[int, str, str]:
        code = _run(build_parser(modules=("evidence",)), list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize(("lines", "expected"), [
    pytest.param([_line("p-a", ID_1), _line("p-b", ID_2), _line("p-a", ID_1)],
                 "line 4 repeats line 2 (probe id 'p-a')", id="exact-repeat"),
    pytest.param([_line("p-a", ID_1), _line("p-a", ID_1, outcome="unsafe")],
                 "line 3: probe id 'p-a' is also at line 2, with another 'outcome' (line 2: 'safe', line 3: 'unsafe')",
                 id="one-probe-two-records"),
    pytest.param([_line("p-a", ID_1), _line("p-b", ID_2), _line("p-c", ID_1)],
                 f"line 4: id '{ID_1}' is also at line 2, for another probe (line 2: probe id 'p-a', "
                 "line 4: probe id 'p-c')", id="one-id-two-probes"),
])
def test_repeats_within_the_file_name_both_lines(cli: Run, tmp_path: Path, lines: list[str], expected: str) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    code, out, err = cli("--db", url, "evidence", "import", str(path))
    assert code == 2, out + err
    assert f"{path}: 1 conflict(s) within the file; nothing imported" in err
    assert expected in err
    assert "conflicts on field" not in err and "UNIQUE" not in err and "Traceback" not in err
    code, out, _ = cli("--db", url, "evidence", "list")
    assert out == "no evidence in the store\n"


def test_one_id_for_two_probes_through_the_installed_script(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    path = tmp_path / "t_dupid.jsonl"
    path.write_text("\n".join([HEADER, _line("p-a", ID_1), _line("p-b", ID_1)]) + "\n")
    out = subprocess.run([*canary_cmd(), "--db", url, "evidence", "import", str(path)], capture_output=True,
                         text=True, timeout=60, env=cli_env(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert f"line 3: id '{ID_1}' is also at line 2, for another probe" in out.stderr
    assert "refused the write" not in out.stderr and "Traceback" not in out.stderr
