"""Imported evidence is marked, keeps its origin, and never outweighs the store's own for a key;
export writes regular files or standard output, nothing else."""

from __future__ import annotations

import io
import json
import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine

from canary.errors import InputError
from evidence_store.database import session_scope
from evidence_store.evidence import list_evidence, record_evidence
from evidence_store.export_file import write_export
from evidence_store.lookup import lookup
from evidence_store.schemas import EvidenceOut
from evidence_store.transfer import import_records
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence

NOW = T0 + __import__("datetime").timedelta(hours=2)


def _exported(probe_id: str, **kwargs: object) -> EvidenceOut:
    rec = evidence(probe_id, **kwargs)  # type: ignore[arg-type]
    return EvidenceOut.model_validate(
        rec.model_dump() | {"id": str(uuid.uuid4()), "key_digest": KEY.digest(), "status": "current"}
    )


def _lookup(engine: Engine) -> object:
    with session_scope(engine, read_only=True) as session:
        return lookup(session, KEY, driver_version="550.54.15", now=NOW, ttl_s=86400.0, allow_cross_driver=False)


def test_imported_records_are_marked_with_their_origin(engine: Engine) -> None:
    given = _exported("remote-1")
    with session_scope(engine) as session:
        result = import_records(session, [given], origin="file fleet.jsonl imported 2026-11-30T08:00:00Z")
    assert result.inserted == 1
    with session_scope(engine, read_only=True) as session:
        (stored,) = list_evidence(session)
    assert stored.source == "import"
    assert stored.origin == "file fleet.jsonl imported 2026-11-30T08:00:00Z; exported with source canary"
    with session_scope(engine) as session:  # the same file again: unchanged, not a conflict
        again = import_records(session, [given], origin="file fleet.jsonl imported later")
    assert (again.inserted, again.unchanged, again.conflicts) == (0, 1, [])


@pytest.mark.parametrize(
    ("local", "imported", "outcome"),
    [
        pytest.param("unsafe", "safe", "unsafe", id="imported-safe-cannot-outvote-local-unsafe"),
        pytest.param("safe", "unsafe", "safe", id="imported-unsafe-cannot-outvote-local-safe"),
        pytest.param(None, "safe", "safe", id="imported-alone-still-counts"),
    ],
)
def test_imported_evidence_never_outweighs_local(engine: Engine, local: str | None, imported: str, outcome: str) -> None:
    with session_scope(engine) as session:
        if local is not None:
            record_evidence(session, evidence("local-1", outcome=local, confidence=0.91))
        import_records(
            session, [_exported("remote-1", outcome=imported, confidence=0.999)], origin="file x.jsonl"
        )
    result = _lookup(engine)
    assert result.outcome == outcome  # type: ignore[attr-defined]
    if local is not None:
        assert result.sources == ("canary",)  # type: ignore[attr-defined]
        assert result.confidence == pytest.approx(0.91)  # type: ignore[attr-defined]
        assert "imported record(s) set aside" in result.reason  # type: ignore[attr-defined]
    else:
        assert result.sources == ("import",)  # type: ignore[attr-defined]


def test_export_to_standard_output_and_refusals(tmp_path: Path) -> None:
    out = io.StringIO()
    assert write_export(None, [_exported("p1"), _exported("p2")], out=out) == 2
    lines = out.getvalue().splitlines()
    assert json.loads(lines[0])["format"] == "canary-evidence" and len(lines) == 3
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target, problem in ((fifo, "not a regular file"), (tmp_path, "directory"),
                            (Path("/dev/null"), "not a regular file"), (tmp_path / "no" / "x", "does not exist")):
        with pytest.raises(InputError, match=problem):
            write_export(target, [_exported("p3")])
    assert fifo.exists() and not fifo.is_file()  # still a FIFO, not replaced
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
    link = tmp_path / "link"
    link.symlink_to("/dev/null")
    with pytest.raises(InputError, match="not a regular file"):
        write_export(link, [_exported("p4")])
    assert link.is_symlink()


def test_signed_exports_verify_and_tampering_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evidence_store.export_file import key_id, read_export

    key = b"fleet-key-0123456789abcdef"
    signed = tmp_path / "signed.jsonl"
    write_export(signed, [_exported("s1"), _exported("s2")], key=key)
    lines = signed.read_text().splitlines()
    assert json.loads(lines[0])["key_id"] == key_id(key) and "hmac_sha256" in json.loads(lines[-1])
    assert [r.probe_id for _, r in read_export(signed, key=key)] == ["s1", "s2"]
    assert len(read_export(signed)) == 2  # without a fleet key the records are still checked and read

    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(signed.read_text().replace('"outcome":"safe"', '"outcome":"unsafe"', 1))
    with pytest.raises(InputError, match="changed after it was signed"):
        read_export(tampered, key=key)
    with pytest.raises(InputError, match="another key"):
        read_export(signed, key=b"another-key-0123456789")
    unsigned = tmp_path / "unsigned.jsonl"
    write_export(unsigned, [_exported("u1")])
    with pytest.raises(InputError, match="not signed"):
        read_export(unsigned, key=key)
    dropped = tmp_path / "dropped.jsonl"  # the signature line removed
    dropped.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(InputError, match="signature line"):
        read_export(dropped, key=key)


@pytest.mark.slow
def test_the_cli_signs_and_verifies_with_the_operator_key(tmp_path: Path) -> None:
    import subprocess

    from evidence_store.migrate import upgrade
    from tests.conftest import canary_cmd, cli_env

    keyfile = tmp_path / "fleet.key"
    keyfile.write_text("0123456789abcdef0123456789abcdef\n")
    source, target = f"sqlite:///{tmp_path / 'a.sqlite3'}", f"sqlite:///{tmp_path / 'b.sqlite3'}"
    upgrade(source)
    upgrade(target)
    from evidence_store.database import make_engine

    eng = make_engine(source)
    try:
        with session_scope(eng) as session:
            record_evidence(session, evidence("cli-1", created_at=NOW))
    finally:
        eng.dispose()
    env = cli_env(tmp_path) | {"CANARY_FLEET_KEY_FILE": str(keyfile)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*canary_cmd(), *argv], capture_output=True, text=True, env=env, timeout=60)

    dump = tmp_path / "dump.jsonl"
    assert run("--db", source, "evidence", "export", str(dump)).returncode == 0
    stdout_dump = run("--db", source, "evidence", "export", "-")
    assert stdout_dump.returncode == 0 and stdout_dump.stdout.splitlines()[0] == dump.read_text().splitlines()[0]
    assert "exported 1" in stdout_dump.stderr and not (tmp_path / "-").exists()
    other_key = tmp_path / "other.key"
    other_key.write_text("ffffffffffffffffffffffffffffffff")
    refused = run("--db", target, "evidence", "import", str(dump), "--key", str(other_key))
    assert refused.returncode == 2 and "another key" in refused.stderr
    imported = run("--db", target, "evidence", "import", str(dump), "--policy", "default")
    assert imported.returncode == 0, imported.stderr
