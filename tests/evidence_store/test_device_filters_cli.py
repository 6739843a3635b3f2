"""Device filters of ``canary evidence list``, ``evidence certificates list`` and ``reservations list``
resolve a device as DEVICE of ``canary fit`` does: ``h100`` finds what is stored under ``h100-sxm`` /
``sim:h100-sxm``, and a name the catalog lacks is exit 2 naming the option and the closest names. They
compared the text as given, so the alias the other commands take answered "no evidence matches" and a
typo answered the same, exit 0."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from canary.cli import _run, build_parser
from evidence_store.database import make_engine, session_scope
from evidence_store.evidence import record_evidence
from evidence_store.reservations import reserve
from tests.evidence_store.evidence_store_testkit import KEY, T0, evidence
from tests.support.paths import EXAMPLES, canary_cmd, cli_env
from tests.support.stores import migrated_sqlite

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*argv: str) -> tuple[int, str, str]:
        code = _run(build_parser(modules=("evidence", "reservations")), list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def filled(tmp_path: Path) -> str:
    """A store with one record of each of h100-sxm and an uncatalogued type, and one booking of each of
    ``sim:h100-sxm`` and a GPU UUID."""
    url = migrated_sqlite(tmp_path / "filters.sqlite3")
    eng = make_engine(url)
    try:
        with session_scope(eng) as session:
            record_evidence(session, evidence("p-h100", created_at=T0))
            other = KEY.__class__(**{**KEY.as_dict(), "device_type": "NVIDIA Future GPU"})
            record_evidence(session, evidence("p-future", key=other, created_at=T0))
            for device_id in ("sim:h100-sxm", "GPU-6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e"):
                reserve(session, device_id=device_id, holder="admit-1", memory_bytes=2**33,
                        capacity_memory_bytes=2**36, lease_s=10**9, now=T0)
    finally:
        eng.dispose()
    assert KEY.device_type == "h100-sxm"
    return url


@pytest.mark.parametrize(("value", "probes"), [
    pytest.param("h100", ["p-h100"], id="catalog-alias"),
    pytest.param("h100-sxm", ["p-h100"], id="catalog-name"),
    pytest.param("NVIDIA Future GPU", ["p-future"], id="uncatalogued-type-the-store-holds"),
    pytest.param("a100-80gb", [], id="catalogued-type-without-records"),
])
def test_evidence_list_device_type(cli: Run, filled: str, value: str, probes: list[str]) -> None:
    code, out, err = cli("--db", filled, "evidence", "list", "--device-type", value, "--json")
    assert code == 0, err
    assert [r["probe_id"] for r in json.loads(out)] == probes


@pytest.mark.parametrize(("value", "devices"), [
    pytest.param("h100", ["sim:h100-sxm"], id="catalog-alias"),
    pytest.param("h100-sxm", ["sim:h100-sxm"], id="catalog-name"),
    pytest.param("sim:h100-sxm", ["sim:h100-sxm"], id="stored-id"),
    pytest.param("GPU-6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e", ["GPU-6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e"],
                 id="gpu-uuid"),
    # the example snapshot's uuid is the booked GPU's: its bookings are held under that UUID
    pytest.param(str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"), ["GPU-6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e"],
                 id="snapshot-file-by-its-uuid"),
    pytest.param("a100-80gb", [], id="catalogued-device-without-bookings"),
])
def test_reservations_list_device(cli: Run, filled: str, value: str, devices: list[str]) -> None:
    code, out, err = cli("--db", filled, "reservations", "list", "--device", value, "--json")
    assert code == 0, err
    assert [r["device_id"] for r in json.loads(out)] == devices


@pytest.mark.parametrize("argv", [
    pytest.param(["evidence", "list", "--device-type", "h100x"], id="evidence-list"),
    pytest.param(["reservations", "list", "--device", "h100x"], id="reservations-list"),
])
def test_an_unknown_device_name_is_exit_2_with_the_closest_names(tmp_path: Path, filled: str, argv: list[str]) -> None:
    """The installed script, as a user runs it."""
    out = subprocess.run([*canary_cmd(), "--db", filled, *argv], capture_output=True, text=True, timeout=60,
                         env=cli_env(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    option = argv[2]
    assert f"field '{option}'" in out.stderr and "unknown device 'h100x'" in out.stderr
    assert "closest: h100-sxm" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_certificates_list_device_takes_the_alias(cli: Run, filled: str) -> None:
    code, out, err = cli("--db", filled, "evidence", "certificates", "list", "--device", "h100")
    assert code == 0, err
    assert out == "no certificate matches --device h100-sxm\n"
