"""The base of every canary data model, loading documents (YAML or JSON) into them, the pair key
every room speaks of, and the one clock reading (``utcnow``).

Models are frozen and strict: ``"12"`` is not a number, and a misspelt field is an error, not
ignored. Documents are validated in pydantic's JSON mode, where strict still accepts what a YAML or
JSON file can express (lists for tuples, strings for literals and timestamps).

``PairKey`` is what a piece of evidence is about. Evidence never carries across workload versions,
shape families, device types or resource regimes, so all six parts form the key. A device with several
residents yields one ``PairKey`` per resident; the admission checks every pair. The request, the
probe's journal, the evidence store and the certificate share this one class (``evidence_store`` re-exports
it as ``evidence_store.PairKey``).

``utcnow`` is the current time, timezone-aware in UTC: every caller that reads the clock reads it here,
and passes ``now`` on to everything below it (stage 1 and the store read no clock).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from canary.errors import InputError


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


def utcnow() -> _dt.datetime:
    """The current time, aware, in UTC."""
    return _dt.datetime.now(_dt.UTC)


KEY_FIELDS: tuple[str, ...] = (
    "resident_version",
    "resident_shape_family",
    "candidate_version",
    "candidate_shape_family",
    "device_type",
    "regime",
)


@dataclass(frozen=True, slots=True)
class PairKey:
    """Resident workload version and shape family, candidate version and shape family, device type, regime."""

    resident_version: str
    resident_shape_family: str
    candidate_version: str
    candidate_shape_family: str
    device_type: str
    regime: str

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str):
                raise InputError(f"must be a string, got {type(value).__name__}", field=f.name)
            if not value.strip():
                raise InputError("must not be empty", field=f.name)
            if value != value.strip():
                raise InputError(f"has leading or trailing whitespace: {value!r}", field=f.name)

    def as_dict(self) -> dict[str, str]:
        """The six parts by name."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> PairKey:
        """Build a key from exactly the six named parts; anything missing or extra is an ``InputError``."""
        missing = [name for name in KEY_FIELDS if name not in data]
        if missing:
            raise InputError("missing from the pair key", file=file, field=missing[0])
        extra = sorted(set(data) - set(KEY_FIELDS))
        if extra:
            raise InputError("not a part of the pair key", file=file, field=extra[0])
        try:
            return cls(**{name: data[name] for name in KEY_FIELDS})
        except InputError as exc:
            raise InputError(exc.problem, file=file, field=exc.field) from exc

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace: the same key always gives the same bytes."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """sha256 hex of :meth:`canonical_json`; stable across processes, machines and versions."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def describe(self) -> str:
        """One line for messages: ``resident@family + candidate@family on device (regime)``."""
        return (
            f"{self.resident_version}@{self.resident_shape_family} + "
            f"{self.candidate_version}@{self.candidate_shape_family} on {self.device_type} ({self.regime})"
        )


# --- identifiers: names, versions, shape families, kernel names ----------------------------------------
# Such text is echoed into tables, certificates and messages, one value per line: a newline in a
# profile's name would print a line of its own (``REJECT fake``), an ESC would restyle the terminal.

#: Longest name, version or shape family (the longest real one is a 71-character image digest).
MAX_NAME_CHARS = 256
#: Longest kernel name: a mangled C++ template instantiation runs to a few thousand characters.
MAX_KERNEL_NAME_CHARS = 8192
#: How much of a value a message echoes before it is cut (``…(N chars)`` says how long it was).
MAX_ECHOED_CHARS = 80


def shorten(text: str, limit: int = MAX_ECHOED_CHARS) -> str:
    """``text`` as a message echoes it: the first ``limit`` characters, then ``…(N chars)`` when longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} chars)"


def is_control_character(ch: str) -> bool:
    """C0 (``\\n``, ``\\t``, ESC …), DEL, C1, and the Unicode line and paragraph separators."""
    code = ord(ch)
    return code < 32 or 127 <= code < 160 or code in (0x2028, 0x2029)


def name_problem(value: str, *, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """Why ``value`` cannot be an identifier (too long, a control character), or ``None`` when it can."""
    if len(value) > max_chars:
        return f"is {len(value)} characters long; at most {max_chars}"
    for position, ch in enumerate(value):
        if is_control_character(ch):
            escaped = ch.encode("unicode_escape").decode("ascii")
            return (f"holds a control character ({escaped} at position {position + 1}); names, versions "
                    "and kernel names must be printable text on one line")
    return None


def _identifier(max_chars: int) -> Any:
    def check(value: str) -> str:
        problem = name_problem(value, max_chars=max_chars)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


#: An identifier-like text of a document: at most ``MAX_NAME_CHARS``, no control characters.
Name = Annotated[str, _identifier(MAX_NAME_CHARS)]
#: A kernel's name: at most ``MAX_KERNEL_NAME_CHARS``, no control characters.
KernelName = Annotated[str, _identifier(MAX_KERNEL_NAME_CHARS)]


def check_cli_name(value: str, *, option: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """``value`` of a command-line ``option`` that names something; ``InputError`` naming the option
    when it is empty, too long or holds a control character."""
    if not value.strip():
        raise InputError("must not be empty", field=option)
    problem = name_problem(value, max_chars=max_chars)
    if problem is not None:
        raise InputError(problem, field=option)
    return value


M = TypeVar("M", bound=BaseModel)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith(("function-", "json-or-python", "lax-or-strict", "union[")):
            continue  # pydantic's internal validator names, meaningless to a user
        else:
            path += f".{part}" if path else part
    return path or "(document)"


def validation_to_input_error(exc: ValidationError, file: str | None) -> InputError:
    """The first error names file and field; the others follow on later lines."""
    problems = []
    for err in exc.errors(include_url=False):
        field = _field_path(tuple(err["loc"]))
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown field (misspelt?)"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        # A validator may echo the value it refused: a message stays readable whatever its size.
        problems.append((shorten(field, 4 * MAX_ECHOED_CHARS), shorten(message, 8 * MAX_ECHOED_CHARS)))
    field, first = problems[0]
    rest = "".join(f"\n  also field '{f}': {m}" for f, m in problems[1:6])
    more = f"\n  … and {len(problems) - 6} more" if len(problems) > 6 else ""
    return InputError(first + rest + more, file=file, field=field)


def _jsonable(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    raise TypeError(f"cannot represent {type(value).__name__} in a document")


#: A number with an exponent that YAML 1.1 reads as text and YAML 1.2 (and JSON) as a float: ``6e2``,
#: ``1.5e3``, ``1E-3`` (1.1 wants a dot and a signed exponent: ``6.0e+2``).
_YAML12_EXPONENT_FLOAT = r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"
_loader_class: Any = None


def _safe_loader() -> Any:
    """The safe loader — libyaml's where PyYAML was built with it (ten times faster), else the pure one —
    that also reads YAML 1.2 exponent floats (``budget_s: 6e2``) as numbers, as JSON does."""
    global _loader_class
    if _loader_class is None:
        import re

        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        loader: Any = type("DocumentLoader", (base,), {})
        loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_YAML12_EXPONENT_FLOAT), list("-+0123456789."))
        _loader_class = loader
    return _loader_class


# --- limits on untrusted documents -----------------------------------------------------------------
# Profiles, snapshots, policies, plans and imports come from people who may be careless or hostile.
# Every limit is far above what a real document needs (the largest example is a few KiB) and far
# below what would cost a noticeable amount of time or memory; a violation is bad input (exit 2).

#: Largest document file read, in bytes.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: Most YAML aliases (``*name``) in one document: real files use a handful; a "billion laughs"
#: document needs many to multiply itself.
MAX_YAML_ALIASES = 64
#: Deepest nesting of mappings and lists (the models nest at most six levels).
MAX_DOCUMENT_DEPTH = 32
#: Most values (scalars, mappings, lists) in one document, counting each alias as the copy it stands for.
MAX_DOCUMENT_NODES = 200_000
#: Largest magnitude of any number in a document: 2**53, the largest integer a float holds exactly.
#: Bytes fields stop at 64 TiB, seconds at a few years; anything near this bound is a typo or an attack.
MAX_DOCUMENT_NUMBER = 2**53


def _where(path: tuple[int | str, ...]) -> str:
    return _field_path(path) if path else "(document)"


def check_limits(data: Any, *, file: str | None = None) -> None:
    """Raise ``InputError`` (naming the file, the field and the limit) when parsed document data nests
    deeper than ``MAX_DOCUMENT_DEPTH``, holds more than ``MAX_DOCUMENT_NODES`` values (an alias counts
    as the copy it stands for), or a number that is not finite or exceeds ``MAX_DOCUMENT_NUMBER``."""
    count = 0
    # Iterative, so a deep document cannot exhaust Python's stack before the depth check sees it.
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        count += 1
        if count > MAX_DOCUMENT_NODES:
            raise InputError(f"more than {MAX_DOCUMENT_NODES} values (limit MAX_DOCUMENT_NODES)", file=file)
        if isinstance(value, dict | list | tuple):
            if len(path) >= MAX_DOCUMENT_DEPTH:
                raise InputError(
                    f"nested deeper than {MAX_DOCUMENT_DEPTH} levels (limit MAX_DOCUMENT_DEPTH)",
                    file=file,
                    field=_where(path),
                )
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str | int) or isinstance(key, bool):
                        raise InputError(
                            f"a mapping key must be text, got {type(key).__name__}", file=file, field=_where(path)
                        )
                    stack.append((item, (*path, key)))
            else:
                stack.extend((item, (*path, i)) for i, item in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InputError(f"{value} is not a finite number", file=file, field=_where(path))
            if abs(value) > MAX_DOCUMENT_NUMBER:
                raise InputError(
                    f"{value:g} is out of range (limit ±2**53, MAX_DOCUMENT_NUMBER)", file=file, field=_where(path)
                )
        elif isinstance(value, int) and abs(value) > MAX_DOCUMENT_NUMBER:
            shown = str(value) if abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit number"
            raise InputError(
                f"{shown} is out of range (limit ±2**53, MAX_DOCUMENT_NUMBER)", file=file, field=_where(path)
            )


def _count_events(text: str, file: str) -> None:
    """Refuse a document with more than ``MAX_YAML_ALIASES`` aliases or more than ``MAX_DOCUMENT_NODES``
    values, counted from the parser's events before anything is composed: a 4 MiB flow list of two
    million numbers stops at the limit, where composing it first took tens of seconds and a gigabyte.
    (An alias counts once here; ``check_limits`` counts it as the copy it stands for after loading.)"""
    import yaml

    aliases = 0
    values = 0
    # One entry per open collection: ``None`` for a sequence; for a mapping, whether its next node is a
    # key. Keys are not values (``check_limits`` counts a mapping's values only), so they are not counted.
    open_collections: list[bool | None] = []
    loader = _safe_loader()(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionEndEvent):
                open_collections.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue  # the stream's and the document's start and end
            is_key = bool(open_collections) and open_collections[-1] is True
            if open_collections and open_collections[-1] is not None:
                open_collections[-1] = not open_collections[-1]  # key, value, key, value …
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise InputError(
                        f"more than {MAX_YAML_ALIASES} YAML aliases (limit MAX_YAML_ALIASES)", file=file
                    )
            elif not is_key:
                values += 1
                if values > MAX_DOCUMENT_NODES:
                    raise InputError(f"more than {MAX_DOCUMENT_NODES} values (limit MAX_DOCUMENT_NODES)", file=file)
            if isinstance(event, yaml.CollectionStartEvent):
                open_collections.append(True if isinstance(event, yaml.MappingStartEvent) else None)
    finally:
        loader.dispose()


def read_text_limited(path: str | Path, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "a YAML or JSON file") -> str:
    """The text of a regular file of at most ``limit`` bytes; ``InputError`` naming the file otherwise.

    Devices, FIFOs and directories are refused before they are opened (opening a FIFO blocks,
    reading ``/dev/zero`` never ends)."""
    import stat

    file = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError("file not found", file=file) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=file) from None
    except ValueError:  # a NUL byte in the name
        raise InputError("not a file name (holds a NUL character)", file=file) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"is a directory, expected {what}", file=file)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"not a regular file (a device, FIFO or socket), expected {what}", file=file)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=file) from None
    if len(raw) > limit:
        raise InputError(f"larger than {limit} bytes (limit MAX_DOCUMENT_BYTES)", file=file)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"not a UTF-8 text file (expected {what})", file=file) from None


_YAML_MERGE_TAG = "tag:yaml.org,2002:merge"


def _refuse_duplicate_keys(loader: Any, root: Any, file: str) -> None:
    """Raise ``InputError`` naming the key's path and both lines when one mapping of the composed
    document ``root`` holds the same key twice: YAML (and JSON) loaders keep the last value silently, so
    ``memory:`` written twice would load the second one as if the first had never been there.

    Keys compare as the values they load as (``1`` and ``01`` are the same key, ``"1"`` is another).
    A merge (``<<: *base``) is not a duplicate: overriding merged keys is what it is for. Each mapping
    node is checked once, so an alias that repeats a mapping costs nothing more."""
    import yaml

    seen_nodes: set[int] = set()
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, i)) for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first_line: dict[Any, str] = {}
            first_column: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _YAML_MERGE_TAG:
                    stack.append((value_node, path))
                    continue
                key = loader.construct_object(key_node)
                line = f"line {key_node.start_mark.line + 1}"
                try:
                    earlier = first_line.get(key)
                except TypeError:  # an unhashable key; check_limits refuses it after loading
                    continue
                shown = str(key)  # a mapping key, even a number: ``m.1``, not the list index ``m[1]``
                if earlier is not None:
                    if earlier == line:  # JSON on one line: the columns tell the two apart
                        earlier = f"{earlier}, column {first_column[key]}"
                        line = f"{line}, column {key_node.start_mark.column + 1}"
                    raise InputError(
                        f"the key {shown!r} appears twice in one mapping, at {earlier} and at "
                        f"{line}; a YAML/JSON loader would keep only the last value, so remove one",
                        file=file,
                        field=_field_path((*path, shown)),
                    )
                first_line[key] = line
                first_column[key] = key_node.start_mark.column + 1
                stack.append((value_node, (*path, shown)))


def _load_yaml(text: str, file: str) -> Any:
    """The data of the single YAML/JSON document ``text``, loaded by the safe loader after the
    composed node tree is checked for duplicate keys (:func:`_refuse_duplicate_keys`)."""
    loader = _safe_loader()(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _refuse_duplicate_keys(loader, root, file)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (by content; JSON is YAML). Errors name the file and line, or the
    limit a hostile document crossed (size, aliases, depth, values, number range), or a key written
    twice in one mapping (its path and both lines)."""
    import yaml

    file = str(path)
    text = read_text_limited(path)
    try:
        _count_events(text, file)
        data = _load_yaml(text, file)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"malformed YAML/JSON{where}: {problem}", file=file) from None
    except (RecursionError, MemoryError):
        raise InputError(
            f"nested too deeply to parse (limit MAX_DOCUMENT_DEPTH = {MAX_DOCUMENT_DEPTH})", file=file
        ) from None
    except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
        if "integer string conversion" in str(exc):
            raise InputError(
                "a number with thousands of digits is out of range (limit ±2**53, MAX_DOCUMENT_NUMBER)", file=file
            ) from None
        raise InputError(f"malformed YAML/JSON: {str(exc).splitlines()[0]}", file=file) from None
    except (IndexError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        # PyYAML's constructors fail this way on some tagged values (``!!float`` with no digits).
        raise InputError(f"malformed YAML/JSON: a value cannot be read ({type(exc).__name__})", file=file) from None
    if data is None:
        raise InputError("the file is empty", file=file)
    check_limits(data, file=file)
    return data


def validate_document(model: type[M], data: Any, *, file: str | None = None) -> M:
    """Validate parsed document data into ``model``; raise ``InputError`` naming file and field."""
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of fields at the top level, got {type(data).__name__}", file=file)
    check_limits(data, file=file)
    try:
        payload = json.dumps(data, default=_jsonable)
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc), file=file) from None
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise validation_to_input_error(exc, file) from None


def load_document(model: type[M], path: str | Path) -> M:
    return validate_document(model, read_document(path), file=str(path))


# --- JSON Schema of documents ----------------------------------------------------------------------


def _size_pattern() -> str:
    """The regular expression of a size string, built from the loader's own unit table (``canary.units``),
    written without flags (JSON Schema patterns are ECMA-262): each unit letter in either case."""
    from canary.units import _DOCUMENT_UNITS

    units = sorted((u for u in _DOCUMENT_UNITS if u), key=lambda u: (-len(u), u))
    spelled = "|".join("".join(f"[{ch.lower()}{ch.upper()}]" for ch in unit) for unit in units)
    return rf"^\s*[0-9]*\.?[0-9]+\s*(?:{spelled})?\s*$"


def size_json_schema(*, least_nonzero: int | None = None) -> dict[str, Any]:
    """What a size field (``canary.units.Bytes``) accepts in a document: a whole number of bytes, or a
    number with a unit. With ``least_nonzero``, a number of bytes is 0 or at least that many (the
    loader refuses smaller sizes written with a unit too, which a pattern cannot say)."""
    from canary.units import MAX_BYTES

    integer: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_BYTES, "description": "bytes"}
    if least_nonzero is not None:
        integer = {
            "type": "integer",
            "maximum": MAX_BYTES,
            "anyOf": [{"const": 0}, {"minimum": least_nonzero}],
            "description": f"bytes: 0, or at least {least_nonzero} (a smaller size is a unit left off)",
        }
    return {
        "anyOf": [
            integer,
            {
                "type": "string",
                "pattern": _size_pattern(),
                "description": "a number with a unit, any letter case: KiB MiB GiB TiB PiB or Ki Mi Gi Ti Pi "
                "(powers of 1024), kB MB GB TB PB or k M G T P (powers of 1000), B; e.g. 40Gi, 18GB, 512MiB, "
                "1.5Gi. It must come out a whole number of bytes, at most 64 TiB",
            },
        ]
    }


def document_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema (2020-12) a document of ``model`` must satisfy to load: as pydantic describes the
    model, except that size fields (``canary.units.Bytes``, read by a validator before the integer check)
    take an integer or a size string such as ``40Gi`` (:func:`size_json_schema`), as the loader does."""
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
    from pydantic_core import core_schema

    from canary.units import parse_bytes

    class DocumentJsonSchema(GenerateJsonSchema):
        def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
            function = schema["function"]["function"]
            if function is parse_bytes:
                return size_json_schema()
            least = getattr(function, "least_nonzero_bytes", None)
            if isinstance(least, int):  # a size that is 0 or at least ``least`` (a workload's GPU memory)
                return size_json_schema(least_nonzero=least)
            return super().function_before_schema(schema)

    schema = model.model_json_schema(mode="validation", schema_generator=DocumentJsonSchema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
