"""Reading and writing the catalog cache as ``canary.catalog`` does: a first line naming the SHA-256 of
the JSON text that follows it. Tests that damage a cache on purpose re-sign it with ``write_signed``
to reach the checks behind the checksum; ``write_unsigned`` leaves the old checksum, as an edit would."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import canary.catalog as catalog


def read(path: Path) -> Any:
    return json.loads(path.read_bytes().partition(b"\n")[2])


def write_signed(path: Path, data: Any) -> None:
    body = json.dumps(data, separators=(",", ":")).encode()
    path.write_bytes(catalog._CACHE_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def write_unsigned(path: Path, data: Any) -> None:
    head = path.read_bytes().partition(b"\n")[0]
    path.write_bytes(head + b"\n" + json.dumps(data, separators=(",", ":")).encode())
