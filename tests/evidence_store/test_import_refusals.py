"""``canary evidence import`` refuses what docs/security.md says it refuses, the whole file at once: a key
written twice in one mapping, a number that is not a JSON number, a device type the catalog lacks, a
regime canary cannot read, a reason that does not belong to the record's status. Each is exit 2 naming
the file, the line and the field, and nothing is stored. The export format is version 3 (records carry
``status_changed_at``); versions 2 and 1 are still read."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from canary._model import PairKey
from canary.cli import _run, build_parser
from evidence_store.database import make_engine, session_scope
from evidence_store.export_file import write_export
from evidence_store.models import Evidence
from evidence_store.schemas import EvidenceOut
from tests.evidence_store.evidence_store_testkit import KEY, evidence
from tests.support.stores import migrated_sqlite

Run = Callable[..., tuple[int, str, str]]
HEADER = '{"format": "canary-evidence", "version": 3}'


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*argv: str) -> tuple[int, str, str]:
        code = _run(build_parser(modules=("evidence", "db")), list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path / "target.sqlite3")


def _stored(url: str) -> int:
    engine = make_engine(url)
    try:
        with session_scope(engine, read_only=True) as session:
            return int(session.scalar(select(func.count()).select_from(Evidence)) or 0)
    finally:
        engine.dispose()


def _record(probe_id: str = "remote-1", **fields: object) -> dict[str, object]:
    """A record as an export file carries it (JSON values), with ``fields`` replaced; the key digest follows
    the key, so a changed key part is refused for that part and not as a tampered digest."""
    rec = EvidenceOut.model_validate(
        evidence(probe_id).model_dump() | {"id": str(uuid.uuid4()), "key_digest": KEY.digest(), "status": "current"}
    ).model_dump(mode="json")
    key_parts = fields.pop("key", None)
    if isinstance(key_parts, dict):
        rec["key"] = {**rec["key"], **key_parts}  # type: ignore[dict-item]
        rec["key_digest"] = PairKey.from_dict(rec["key"]).digest()  # type: ignore[arg-type]
    return rec | fields


def _line(rec: dict[str, object]) -> str:
    return json.dumps(rec, sort_keys=True)


def _with_extra(line: str, text: str) -> str:
    """``line`` (a JSON object) with ``text`` added before its closing brace: a key written twice."""
    assert line.endswith("}")
    return line[:-1] + ", " + text + "}"


def _file(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join((header, *lines)) + "\n")
    return path


GOOD = _line(_record("good-1"))

REFUSED = [
    # A key written twice: the last one would have won.
    pytest.param([_with_extra(_line(_record(outcome="unsafe")), '"outcome": "safe"')], HEADER, 2, "outcome",
                 id="duplicate-outcome"),
    pytest.param([_with_extra(_line(_record()), '"resident_slowdown_pct": 1.0')], HEADER, 2,
                 "resident_slowdown_pct", id="duplicate-slowdown"),
    pytest.param([_line(_record()).replace('"regime": "mps:50"', '"regime": "mps:50", "regime": "mps:50"')],
                 HEADER, 2, "regime", id="duplicate-inside-the-key"),
    pytest.param([GOOD], '{"format": "canary-evidence", "version": 3, "version": 1}', 1, "version",
                 id="duplicate-header-version"),
    # Numbers are JSON numbers; a boolean is not one.
    pytest.param([_line(_record(confidence="0.9"))], HEADER, 2, "confidence", id="confidence-as-string"),
    pytest.param([_line(_record(exposure_used=True))], HEADER, 2, "exposure_used", id="exposure-as-boolean"),
    pytest.param([_line(_record(samples=True))], HEADER, 2, "samples", id="samples-as-boolean"),
    pytest.param([_line(_record(time_used_s="12"))], HEADER, 2, "time_used_s", id="time-as-string"),
    pytest.param([_line(_record(resident_slowdown_pct="4.0"))], HEADER, 2, "resident_slowdown_pct",
                 id="slowdown-as-string"),
    pytest.param([GOOD, _line(_record("remote-2", samples=200.5))], HEADER, 3, "samples",
                 id="fraction-for-a-count-on-line-3"),
    # The key: a device of the catalog by its catalog name, a regime canary reads.
    pytest.param([_line(_record(key={"device_type": "http://evil.example.com/"}))], HEADER, 2,
                 "key.device_type", id="device-not-in-catalog"),
    pytest.param([_line(_record(key={"device_type": "h100"}))], HEADER, 2, "key.device_type",
                 id="device-alias-not-the-catalog-name"),
    pytest.param([_line(_record(key={"regime": "mps:500"}))], HEADER, 2, "key.regime", id="mps-over-100"),
    pytest.param([_line(_record(key={"regime": "sideways"}))], HEADER, 2, "key.regime", id="no-such-regime"),
    pytest.param([_line(_record(key={"regime": "MPS:50"}))], HEADER, 2, "key.regime", id="regime-not-canonical"),
    pytest.param([_line(_record(key={"regime": "mig:9g.999gb"}))], HEADER, 2, "key.regime",
                 id="mig-profile-the-device-lacks"),
    # A reason belongs to its status.
    pytest.param([_line(_record(revoked_reason="x"))], HEADER, 2, "revoked_reason", id="current-with-revoked-reason"),
    pytest.param([_line(_record(stale_reason="x"))], HEADER, 2, "stale_reason", id="current-with-stale-reason"),
    pytest.param([_line(_record(status="stale", stale_reason="old", revoked_reason="x",
                                status_changed_at="2026-12-01T00:00:00Z"))], HEADER, 2, "revoked_reason",
                 id="stale-with-revoked-reason"),
]


@pytest.mark.parametrize(("lines", "header", "line", "field"), REFUSED)
def test_refused_with_file_line_and_field_and_nothing_stored(
    cli: Run, store_url: str, tmp_path: Path, lines: list[str], header: str, line: int, field: str
) -> None:
    path = _file(tmp_path, *lines, header=header)
    code, out, err = cli("--db", store_url, "evidence", "import", str(path))
    assert code == 2, (out, err)
    assert str(path) in err and f"line {line}" in err and f"field '{field}'" in err, err
    assert "Traceback" not in err
    assert _stored(store_url) == 0


@pytest.mark.parametrize("lines", [
    pytest.param([GOOD], id="a-plain-record"),
    pytest.param([_line(_record(resident_slowdown_pct=4, resident_slowdown_low_pct=2, resident_slowdown_high_pct=6))],
                 id="whole-numbers-for-percent"),
    pytest.param([_line(_record(status="revoked", stale_reason="driver changed to 560", revoked_reason="bad run",
                                status_changed_at="2026-12-01T00:00:00Z"))], id="stale-then-revoked-keeps-both"),
    pytest.param([_line(_record(key={"regime": "mig:3g.40gb"}))], id="a-mig-profile-the-device-has"),
])
def test_the_records_these_rules_leave_alone_are_imported(
    cli: Run, store_url: str, tmp_path: Path, lines: list[str]
) -> None:
    """The controls: the same files, without what the refusals above refuse, are imported."""
    code, _, err = cli("--db", store_url, "evidence", "import", str(_file(tmp_path, *lines)))
    assert code == 0, err
    assert _stored(store_url) == len(lines)


def test_export_writes_version_3_and_every_record_says_when_its_status_changed(tmp_path: Path) -> None:
    """Version 2 never promised ``status_changed_at``: a reader of version 2 that refuses unknown fields
    would refuse every line of today's files for that field. Version 3 lets it refuse the header instead."""
    out = io.StringIO()
    rec = EvidenceOut.model_validate(_record())
    write_export(None, [rec], out=out)
    header, line = out.getvalue().splitlines()
    assert json.loads(header) == {"format": "canary-evidence", "version": 3}
    assert "status_changed_at" in json.loads(line)


@pytest.mark.parametrize("record", [
    pytest.param({k: v for k, v in _record().items() if k != "status_changed_at"}, id="without-status_changed_at"),
    pytest.param(_record(status="revoked", revoked_reason="bad run", status_changed_at="2026-12-01T00:00:00Z"),
                 id="with-status_changed_at"),
])
def test_version_2_files_are_still_read(cli: Run, store_url: str, tmp_path: Path, record: dict[str, object]) -> None:
    path = _file(tmp_path, _line(record), header='{"format": "canary-evidence", "version": 2}')
    code, _, err = cli("--db", store_url, "evidence", "import", str(path))
    assert code == 0, err
    assert _stored(store_url) == 1


def test_a_version_this_canary_does_not_read_is_named(cli: Run, store_url: str, tmp_path: Path) -> None:
    path = _file(tmp_path, GOOD, header='{"format": "canary-evidence", "version": 4}')
    code, _, err = cli("--db", store_url, "evidence", "import", str(path))
    assert code == 2 and "line 1" in err and "field 'version'" in err and "versions 1, 2, 3" in err, err
    assert _stored(store_url) == 0
