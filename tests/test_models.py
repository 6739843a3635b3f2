"""Models: sizes with units, strictness, errors that name file and field, policies, public API."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import canary
from canary.errors import InputError
from canary.policy import POLICY_DIR, available_policies, load_policy
from canary.profile import load_profile
from canary.snapshot import load_snapshot
from canary.units import parse_bytes
from tests.support.paths import EXAMPLES


@pytest.mark.parametrize(("text", "value"), [
    ("18Gi", 18 * 2**30), ("18GiB", 18 * 2**30), ("40GB", 40 * 10**9), ("512Mi", 512 * 2**20),
    ("4096", 4096), (4096, 4096), ("1.5Gi", 3 * 2**29), ("0", 0),
    ("4k", 4000), ("2.5kB", 2500), ("1TiB", 2**40), (" 7 MiB ", 7 * 2**20),
])
def test_sizes_with_units(text: object, value: int) -> None:
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["-1", -5, "abc", "18 parsecs", "100TiB", True, 1.5,
                                  "40GB extra", "0.3B", "1.0000001Ki", "8bit"])
def test_bad_sizes(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


BASE = "name: x\nversion: '1'\nmemory: {reserved_bytes: 1Gi, peak_bytes: 2Gi}\n"


@pytest.mark.parametrize(("body", "field", "words"), [
    (BASE + "kernels:\n  - {name: k, registers_per_thread: 32, threads_per_blok: 128}\n",
     "kernels[0].threads_per_block", "missing"),
    (BASE + "kernels:\n  - {name: k, registers_per_thread: '32', threads_per_block: 128}\n",
     "kernels[0].registers_per_thread", "integer"),
    (BASE + "kernels:\n  - {name: k, registers_per_thread: 300, threads_per_block: 128}\n",
     "kernels[0].registers_per_thread", "255"),
    ("name: x\nversion: '1'\nmemory: {reserved_bytes: -1Gi, peak_bytes: 2Gi}\n", "memory.reserved_bytes", "size"),
    ("name: x\nversion: '1'\nmemory: {reserved_bytes: 3Gi, peak_bytes: 2Gi}\n", "memory", "peak_bytes"),
    ("name: x\nversion: '1'\n", "memory", "missing"),
    (BASE + "duty_cycle: 1.5\n", "duty_cycle", "1"),
    (BASE + "workload_class: realtime\n", "workload_class", "online-inference"),
    (BASE + "canary: {executor: process}\n", "canary", "command"),
])
def test_profile_errors_name_file_and_field(tmp_path: Path, body: str, field: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(body)
    with pytest.raises(InputError) as err:
        load_profile(path)
    assert err.value.field == field
    assert str(path) in str(err.value)
    assert words in str(err.value)


@pytest.mark.parametrize(("body", "words"), [
    ("name: [unclosed\n", "malformed YAML/JSON at line"),
    ("", "empty"),
    ("- a\n- b\n", "mapping"),
    ('{"name": "x", ', "malformed"),
])
def test_malformed_documents(tmp_path: Path, body: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match=words):
        load_profile(path)


def test_missing_file() -> None:
    with pytest.raises(InputError, match="file not found"):
        load_profile("/nonexistent/profile.yaml")


def test_every_example_profile_loads_and_json_round_trips() -> None:
    for path in sorted((EXAMPLES / "profiles").glob("*.yaml")):
        p = load_profile(path)
        assert type(p).model_validate_json(p.model_dump_json()) == p


def test_snapshot_resolves_resident_profiles_relative_to_itself() -> None:
    snap = load_snapshot(EXAMPLES / "snapshots" / "a-persistent-35pct.yaml")
    assert snap.residents[0].profile is not None
    assert snap.residents[0].profile.kernels[0].persistent


def test_snapshot_with_missing_resident_profile(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("device_type: h100-sxm\nresidents:\n  - {name: r, profile: nope.yaml}\n")
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    assert err.value.field == "residents[0].profile"


def test_snapshot_used_more_than_total(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("device_type: h100-sxm\nmemory_total_bytes: 80Gi\nmemory_used_bytes: 81Gi\n")
    with pytest.raises(InputError, match="exceeds"):
        load_snapshot(path)


def test_policies_load_and_differ_where_documented() -> None:
    assert {"default", "online-inference", "batch", "training"} <= set(available_policies())
    online, batch = load_policy("online-inference"), load_policy("batch")
    assert online.budget_for("online-inference").required_confidence > batch.budget_for("online-inference").required_confidence
    assert batch.allow_cross_driver_evidence and not online.allow_cross_driver_evidence
    with pytest.raises(InputError, match="no policy named"):
        load_policy("nope")


def test_policy_without_every_class_fails_at_load(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nrisk_budgets:\n  batch: {max_probe_time_s: 10, max_requests_exposed: 10, "
                    "max_resident_slowdown_pct: 10, required_confidence: 0.9}\n")
    with pytest.raises(InputError, match="online-inference"):
        load_policy(path)


def test_public_api_is_sorted_and_importable() -> None:
    assert canary.__all__ == sorted(canary.__all__)
    for name in canary.__all__:
        assert getattr(canary, name) is not None


def test_import_canary_is_light() -> None:
    code = ("import sys, canary, canary.cli, canary.commands.fit; "
            "bad = [m for m in ('sqlalchemy', 'alembic', 'pynvml', 'cuda', 'amdsmi', 'numpy', 'anyio') if m in sys.modules]; "
            "print(bad); raise SystemExit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_example_snapshot_passes_the_consistency_checks() -> None:
    from canary.backends import resolve_device

    paths = sorted((EXAMPLES / "snapshots").glob("*.yaml"))
    assert len(paths) >= 10
    for path in paths:
        device = resolve_device(str(path))  # raises InputError on an impossible snapshot
        assert device.snapshot.device_type


# --------------------------------------------------------------------------- the documents' JSON Schemas

SCHEMA_KINDS = ("profile", "snapshot", "policy")


def _schema(kind: str) -> dict[str, Any]:
    from canary.commands.schema import schema_of

    return schema_of(kind)


def _properties(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property schema at every level (``$defs`` included), with where it is."""
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            yield f"{path}.{name}", prop
        for key, value in node.items():
            yield from _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _properties(value, f"{path}[{i}]")


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_every_property_of_a_document_schema_has_a_description(kind: str) -> None:
    props = list(_properties(_schema(kind)))
    assert len(props) > 15  # the walk reached the nested models
    missing = [where for where, prop in props if not str(prop.get("description", "")).strip()]
    assert missing == []


def _validator(schema: dict[str, Any]) -> Callable[[Any], bool]:
    """A JSON Schema 2020-12 validator: ``jsonschema`` where it is installed, else ``jsonschema_rs``."""
    try:
        import jsonschema
    except ImportError:
        try:
            import jsonschema_rs
        except ImportError:
            pytest.skip("needs the jsonschema or jsonschema_rs package (a JSON Schema validator)")
        return jsonschema_rs.Draft202012Validator(schema).is_valid  # type: ignore[no-any-return]
    validator = jsonschema.Draft202012Validator(schema)
    return validator.is_valid  # type: ignore[no-any-return]


def _as_loaded(path: Path) -> Any:
    """The document as the loader validates it: parsed, then through JSON (YAML dates become text)."""
    from canary._model import _jsonable, read_document

    return json.loads(json.dumps(read_document(path), default=_jsonable))


@pytest.mark.parametrize(("kind", "path"), [
    *[pytest.param("profile", p, id=f"profiles/{p.name}") for p in sorted((EXAMPLES / "profiles").glob("*.yaml"))],
    *[pytest.param("snapshot", p, id=f"snapshots/{p.name}") for p in sorted((EXAMPLES / "snapshots").glob("*.yaml"))],
    *[pytest.param("policy", p, id=f"policies/{p.name}") for p in sorted(POLICY_DIR.glob("*.yaml"))],
])
def test_every_example_validates_against_its_schema(kind: str, path: Path) -> None:
    assert _validator(_schema(kind))(_as_loaded(path))


PROFILE = {"name": "x", "version": "1", "memory": {"reserved_bytes": "40Gi", "peak_bytes": "42Gi"},
           "kernels": [{"name": "k", "registers_per_thread": 32, "threads_per_block": 128}]}
SNAPSHOT = {"device_type": "h100-sxm", "memory_total_bytes": "80Gi",
            "residents": [{"name": "r", "observed_memory_bytes": 4096}]}


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``path`` (``memory.peak_bytes``, ``kernels.0.name``) set to ``value``."""
    out = json.loads(json.dumps(doc))
    node: Any = out
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


# (kind, document): values the loader accepts, and so does the schema (sizes as people write them).
ACCEPTED = [
    pytest.param("profile", PROFILE, id="size-with-binary-unit"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", "18GB"), id="size-with-si-unit"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", 4 * 2**30), id="size-as-integer"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", 0), id="memory-size-zero"),
    pytest.param("profile", _with(PROFILE, "kernels.0.static_shared_bytes", 4096), id="small-on-chip-size"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", "1.5gib"), id="size-fraction-any-case"),
    pytest.param("profile", _with(PROFILE, "kernels.0.static_shared_bytes", " 48 KiB "), id="size-with-spaces"),
    pytest.param("snapshot", SNAPSHOT, id="snapshot"),
    pytest.param("snapshot", _with(SNAPSHOT, "residents.0.profile", "../profiles/llm-decode.yaml"),
                 id="resident-profile-as-a-path"),
]
# Values the loader refuses, and so does the schema.
REFUSED = [
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", "40 parsecs"), id="unknown-unit"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", "-1Gi"), id="negative-size"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", 1.5), id="fraction-of-a-byte"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", True), id="boolean-size"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", 2**47), id="size-above-64-tib"),
    pytest.param("profile", _with(PROFILE, "memory.reserved_bytes", 5), id="memory-size-without-its-unit"),
    pytest.param("profile", _with(PROFILE, "kernels.0.threads_per_block", "128"), id="number-as-text"),
    pytest.param("profile", _with(PROFILE, "kernels.0.registers_per_thread", 300), id="registers-above-255"),
    pytest.param("profile", _with(PROFILE, "kernels.0.threads_per_blok", 128), id="misspelt-field"),
    pytest.param("profile", _with(PROFILE, "workload_class", "interactive"), id="unknown-workload-class"),
    pytest.param("profile", {k: v for k, v in PROFILE.items() if k != "memory"}, id="memory-missing"),
    pytest.param("snapshot", _with(SNAPSHOT, "compute_mode", "SHARED"), id="unknown-compute-mode"),
    pytest.param("snapshot", _with(SNAPSHOT, "residents.0.profile", 5), id="resident-profile-a-number"),
    pytest.param("snapshot", _with(SNAPSHOT, "memory_total_bytes", "80 gigs"), id="snapshot-bad-size"),
]


def _loads(kind: str, doc: dict[str, Any], tmp_path: Path) -> bool:
    """Whether canary's own loader takes the document (as a file, so resident profile paths resolve)."""
    folder = tmp_path / "snapshots"
    folder.mkdir(exist_ok=True)
    if kind == "snapshot" and not (tmp_path / "profiles").exists():
        (tmp_path / "profiles").symlink_to(EXAMPLES / "profiles")
    path = folder / "doc.json"
    path.write_text(json.dumps(doc))
    try:
        (load_profile if kind == "profile" else load_snapshot)(path)
    except InputError:
        return False
    return True


@pytest.mark.parametrize(("kind", "doc"), ACCEPTED)
def test_what_the_loader_accepts_the_schema_accepts(kind: str, doc: dict[str, Any], tmp_path: Path) -> None:
    assert _loads(kind, doc, tmp_path)
    assert _validator(_schema(kind))(doc)


@pytest.mark.parametrize(("kind", "doc"), REFUSED)
def test_what_the_loader_refuses_the_schema_refuses(kind: str, doc: dict[str, Any], tmp_path: Path) -> None:
    assert not _loads(kind, doc, tmp_path)
    assert not _validator(_schema(kind))(doc)


def test_schema_command_prints_the_size_forms() -> None:
    """``canary schema profile`` as a user runs it: memory takes 40Gi, not only an integer."""
    from tests.support.paths import canary_cmd

    proc = subprocess.run([*canary_cmd(), "schema", "profile"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    reserved = json.loads(proc.stdout)["$defs"]["MemoryEnvelope"]["properties"]["reserved_bytes"]
    assert {alt["type"] for alt in reserved["anyOf"]} == {"integer", "string"}
    assert "40Gi" in json.dumps(reserved)
