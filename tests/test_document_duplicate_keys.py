"""A key written twice in one mapping of a document is refused, naming the file, the key's path and
both lines: YAML and JSON loaders keep the last value silently, so a second ``memory:`` appended to a
profile used to replace the first and change the decision without a word."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from canary._model import read_document
from canary.errors import InputError
from tests.support.paths import EXAMPLES, canary_cmd, cli_env


@pytest.mark.parametrize(("body", "field", "lines"), [
    pytest.param("a: 1\nb: 2\na: 3\n", "a", "at line 1 and at line 3", id="top-level"),
    pytest.param("m:\n  x: 1\n  y: 2\n  x: 1\n", "m.x", "at line 2 and at line 4", id="nested-same-value"),
    pytest.param("l:\n  - x: 1\n    x: 2\n", "l[0].x", "at line 2 and at line 3", id="in-a-list"),
    pytest.param('{"a": 1, "a": 2}', "a", "at line 1, column 2 and at line 1, column 10", id="json-one-line"),
    pytest.param("m: {1: a, 01: b}\n", "m.1", "at line 1", id="keys-compare-as-loaded"),
])
def test_a_duplicate_key_is_refused_with_its_path_and_lines(tmp_path: Path, body: str, field: str, lines: str) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text(body)
    with pytest.raises(InputError) as caught:
        read_document(path)
    assert caught.value.file == str(path)
    assert caught.value.field == field
    assert lines in caught.value.problem
    assert "appears twice" in caught.value.problem


@pytest.mark.parametrize("body", [
    pytest.param("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 5\n", id="merge-then-override"),
    pytest.param("a: {x: 1}\nb: {x: 1}\n", id="same-key-in-two-mappings"),
    pytest.param('m: {"1": a, 1: b}\n', id="text-and-number-differ"),
    pytest.param("a: &m {x: 1}\nb: *m\nc: *m\n", id="alias-repeats-a-mapping"),
])
def test_documents_without_duplicates_still_load(tmp_path: Path, body: str) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text(body)
    assert read_document(path)


def test_fit_refuses_a_profile_with_memory_written_twice(tmp_path: Path) -> None:
    profile = tmp_path / "dup.yaml"
    text = (EXAMPLES / "profiles" / "embedding-service.yaml").read_text()
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("memory:"))
    if not text.endswith("\n"):
        text += "\n"
    appended = len(text.splitlines()) + 1
    profile.write_text(text + "memory: {reserved_bytes: 50Gi, peak_bytes: 60Gi}\n")
    result = subprocess.run([*canary_cmd(), "fit", "h100", str(profile)], capture_output=True, text=True,
                            env=cli_env(tmp_path), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert str(profile) in result.stderr
    assert "field 'memory'" in result.stderr
    assert f"at line {first} and at line {appended}" in result.stderr
    assert "Traceback" not in result.stderr
