"""The base of every canary data model, and loading documents (YAML or JSON) into them.

Models are frozen and strict: ``"12"`` is not a number, and a misspelt field is an error, not
ignored. Documents are validated in pydantic's JSON mode, where strict still accepts what a YAML or
JSON file can express (lists for tuples, strings for literals and timestamps).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from canary.errors import InputError


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


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
        problems.append((field, message))
    field, first = problems[0]
    rest = "".join(f"\n  also field '{f}': {m}" for f, m in problems[1:6])
    more = f"\n  … and {len(problems) - 6} more" if len(problems) > 6 else ""
    return InputError(first + rest + more, file=file, field=field)


def _jsonable(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    raise TypeError(f"cannot represent {type(value).__name__} in a document")


def _safe_loader() -> Any:
    """libyaml's safe loader where PyYAML was built with it (ten times faster), else the pure one."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (by content; JSON is YAML). Errors name the file and line."""
    import yaml

    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=file) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a YAML or JSON file", file=file) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (expected YAML or JSON)", file=file) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=file) from None
    try:
        data = yaml.load(text, Loader=_safe_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"malformed YAML/JSON{where}: {problem}", file=file) from None
    if data is None:
        raise InputError("the file is empty", file=file)
    return data


def validate_document(model: type[M], data: Any, *, file: str | None = None) -> M:
    """Validate parsed document data into ``model``; raise ``InputError`` naming file and field."""
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of fields at the top level, got {type(data).__name__}", file=file)
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
