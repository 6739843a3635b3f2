"""Hostile inputs a careless or malicious profile owner can write (docs/security.md): a binary that is a
device or a FIFO, a document that is all values, control characters that forge output lines, URLs a
profile carries but its executor does not use, and messages that must stay short and name the file.

Each case is bad input: exit 2, one message naming the file (or option) and the field, no traceback.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import canary._model as model
from canary._model import MAX_DOCUMENT_NODES, read_document
from canary.errors import InputError
from canary.policy import load_policy
from canary.probe.factory import check_profile, check_request
from canary.profile import load_profile
from tests.conftest import EXAMPLES, canary_cmd, cli_env
from tests.support.cli import run_in_process

PROFILE = EXAMPLES / "profiles" / "embedding-service.yaml"
SNAPSHOT = EXAMPLES / "snapshots" / "a-persistent-35pct.yaml"


def _profile_doc(**changes: Any) -> dict[str, Any]:
    doc = yaml.safe_load(PROFILE.read_text())
    doc.update(changes)
    return doc


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _one_line_exit_2(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# --- 1. from-binary reads only regular files of sane size -----------------------------------------------


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda tmp: Path("/dev/zero"), "not a regular file", id="device"),
        pytest.param(lambda tmp: (os.mkfifo(tmp / "fifo"), tmp / "fifo")[1], "not a regular file", id="fifo"),
        pytest.param(lambda tmp: tmp, "is a directory", id="directory"),
        pytest.param(
            lambda tmp: (os.truncate((tmp / "big").open("wb").name, 2 * 1024**3 + 1), tmp / "big")[1],
            "larger than 2 GiB",
            id="over-2-GiB-sparse",
        ),
    ],
)
def test_from_binary_reads_only_a_regular_file_of_at_most_2_gib(tmp_path: Path, make: Any, expected: str) -> None:
    target = make(tmp_path)
    # A real subprocess with a timeout: the old code read /dev/zero until memory ran out and blocked
    # forever opening a FIFO.
    done = subprocess.run(
        [*canary_cmd(), "envelope", "from-binary", str(target), "--memory-peak", "1Gi", "--threads", "128"],
        capture_output=True, text=True, timeout=60, env=cli_env(tmp_path),
    )
    line = _one_line_exit_2(done)
    assert str(target) in line
    assert "FILE" in line
    assert expected in line


# --- 2. the value limit applies while parsing ----------------------------------------------------------


def test_the_value_limit_stops_the_parser_before_the_document_is_composed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("a: [" + ",".join(["1"] * (MAX_DOCUMENT_NODES + 10)) + "]\n")

    def composed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the document was composed before its values were counted")

    monkeypatch.setattr(model, "_load_yaml", composed)
    with pytest.raises(InputError, match="more than 200000 values") as info:
        read_document(path)
    assert info.value.file == str(path)


@pytest.mark.parametrize(
    ("values", "loads"),
    [
        # the top mapping and the list are values too; keys are not
        pytest.param(98, True, id="at-the-limit"),
        pytest.param(99, False, id="one-over"),
    ],
)
def test_the_value_limit_counts_values_not_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: int, loads: bool
) -> None:
    monkeypatch.setattr(model, "MAX_DOCUMENT_NODES", 100)  # the same rule, at a size a test reads quickly
    path = tmp_path / "n.yaml"
    path.write_text("a: [" + ",".join(["1"] * values) + "]\n")
    if loads:
        assert len(read_document(path)["a"]) == values
    else:
        with pytest.raises(InputError, match="MAX_DOCUMENT_NODES"):
            read_document(path)
    keys = tmp_path / "keys.yaml"
    keys.write_text("{" + ",".join(f"k{i}: 1" for i in range(99)) + "}\n")  # 100 values, 99 keys
    assert len(read_document(keys)) == 99


# --- 3. control characters in identifiers ----------------------------------------------------------------


def _kernel_named(name: str) -> dict[str, Any]:
    doc = _profile_doc()
    doc["kernels"][0]["name"] = name
    return doc


@pytest.mark.parametrize("bad", ["llm\nREJECT fake", "tab\there", "esc\x1b[31m", "c1\x85next", "del\x7f", "ls\u2028x"])
@pytest.mark.parametrize(
    ("build", "field"),
    [
        pytest.param(lambda bad: _profile_doc(name=bad), "name", id="name"),
        pytest.param(lambda bad: _profile_doc(version=bad), "version", id="version"),
        pytest.param(lambda bad: _profile_doc(shape_family=bad), "shape_family", id="shape_family"),
        pytest.param(_kernel_named, "kernels[0].name", id="kernel-name"),
        pytest.param(
            lambda bad: _profile_doc(phases=[{"name": bad, "duration_s": 1, "duty_cycle": 0.5}]),
            "phases[0].name",
            id="phase-name",
        ),
    ],
)
def test_a_control_character_in_an_identifier_is_refused(tmp_path: Path, bad: str, build: Any, field: str) -> None:
    path = _write(tmp_path, build(bad))
    with pytest.raises(InputError, match="control character") as info:
        load_profile(path)
    assert info.value.file == str(path)
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_profiles_put_refuses_a_forged_name_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = cli_env(tmp_path)
    forged = _write(tmp_path, _profile_doc(name="llm\nREJECT fake"))
    done = run_in_process(["profiles", "put", str(forged)], capsys=capsys, monkeypatch=monkeypatch, env=env)
    line = _one_line_exit_2(done)
    assert str(forged) in line and "field 'name'" in line
    for option, argv in (
        ("--name", ["--name", "x\nADMIT", "--version", "1"]),
        ("--version", ["--name", "x", "--version", "1\x1b[2K"]),
    ):
        done = run_in_process(["profiles", "put", "--snapshot", *argv, str(SNAPSHOT)], capsys=capsys,
                              monkeypatch=monkeypatch, env=env)
        line = _one_line_exit_2(done)
        assert f"field '{option}'" in line and "control character" in line
    done = run_in_process(["envelope", "from-binary", str(PROFILE), "--memory-peak", "1Gi", "--threads", "128",
                           "--name", "a\nb"], capsys=capsys, monkeypatch=monkeypatch, env=env)
    assert "field '--name'" in _one_line_exit_2(done)


# --- 4. messages name the file and stay short -------------------------------------------------------------


def test_a_million_character_name_gives_a_short_message_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _profile_doc(name="n" * 1_000_000))
    done = run_in_process(["profiles", "put", str(path)], capsys=capsys, monkeypatch=monkeypatch,
                          env=cli_env(tmp_path))
    line = _one_line_exit_2(done)
    assert str(path) in line and "field 'name'" in line and "at most 256" in line
    assert len(line) < 500
    done = run_in_process(["profiles", "put", "--snapshot", "--name", "s" * 100_000, "--version", "1", str(SNAPSHOT)],
                          capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
    assert len(_one_line_exit_2(done)) < 500


def test_a_refused_url_names_the_file_and_the_snapshot(tmp_path: Path) -> None:
    from canary.admission.request import load_request

    resident = _profile_doc(name="nccl-comms", canary={"monitor": "http", "endpoint": "http://169.254.169.254/"})
    snap = yaml.safe_load(SNAPSHOT.read_text())
    snap["residents"] = [{"name": "nccl-comms", "profile": resident}]
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text(yaml.safe_dump(snap))
    req = load_request(str(snapshot), str(PROFILE))
    with pytest.raises(InputError, match=r"169\.254\.169\.254") as info:
        check_request(req, candidate_file=str(PROFILE), snapshot_file=str(snapshot))
    assert info.value.file == str(snapshot)
    assert info.value.field == "residents[0].profile.canary.endpoint"
    # Without the files, the message still names the device (its snapshot file) and the resident.
    with pytest.raises(InputError) as info:
        check_request(req)
    assert f"file:{snapshot}" in str(info.value) and "resident 'nccl-comms'" in str(info.value)


# --- 5. every URL a profile carries is checked, whatever its executor ---------------------------------------


@pytest.mark.parametrize(
    ("canary", "field"),
    [
        pytest.param({"executor": "sim", "endpoint": "file:///etc/passwd"}, "canary.endpoint", id="file-scheme"),
        pytest.param({"executor": "sim", "endpoint": "http://user:pw@127.0.0.1/"}, "canary.endpoint", id="credentials"),
        pytest.param({"monitor": "sim", "metrics_url": "gopher://127.0.0.1/x"}, "canary.metrics_url", id="gopher"),
        pytest.param({"endpoint": "http://127.0.0.1/", "request_path": "x y"}, "canary.request_path", id="bad-path"),
    ],
)
def test_a_url_of_the_wrong_form_is_refused_when_the_profile_loads(
    tmp_path: Path, canary: dict[str, Any], field: str
) -> None:
    path = _write(tmp_path, _profile_doc(canary=canary))
    with pytest.raises(InputError) as info:
        load_profile(path)
    assert (info.value.file, info.value.field) == (str(path), field)


@pytest.mark.parametrize("as_candidate", [True, False], ids=["candidate", "resident"])
def test_an_unused_url_on_a_host_the_policy_does_not_list_is_refused(tmp_path: Path, as_candidate: bool) -> None:
    path = _write(tmp_path, _profile_doc(canary={"executor": "sim", "monitor": "sim",
                                                  "endpoint": "http://169.254.169.254/"}))
    with pytest.raises(InputError, match="probe_hosts") as info:
        check_profile(load_profile(path), load_policy("default"), as_candidate=as_candidate, file=str(path))
    assert (info.value.file, info.value.field) == (str(path), "canary.endpoint")


# --- 7. YAML 1.2 exponent floats are numbers -------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("6e2", 600.0), ("1.5e3", 1500.0), ("1E-3", 0.001), ("-2e+2", -200.0)])
def test_an_exponent_float_reads_as_a_number(tmp_path: Path, text: str, value: float) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(f"budget_s: {text}\nword: 6e2x\n")
    assert read_document(path) == {"budget_s": value, "word": "6e2x"}


def test_an_input_error_echoes_a_bounded_one_line_file_and_field() -> None:
    """Whatever a hostile document names its keys or files, the message stays one line (C0, C1 and the
    Unicode line separators escaped) and short (a field is cut at 120 characters, a file at 300, with
    the length said)."""
    from canary.errors import InputError

    err = InputError("unknown field", file="a\u2028b.yaml", field="k\x85" + "x" * 1_000_000)
    text = str(err)
    assert "\n" not in text and "\u2028" not in text and "\x85" not in text
    assert "\\u2028" in text and "\\x85" in text
    assert len(text) < 600 and "…(1000005 chars)" in text  # k, the escaped \\x85 (4), the million


def test_a_warm_plan_names_the_resident_file_whose_url_is_refused(tmp_path: Path) -> None:
    """A plan pair's resident added from its own file: the refusal names that file and the field, not
    the plan's device (canary warm checks every pair before it writes)."""
    from canary.jobs.plan import PlannedPair
    from canary.jobs.warm import load_pair

    resident = _write(tmp_path, _profile_doc(name="nccl-comms",
                                             canary={"monitor": "http", "endpoint": "http://169.254.169.254/"}),
                      name="resident.yaml")
    pair = PlannedPair(device="h100-sxm", candidate=str(PROFILE), residents=(str(resident),))
    with pytest.raises(InputError, match=r"169\.254\.169\.254") as info:
        load_pair(pair, check_probe=True)
    assert info.value.file == str(resident)
    assert info.value.field is not None and info.value.field.endswith("canary.endpoint")
