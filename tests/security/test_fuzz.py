"""Fuzzing every loader and the CLI's argument paths, briefly and on a fixed seed (derandomized), so
CI is repeatable; ``benchmarks/fuzz.py`` runs the same targets for minutes on fresh seeds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evidence_store.migrate import upgrade
from tests.security.adversarial import POLICY, PROFILE, SNAPSHOT
from tests.security.fuzz_targets import (
    check_cli,
    check_import,
    check_loaders,
    cli_argvs,
    export_files,
    json_values,
    mutated_documents,
    scratch_folder,
    yaml_texts,
)

CI = settings(derandomize=True, deadline=None, database=None, max_examples=60,
              suppress_health_check=[HealthCheck.too_slow])
FOLDER = scratch_folder()


@CI
@given(yaml_texts)
def test_loaders_on_yaml_like_text(text: str) -> None:
    check_loaders(text, FOLDER)


@CI
@given(st.binary(max_size=300))
def test_loaders_on_bytes(data: bytes) -> None:
    check_loaders(data, FOLDER, kinds=("profile", "policy"))


@CI
@given(json_values)
def test_loaders_on_json_values(value: object) -> None:
    import json

    check_loaders(json.dumps(value, allow_nan=True), FOLDER)


@CI
@given(mutated_documents())
def test_loaders_on_mutated_real_documents(doc: tuple[str, str]) -> None:
    kind, text = doc
    check_loaders(text, FOLDER, kinds=(kind,))


@CI
@given(export_files())
def test_import_reader_and_checks(text: str) -> None:
    check_import(text, FOLDER)


@pytest.fixture(scope="module")
def cli_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("fuzz-cli")
    store = f"sqlite:///{folder / 'store.sqlite3'}"
    upgrade(store)
    (folder / "doc.yaml").write_text("name: [unclosed\n")
    (folder / "export.jsonl").write_text('{"format":"canary-evidence","version":1}\n{"id": 1}\n')
    paths = {"profile": str(PROFILE), "snapshot": str(SNAPSHOT), "policy": str(POLICY),
             "doc": str(folder / "doc.yaml"), "export": str(folder / "export.jsonl"), "dir": str(folder)}
    yield store, paths


@pytest.mark.slow
def test_cli_argument_paths(cli_world: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, paths = cli_world
    monkeypatch.setenv("CANARY_DB_URL", store)

    @settings(derandomize=True, deadline=None, database=None, max_examples=80,
              suppress_health_check=[HealthCheck.too_slow])
    @given(cli_argvs)
    def run(argv: tuple[list[str], list[str]]) -> None:
        check_cli(argv[0], argv[1], store=store, paths=paths)

    run()


def test_fuzz_targets_catch_a_misbehaving_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The harness would notice: a loader that lets a non-canary exception escape fails the target."""
    import canary.profile

    def broken(path: object) -> object:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(canary.profile, "load_profile", broken)
    with pytest.raises(AssertionError, match="OverflowError"):
        check_loaders("name: x\n", tmp_path, kinds=("profile",))
