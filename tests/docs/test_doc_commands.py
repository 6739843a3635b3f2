"""The docs are executed: every command in a fenced block of ``README.md`` and ``docs/*.md`` runs (or,
for a synopsis, is checked against ``--help``), and every output shown under a ``$ command`` is what the
command prints now.

The rules — which lines are commands, what a synopsis is, the ``<!-- docs-test: skip … -->`` markers,
how commands run (a sandbox home, a SQLite store per doc file via ``$CANARY_DB_URL``, commands in the
doc's order), what counts as a failure (a traceback, a timeout, exit 2 or 4; any non-zero exit for a
command other than ``canary``/``gpu-fit``) and how shown output is compared (volatile parts normalised,
``...``/``…`` elisions) — are in the docstring of ``scripts/regen-doc-outputs``, which this test imports
so that the two cannot disagree. A stale output block is fixed by running that script. Skipped commands
are reported as skipped tests with their marker's reason.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "regen-doc-outputs"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("regen_doc_outputs", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up while the file runs
    loader.exec_module(module)
    return module


regen = _load()
COMMANDS = [cmd for path in regen.doc_files(ROOT) for cmd in regen.commands(path)]


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, Any]]:
    """One sandbox (and store) per doc file, shared by that file's commands in the doc's order."""
    made: dict[Path, Any] = {}
    yield made


def _sandbox(sandboxes: dict[Path, Any], tmp_path_factory: pytest.TempPathFactory, path: Path) -> Any:
    if path not in sandboxes:
        sandboxes[path] = regen.Sandbox(tmp_path_factory.mktemp(f"docs-{path.stem}"), ROOT)
    return sandboxes[path]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [pytest.param(c, id=c.where) for c in COMMANDS])
def test_documented_command(cmd: Any, sandboxes: dict[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    if cmd.skip is not None:
        pytest.skip(f"{cmd.where} `{cmd.text}`: {cmd.skip}")
    sandbox = _sandbox(sandboxes, tmp_path_factory, cmd.file)
    if cmd.synopsis:
        problems = regen.check_synopsis(cmd, sandbox, {})
        assert not problems, "\n".join(problems)
        return
    if cmd.text.startswith("make ") and sandbox.make_would_reinstall():
        pytest.skip(f"{cmd.where} `{cmd.text}`: the virtualenv is older than pyproject.toml (make would reinstall)")
    done = sandbox.run(cmd.text)
    why = regen.failure(cmd, done)
    assert why is None, f"{why}\nstdout: {done.stdout[-1500:]}\nstderr: {done.stderr[-1500:]}"
    if cmd.output is not None:
        new = regen.fresh_output(done, sandbox.path)
        assert regen.shown_matches(cmd.output, [regen.normalise(n) for n in new]), (
            f"{cmd.where}: the output shown under `{cmd.text}` is stale (run scripts/regen-doc-outputs).\n"
            "shown:\n" + "\n".join(cmd.output) + "\n\nnow:\n" + "\n".join(new))


def test_the_docs_hold_commands_and_every_marker_parses() -> None:
    """A marker the extractor cannot read would silently run (or skip) the wrong block."""
    assert sum(1 for c in COMMANDS if not c.synopsis and c.skip is None) >= 10
    for path in regen.doc_files(ROOT):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "docs-test:" in line:
                assert regen._MARKER.match(line.strip()), f"{path.name}:{number}: unreadable marker {line!r}"


BLOCK = """\
intro
<!-- docs-test: skip `canary serve --port` server: runs until stopped -->
```
canary db upgrade            # create the store
canary serve --port 8765
canary fit DEVICE PROFILE [--json]   # a synopsis
  canary indented diagram line
canary: a message, not a command
canary envelope from-binary a.fatbin \\
    --arch sm_90
```

```yaml
canary: {not: a command}
```

```console
$ canary occupancy --device h100
line one
...
last line
$ canary db current
```
"""


def test_the_extraction_rules(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(BLOCK)
    found = [(c.line, c.text, c.synopsis, c.skip, c.output) for c in regen.commands(doc)]
    assert found == [
        (4, "canary db upgrade", False, None, None),
        (5, "canary serve --port 8765", False, "server: runs until stopped", None),
        (6, "canary fit DEVICE PROFILE [--json]", True, None, None),
        (9, "canary envelope from-binary a.fatbin --arch sm_90", False, None, None),
        (18, "canary occupancy --device h100", False, None, ["line one", "...", "last line"]),
        (22, "canary db current", False, None, None),
    ]


@pytest.mark.parametrize(("shown", "actual", "matches"), [
    pytest.param(["a", "b"], ["a", "b"], True, id="same"),
    pytest.param(["a", "..."], ["a", "b", "c"], True, id="elided-tail"),
    pytest.param(["a", "…", "d"], ["a", "b", "c", "d"], True, id="elided-middle"),
    pytest.param(["a", "d"], ["a", "b", "d"], False, id="unmarked-gap"),
    pytest.param(["on gpu GPU-0b7e…"], ["on gpu GPU-0b7e4d21-93aa"], True, id="truncated-line"),
    pytest.param(["... GPU 'p100' (catalog)"], ["data.json: GPU 'p100' (catalog)"], True, id="elided-head"),
    pytest.param(["valid until 2026-12-09 19:36:39Z"], ["valid until 2027-01-01 00:00:00Z"], True, id="time"),
    pytest.param(["(exit 1, 0.71 s wall)"], ["(exit 1, 12.5 s wall)"], True, id="duration"),
    pytest.param(["(exit 1, 0.71 s wall)"], ["(exit 0, 0.71 s wall)"], False, id="exit-code-differs"),
    pytest.param(["hbm  22.5 GiB   -1.0 GiB"], ["hbm 22.5 GiB -512.0 MiB"], False, id="number-differs"),
])
def test_shown_output_matching(shown: list[str], actual: list[str], matches: bool) -> None:
    assert regen.shown_matches(shown, [regen.normalise(a) for a in actual]) is matches


def test_failure_rule() -> None:
    import subprocess

    cmd = regen.Command(ROOT / "README.md", 1, "canary fit h100 p.yaml", False, None)
    for code, failed in [(0, False), (1, False), (3, False), (2, True), (4, True)]:
        assert (regen.failure(cmd, subprocess.CompletedProcess([], code, "", "canary: x")) is None) is not failed
    traceback = subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last):\nValueError: boom")
    assert "ValueError: boom" in regen.failure(cmd, traceback)
    make = regen.Command(ROOT / "README.md", 1, "make demo", False, None)
    assert regen.failure(make, subprocess.CompletedProcess([], 1, "", "")) is not None


def test_the_sandbox_keeps_the_demo_out_of_the_repository(tmp_path: Path) -> None:
    """``make demo`` in a doc runs in the sandbox: its store goes to the sandbox's ``$CANARY_DEMO_DIR``,
    never to the repository's ``.canary-demo/`` (a user's demo, or another run's)."""
    sandbox = regen.Sandbox(tmp_path, ROOT)
    done = sandbox.run('python -c "from canary.demo import demo_dir; print(demo_dir())"', timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / ".canary-demo"
