"""Fuzz targets and input strategies shared by ``test_fuzz.py`` (brief, fixed seed, in CI) and
``benchmarks/fuzz.py`` (minutes, fresh seeds).

A target takes one generated input and raises ``AssertionError`` when canary misbehaves on it: any
exception other than canary's own ``InputError`` from a loader, or from the CLI a traceback, an exit
code outside the contract, more than one message line, or a changed store after a refusal.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from canary.errors import InputError
from tests.security.adversarial import POLICY, PROFILE, SNAPSHOT, store_digest

# --- documents -----------------------------------------------------------------------------------

_YAML_PIECES = [
    "name: ", "version: ", "memory:\n  ", "peak_bytes: ", "reserved_bytes: ", "kernels:\n  - ", "- ", "&a ",
    "*a", "&b ", "*b", "[", "]", "{", "}", ", ", ": ", "\n", "  ", "\t", "!!python/object:os.system ", "!!str ",
    "!!float ", ".inf", "-.inf", ".nan", "1e300", "1.0e+300", "9" * 30, "-1", "0", "0.5", "18Gi", "'x'", '"y"',
    "null", "true", "~", "<<: *a\n", "---\n", "...\n", "#", "%YAML 1.1\n", "? ", "|\n  ", ">\n  ", "\x00", "\ufeff",
    "é", "\U0001f600", "residents:\n  - ", "profile: ", "/dev/zero", "../../etc/passwd", "canary:\n  ",
    "monitor: http\n  endpoint: http://169.254.169.254\n", "risk_budgets:\n  ", "pairs:\n  - ",
]

yaml_texts = st.lists(st.sampled_from(_YAML_PIECES) | st.text(max_size=8), max_size=40).map("".join)

_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=40,
)


def _base(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


BASES = {"profile": _base(PROFILE), "snapshot": _base(SNAPSHOT), "policy": _base(POLICY)}


@st.composite
def mutated_documents(draw: st.DrawFn) -> tuple[str, str]:
    """A real profile, snapshot or policy with one field replaced, removed or added; as YAML or JSON."""
    kind = draw(st.sampled_from(sorted(BASES)))
    data = json.loads(json.dumps(BASES[kind], default=str))
    node: Any = data
    while isinstance(node, dict | list) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
        if not isinstance(node[key], dict | list) or not node[key]:
            break
        node = node[key]
    if isinstance(node, dict):
        key = draw(st.sampled_from([*sorted(node), "injected"])) if node else "injected"
        if draw(st.integers(0, 5)) == 0 and key in node:
            del node[key]
        else:
            node[key] = draw(json_values)
    elif isinstance(node, list) and node:
        node[draw(st.integers(0, len(node) - 1))] = draw(json_values)
    as_json = draw(st.booleans())
    text = json.dumps(data) if as_json else yaml.safe_dump(data, allow_unicode=True)
    return kind, text


def _loaders() -> dict[str, Callable[[Path], Any]]:
    from canary.jobs.plan import load_plan
    from canary.policy import load_policy
    from canary.profile import load_profile
    from canary.snapshot import load_snapshot

    return {"profile": load_profile, "snapshot": load_snapshot, "policy": load_policy, "plan": load_plan}


def check_loaders(text: str | bytes, folder: Path, kinds: tuple[str, ...] | None = None) -> None:
    """Every loader on ``text`` returns a model or raises ``InputError``, nothing else."""
    path = folder / "doc.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    for kind, load in _loaders().items():
        if kinds is not None and kind not in kinds:
            continue
        try:
            load(path)
        except InputError as exc:
            assert str(exc), f"{kind}: an empty message"
        except Exception as exc:  # pragma: no cover - the failure being hunted
            raise AssertionError(f"{kind} loader raised {type(exc).__name__}: {exc!r} on {text[:200]!r}") from exc


# --- evidence import -------------------------------------------------------------------------------

HEADER = '{"format":"canary-evidence","version":2}'


@st.composite
def export_files(draw: st.DrawFn) -> str:
    from tests.security.adversarial import _record, now_utc

    record = _record(now_utc())
    lines = [HEADER] if draw(st.integers(0, 9)) else [draw(st.text(max_size=60))]
    for _ in range(draw(st.integers(0, 3))):
        rec = dict(record)
        for _ in range(draw(st.integers(0, 3))):
            rec[draw(st.sampled_from([*sorted(rec), "extra"]))] = draw(json_values)
        line = json.dumps(rec, allow_nan=True)
        if draw(st.integers(0, 6)) == 0:
            cut = draw(st.integers(0, len(line)))
            line = line[:cut] + draw(st.text(max_size=10)) + line[cut:]
        lines.append(line)
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


def check_import(text: str, folder: Path) -> None:
    """Reading and checking an export file ends in records or ``InputError``, nothing else."""
    from evidence_store.export_file import read_export
    from evidence_store.import_check import check_record
    from tests.security.adversarial import now_utc

    path = folder / "export.jsonl"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        for line, rec in read_export(path):
            check_record(rec, line=line, file=str(path), max_slowdown_pct=25.0, min_confidence=0.9,
                         ttl_s=7 * 86400.0, now=now_utc())
    except InputError:
        return
    except Exception as exc:  # pragma: no cover
        raise AssertionError(f"import raised {type(exc).__name__}: {exc!r} on {text[:300]!r}") from exc


# --- the command line ------------------------------------------------------------------------------

_TOKENS = [
    "{profile}", "{snapshot}", "{policy}", "{doc}", "{doc}", "{export}", "/dev/zero", "{dir}", "h100", "h100-sxm",
    "h9000", "a100-80gb", "nvml:x", "--json", "--no-store", "--no-probe", "--regime", "mps:50", "mps:abc",
    "mig:1g.10gb", "green:8", "timeslice", "--policy", "default", "--resident", "--limit", "-1", "0", "nan",
    "inf", "1e300", "--before", "2026-01-01", "2026-01-01T00:00:00Z", "--device", "--regs", "--threads",
    "--static-smem", "--dynamic-smem", "--carveout", "--pair", "a:b", ":", "--status", "stale", "x" * 300, "",
    "-", "--", "--db", "sqlite:////nonexistent/x.db", "--seed", "-5", "--why", "\x00", "é",
]
_COMMANDS = [
    ["fit"], ["admit", "--no-probe"], ["occupancy"], ["evidence", "list"], ["evidence", "show"],
    ["evidence", "import"], ["schema"], ["reservations", "list"], ["db", "current"], ["evidence", "expire"],
    ["db", "downgrade"],
]

cli_argvs = st.tuples(st.sampled_from(_COMMANDS), st.lists(st.sampled_from(_TOKENS) | st.text(max_size=12),
                                                           max_size=8))


def _fill(token: str, paths: dict[str, str]) -> str:
    for name, value in paths.items():
        token = token.replace("{" + name + "}", value)
    return token


def check_cli(command: list[str], tokens: list[str], *, store: str, paths: dict[str, str]) -> None:
    """One CLI run in-process: an exit code of the contract, no traceback, at most one message line
    on a refusal, and the store unchanged unless the command succeeded."""
    from canary.cli import _run, build_parser

    argv = ["--db", store, *command, *(_fill(t, paths) for t in tokens)]
    before = store_digest(store)
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = _run(build_parser(), argv)
        except SystemExit as exc:
            code = int(exc.code) if isinstance(exc.code, int) else 2
        except Exception as exc:  # pragma: no cover
            raise AssertionError(f"{argv!r}: {type(exc).__name__}: {exc!r}") from exc
    text = err.getvalue()
    assert "Traceback" not in text, (argv, text)
    assert code in (0, 1, 2, 3, 4), (argv, code, text)
    if code != 0:
        assert store_digest(store) == before, (argv, "the store changed on a refused command", text)
    if code in (2, 4) and "usage:" not in text and "positional arguments" not in text:
        messages = [line for line in text.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
        assert len(messages) == 1, (argv, text)


def scratch_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="canary-fuzz-"))
