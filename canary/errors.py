"""Errors raised by canary, and the exit code each one maps to.

::

    CanaryError                      base; never raised itself
    ├── InputError          exit 2   bad file, field or value; names all three
    │   └── UsageError      exit 2   bad command line
    ├── OperationalError    exit 4   a device, library or database could not be reached
    │   ├── DeviceUnavailable        no driver, no library, GPU lost
    │   ├── StoreUnavailable         the evidence store is unreachable after retries
    │   └── SchemaOutOfDate          the store needs ``canary db upgrade``
    └── ProbeError          exit 4   a probe could not be run or rolled back

Third-party errors are translated at the boundary: ``raise InputError(...) from exc``.
"""

from __future__ import annotations

import sys
from typing import Any

EXIT_ADMIT = 0
EXIT_REJECT = 1
EXIT_BAD_INPUT = 2
EXIT_UNKNOWN = 3
EXIT_OPERATIONAL = 4


class CanaryError(Exception):
    """Base of every error canary raises on purpose."""

    exit_code: int = EXIT_OPERATIONAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _control(c: str) -> bool:
    o = ord(c)
    return o < 32 or 127 <= o < 160 or o in (0x2028, 0x2029)


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\r``, ``\\x1b``, C1 and the Unicode line and
    paragraph separators): a name from the command line or a file may hold them, and a message must
    stay one line that a terminal shows as written."""
    if not any(_control(c) for c in text):
        return text
    return "".join(c.encode("unicode_escape").decode("ascii") if _control(c) else c for c in text)


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, then how long it was: a file name or a field echoed
    from hostile input (an unknown key of a million characters) must not become a megabyte message."""
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"


class InputError(CanaryError):
    """Bad input: the message names the file, the field and the problem."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        where = []
        if file:
            where.append(_cut(printable(str(file)), 300))
        if field:
            where.append(f"field '{_cut(printable(field), 120)}'")
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {problem}" if prefix else problem)


class UsageError(InputError):
    """A bad command line (unknown option value, missing argument)."""


class OperationalError(CanaryError):
    """Something outside canary failed: a device, a vendor library, a database."""

    exit_code = EXIT_OPERATIONAL


class DeviceUnavailable(OperationalError):
    """The device, its driver or its management library cannot be reached."""


class StoreUnavailable(OperationalError):
    """The evidence store cannot be reached (after retries)."""


class SchemaOutOfDate(OperationalError):
    """The evidence store's schema is older (or newer) than this canary expects."""


class ProbeError(CanaryError):
    """A probe could not be started, or its rollback could not be verified."""

    exit_code = EXIT_OPERATIONAL


def say(stream: Any, text: str) -> None:
    """Write a side note to ``stream`` (stderr) and flush, never failing the command: nothing when the
    stream is ``None`` (``2>&-``), closed or broken (a reader that left, ``2>&1 | head``) — the exit code
    still says what happened."""
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # EPIPE, EBADF, a closed file: nobody is watching any more
        pass


def note(message: str) -> None:
    """``canary: MESSAGE`` on stderr, as :func:`say` writes it (stderr looked up when called)."""
    say(sys.stderr, f"canary: {message}\n")
