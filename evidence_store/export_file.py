"""The evidence export file: its format, its signature, and writing and reading it.

Format (JSON lines): the first line is ``{"format": "canary-evidence", "version": 3}``; every following
line is one stored record (``EvidenceOut``: the observation, its id, key digest and status), slowdowns
in percent (``resident_slowdown_pct``: 5.0 is 5% slower). A key written twice in one mapping (a line, or
the header) is refused, never "last one wins".

Versions (``EXPORT_VERSION`` is written; ``READ_VERSIONS`` are read):

* 3 — every record carries ``status_changed_at`` (``null`` when unknown or current). A reader that
  refuses unknown fields would refuse each line of such a file for that field; the new version makes
  an older canary say "version 3" is not one it reads instead.
* 2 — records without ``status_changed_at``; files written while it was optional in version 2 carry it,
  and are read as they are.
* 1 — slowdowns as fractions, without the ``_pct`` suffix: ``schemas.record_from_v1`` converts them.

A file signed with the fleet key (``read_fleet_key``: ``--key FILE`` or ``$CANARY_FLEET_KEY_FILE``)
names the key in its header (``key_id``) and ends with ``{"hmac_sha256": "<hex>"}``, the HMAC of every
byte before that line. ``read_export`` validates every line before anything is stored; moving the
records in and out of a store is ``evidence_store.transfer``, an imported record's checks
``evidence_store.import_check``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from canary._model import check_limits
from canary.errors import CanaryError, InputError
from evidence_store.import_check import check_json_numbers
from evidence_store.schemas import EXPORT_FORMAT, EvidenceOut, record_from_v1

#: The version written. See the module docstring for what each version holds.
EXPORT_VERSION = 3
READ_VERSIONS = (1, 2, 3)


class ExportHeader(BaseModel):
    """The first line of an export file. ``key_id`` (the first 16 hex digits of the sha256 of the fleet
    key) is present when the file is signed; its last line is then ``{"hmac_sha256": "<hex>"}``, the
    HMAC of every byte before that line under the key."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: Literal["canary-evidence"]
    version: Literal[1, 2, 3]
    key_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")


class _RepeatedKey(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: a mapping, unless a key is written twice in it."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _RepeatedKey(name)
        out[name] = value
    return out


def _loads(text: str) -> Any:
    """One line of JSON; ``_RepeatedKey`` when a mapping in it names a key twice."""
    return json.loads(text, object_pairs_hook=_refuse_repeats)


def _repeated(err: _RepeatedKey, number: int, name: str) -> InputError:
    return InputError(
        f"line {number}: key {err.name[:60]!r} is written twice in one mapping (which one counts is not "
        "canary's guess to make)",
        file=name,
        field=err.name[:60],
    )


def header_line(key: bytes | None = None) -> str:
    header: dict[str, Any] = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
    if key is not None:
        header["key_id"] = key_id(key)
    return json.dumps(header, sort_keys=True)


MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096


def key_id(key: bytes) -> str:
    import hashlib

    return hashlib.sha256(key).hexdigest()[:16]


def read_fleet_key(path: str | None) -> bytes | None:
    """The fleet key from a key file (operator configuration: ``--key FILE`` or
    ``$CANARY_FLEET_KEY_FILE``); ``None`` when neither names one. The file holds at least 16 bytes
    (surrounding whitespace ignored)."""
    import stat

    if path is None:
        path = os.environ.get("CANARY_FLEET_KEY_FILE") or None
    if path is None:
        return None
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("the fleet key must be a regular file", file=path, field="--key")
        with open(path, "rb") as fh:
            key = fh.read(MAX_KEY_BYTES + 1).strip()
    except FileNotFoundError:
        raise InputError("fleet key file not found", file=path, field="--key") from None
    except OSError as err:
        raise InputError(f"cannot read the fleet key: {err.strerror}", file=path, field="--key") from None
    except ValueError:
        raise InputError("not a file name (holds a NUL character)", file=path, field="--key") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise InputError(f"a fleet key holds {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes", file=path, field="--key")
    return key


def check_export_target(path: Path) -> None:
    """Refuse a target that is not a regular file (or not there yet): a device, FIFO, socket or
    directory is never replaced by the export."""
    import stat

    try:
        info = os.stat(path)  # follows a link: what would really be replaced
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise InputError(f"directory {path.parent} does not exist", file=str(path)) from None
        return
    except OSError as err:
        raise InputError(f"cannot use as export target: {err.strerror}", file=str(path)) from None
    except ValueError:
        raise InputError("not a file name (holds a NUL character)", file=str(path)) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError("is a directory; give a file name", file=str(path))
    if not stat.S_ISREG(info.st_mode):
        raise InputError("not a regular file (a device, FIFO or socket); refusing to replace it", file=str(path))


def _export_lines(records: Iterable[EvidenceOut], key: bytes | None) -> Iterator[str]:
    import hashlib
    import hmac

    mac = hmac.new(key, digestmod=hashlib.sha256) if key is not None else None
    lines = [header_line(key) + "\n"]
    lines_iter = (
        json.dumps(rec.model_dump(mode="json"), sort_keys=True, separators=(",", ":")) + "\n" for rec in records
    )
    for line in _chain(lines, lines_iter):
        if mac is not None:
            mac.update(line.encode("utf-8"))
        yield line
    if mac is not None:
        yield json.dumps({"hmac_sha256": mac.hexdigest()}) + "\n"


def _chain(first: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from rest


def write_export(
    path: Path | None, records: Iterable[EvidenceOut], out: IO[str] | None = None, *, key: bytes | None = None
) -> int:
    """Write the export to ``path`` atomically (a temporary file renamed into place), or to ``out``
    when ``path`` is ``None``; signed with ``key`` when given. Returns the record count. A target that
    is not a regular file is refused (``InputError``) before anything is written."""
    count = -1 if key is None else -2
    if path is None:
        stream = out or sys.stdout
        for line in _export_lines(records, key):
            stream.write(line)
            count += 1
        stream.flush()
        return count
    path = Path(os.path.abspath(path))
    check_export_target(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in _export_lines(records, key):
                fh.write(line)
                count += 1
        check_export_target(path)  # nothing swapped in meanwhile
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return count


#: Largest export file read, and longest line in it (a record is about 1 KiB).
MAX_IMPORT_BYTES = 512 * 1024 * 1024
MAX_IMPORT_LINE_BYTES = 64 * 1024


def _validation_field(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(record)"
    return loc, first["msg"]


def read_export(path: Path, *, key: bytes | None = None) -> list[tuple[int, EvidenceOut]]:
    """Every record of an export file with its line number, all validated before anything is stored.

    With ``key`` (the fleet key), the file must be signed with it: a file without a signature, signed
    with another key, or changed after signing is refused. Raises ``InputError`` naming the file, the
    line and the field for an unreadable, corrupt, wrong-version or wrongly signed file.
    """
    import stat

    name = str(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise InputError("is a directory, expected an evidence export file", file=name)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file (a device, FIFO or socket)", file=name)
        with open(path, "rb") as fh:
            raw = fh.read(MAX_IMPORT_BYTES + 1)
    except FileNotFoundError:
        raise InputError("file not found", file=name) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=name) from None
    except ValueError:  # a NUL byte in the name
        raise InputError("not a file name (holds a NUL character)", file=name) from None
    if len(raw) > MAX_IMPORT_BYTES:
        raise InputError(f"larger than {MAX_IMPORT_BYTES} bytes (limit MAX_IMPORT_BYTES)", file=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad_line = raw[: err.start].count(b"\n") + 1
        raise InputError(f"line {bad_line}: not UTF-8 text", file=name) from err
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise InputError("line 1: empty file; expected the header " + header_line(), file=name)
    try:
        header_data = _loads(lines[0])
    except _RepeatedKey as err:
        raise _repeated(err, 1, name) from None
    except json.JSONDecodeError as err:
        raise InputError(f"line 1: header is not JSON ({err.msg})", file=name) from err
    except (RecursionError, ValueError) as err:
        raise InputError(f"line 1: header is not JSON ({str(err).splitlines()[0][:80]})", file=name) from err
    try:
        header = ExportHeader.model_validate(header_data)
    except ValidationError as err:
        loc, msg = _validation_field(err)
        raise InputError(
            f"line 1: not a canary evidence export this canary reads (versions "
            f"{', '.join(map(str, READ_VERSIONS))}; {msg}; expected e.g. {header_line()})",
            file=name,
            field=loc,
        ) from err
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_IMPORT_LINE_BYTES:
            raise InputError(
                f"line {number}: longer than {MAX_IMPORT_LINE_BYTES} characters (limit MAX_IMPORT_LINE_BYTES)",
                file=name,
            )
    lines = _verified(lines, header, key, name)
    records: list[tuple[int, EvidenceOut]] = []
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_IMPORT_LINE_BYTES:
            raise InputError(
                f"line {number}: longer than {MAX_IMPORT_LINE_BYTES} characters (limit MAX_IMPORT_LINE_BYTES)",
                file=name,
            )
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            raise InputError(f"line {number}: blank line inside the file", file=name)
        try:
            data = _loads(line)
        except _RepeatedKey as err:
            raise _repeated(err, number, name) from None
        except json.JSONDecodeError as err:
            raise InputError(f"line {number}: not JSON ({err.msg} at column {err.colno})", file=name) from err
        except (RecursionError, ValueError) as err:  # nesting or a number too long to convert
            raise InputError(f"line {number}: not a record ({str(err).splitlines()[0][:80]})", file=name) from err
        check_limits(data, file=f"{name}: line {number}")
        if header.version == 1:
            data = record_from_v1(data)
        check_json_numbers(data, line=number, file=name)
        try:
            records.append((number, EvidenceOut.model_validate(data)))
        except ValidationError as err:
            loc, msg = _validation_field(err)
            raise InputError(f"line {number}: {msg}", file=name, field=loc) from err
        except CanaryError as err:  # the pair key validates itself
            field = getattr(err, "field", None)
            raise InputError(
                f"line {number}: {getattr(err, 'problem', str(err))}",
                file=name,
                field=f"key.{field}" if field else "key",
            ) from err
    return records


def _verified(lines: list[str], header: ExportHeader, key: bytes | None, name: str) -> list[str]:
    """The lines without the signature line; ``InputError`` when a configured key does not verify."""
    import hashlib
    import hmac

    if header.key_id is None:
        if key is not None:
            raise InputError("not signed, and this fleet accepts only files signed with its key", file=name,
                             field="key_id")
        return lines
    last = lines[-1] if len(lines) > 1 else ""
    try:
        trailer = _loads(last)
    except ValueError:
        trailer = None
    if not (isinstance(trailer, dict) and set(trailer) == {"hmac_sha256"} and isinstance(trailer["hmac_sha256"], str)):
        raise InputError(f"line {len(lines)}: a signed file ends with its signature line", file=name)
    body = lines[:-1]
    if key is None:
        return body  # signed, but this store has no fleet key to check it with: its records are still checked
    if header.key_id != key_id(key):
        raise InputError(f"signed with another key (key id {header.key_id}, this fleet's is {key_id(key)})",
                         file=name, field="key_id")
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for line in body:
        mac.update((line + "\n").encode("utf-8"))
    if not hmac.compare_digest(mac.hexdigest(), trailer["hmac_sha256"]):
        raise InputError("the signature does not match: the file was changed after it was signed", file=name,
                         field="hmac_sha256")
    return body
