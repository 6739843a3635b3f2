"""Everyday command-line habits: ``--version`` from the installed package's metadata; the global
options (``--db``, ``-v``, ``--sim-driver``) before or after the command; and help for every option
of the whole parser tree, with its default where it has one."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from canary.cli import PACKAGE, build_parser
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, cli_env
from tests.support.stores import migrated_sqlite

PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")
SNAPSHOT = str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml")


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path) + " " + ("/".join(action.option_strings) or action.metavar or action.dest), action


ACTIONS = list(_walk(build_parser(), ("canary",)))


def test_the_walk_sees_the_whole_tree() -> None:
    names = {name for name, _ in ACTIONS}
    assert {"canary --version", "canary evidence list --json", "canary db downgrade REV",
            "canary warm --from-history", "canary agent run --heartbeat-s"} <= names
    assert len(ACTIONS) > 150


def test_every_option_has_help() -> None:
    missing = [name for name, action in ACTIONS if not action.help or action.help == argparse.SUPPRESS]
    assert missing == []


def _has_default(action: argparse.Action) -> bool:
    if isinstance(action, argparse._CountAction | argparse._StoreTrueAction | argparse._AppendAction):
        return False  # off / none unless given: nothing to say
    return action.default is not None and action.default is not argparse.SUPPRESS


def test_every_default_is_shown() -> None:
    silent = [f"{name} (default {action.default!r})" for name, action in ACTIONS
              if _has_default(action) and "default" not in str(action.help).lower()]
    assert silent == []


@pytest.mark.parametrize("script", ["canary", "gpu-fit"])
def test_version_is_the_installed_package_version(script: str) -> None:
    """A real process of each installed script."""
    path = Path(sys.executable).parent / script
    if not path.exists():
        pytest.skip(f"{script} is not installed next to {sys.executable}")
    proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{script} {version(PACKAGE)}\n"


def test_db_after_the_command_is_the_same_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path / "store.sqlite3")
    env = cli_env(tmp_path)  # its default store is another file, which must stay untouched
    fed = run_in_process(["feedback", SNAPSHOT, PROFILE, "--resident-name", "comms", "--db", url], capsys=capsys,
                         monkeypatch=monkeypatch, env=env)
    assert fed.returncode == 0, fed.stderr
    before = run_in_process(["--db", url, "evidence", "list", "--json"], capsys=capsys, monkeypatch=monkeypatch,
                            env=env)
    after = run_in_process(["evidence", "list", "--json", "--db", url], capsys=capsys, monkeypatch=monkeypatch,
                           env=env)
    assert len(json.loads(after.stdout)) == 1 and after.stdout == before.stdout
    assert not (tmp_path / "evidence.sqlite3").exists()
    bad = run_in_process(["evidence", "list", "--db", "sqlite:////nonexistent-dir/x.db"], capsys=capsys,
                         monkeypatch=monkeypatch, env=env)
    assert bad.returncode == 2 and "nonexistent-dir" in bad.stderr  # the option after the command is the one used


def test_verbose_after_the_command_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(tmp_path)

    def fit(*argv: str) -> str:
        out = run_in_process(list(argv), capsys=capsys, monkeypatch=monkeypatch, env=env)
        assert out.returncode in (0, 1, 3), out.stderr
        return out.stdout

    plain = fit("fit", "h100", PROFILE)
    before = fit("-v", "fit", "h100", PROFILE)
    after = fit("fit", "h100", PROFILE, "-v")
    assert before == after and after != plain
    args = build_parser().parse_args(["-v", "fit", "h100", PROFILE, "-vv"])
    assert (args.verbose, args.verbose_after) == (1, 2)  # both kept; the CLI adds them (3)
