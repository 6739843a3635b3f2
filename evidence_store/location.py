"""Where the store lives by default. Light on purpose (no SQLAlchemy): the fast ``gpu-fit`` path
asks whether a default store exists before deciding to import anything heavier."""

from __future__ import annotations

import os
from pathlib import Path


def default_sqlite_path() -> Path:
    """Where the zero-setup store lives: ``<user data dir>/evidence.sqlite3``."""
    import platformdirs

    return Path(platformdirs.user_data_dir("canary")) / "evidence.sqlite3"


def default_db_url() -> str:
    """``$CANARY_DB_URL``, else a SQLite file in the user's data directory."""
    from_env = os.environ.get("CANARY_DB_URL")
    if from_env:
        return from_env
    return f"sqlite:///{default_sqlite_path()}"


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, ``None`` for other backends and in-memory databases."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword", "passfile", "sslkey")


def _hide_userinfo(part: str) -> str:
    head, at, tail = part.rpartition("@")
    if not at or ":" not in head:
        return part
    return f"{head.split(':', 1)[0]}:***@{tail}"


def redact_url(text: str) -> str:
    """``text`` (a store URL or a key=value connection string) with every password replaced by ``***``:
    any ``password=…`` (query parameter or key=value pair, quoted or not) and any user-info password
    (``user:secret@``: from the first ``:`` after the user name up to the last ``@``, whatever lies
    between — ``/``, ``#``, ``?``, spaces, control characters — as SQLAlchemy's
    ``URL.render_as_string(hide_password=True)`` shows it). Over-redacts rather than risk a secret.
    Stdlib only."""
    import re

    keys = "|".join(_SECRET_KEYS)
    out = re.sub(rf"(?i)((?:{keys})\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&#\s;]*)", r"\1***", text)
    scheme, sep, rest = out.partition("://")
    if sep:
        # One URL: its user-info may hold anything up to the last '@', spaces included.
        return _hide_userinfo(scheme) + sep + _hide_userinfo(rest)

    def token(match: re.Match[str]) -> str:
        return _hide_userinfo(match.group())

    return re.sub(r"\S+", token, out)


def _userinfo_delimiter(url: str) -> str | None:
    """A character that ends a URL's authority (RFC 3986: ``/``, ``?`` or ``#``) standing in the
    user-info as SQLAlchemy reads it (a user name without ``:`` or ``/``, then ``:`` and a password up to
    the next ``@``), such as the ``/`` of a password ``pa/ss``: the URL then reads two ways, SQLAlchemy's
    and RFC 3986's (host ``u``, port ``pa``). ``None`` when the user-info holds none."""
    import re

    found = re.match(r"[^:/]*(?::[^@]*)?@", url.split("://", 1)[1])
    if found is None:
        return None
    return next((c for c in found.group()[:-1] if c in "/?#"), None)


def check_db_url(url: str) -> None:
    """Refuse, before anything connects or creates a file, a store URL that cannot be what the user
    meant: empty, a key=value connection string, an unparsable port, a database other than SQLite and
    PostgreSQL, a SQLite URL with a host or user, or a SQLite file whose directory does not exist (only
    the default store's directory is created). Raises ``InputError`` for ``--db`` with the password
    redacted. Stdlib only: ``gpu-fit`` calls it without importing SQLAlchemy."""
    from urllib.parse import urlsplit

    from canary.errors import InputError

    def bad(problem: str) -> InputError:
        return InputError(problem, field="--db")

    if not url.strip():
        raise bad("is empty; give a store URL such as sqlite:///PATH or postgresql://USER@HOST/DB")
    shown = redact_url(url)
    if "://" not in url:
        raise bad(f"not a URL (a key=value connection string is not accepted; use postgresql://…): {shown}")
    if any(ord(c) < 32 for c in url):
        raise bad(f"contains control characters: {shown!r}")
    scheme = url.split("://", 1)[0].lower()
    backend = scheme.split("+", 1)[0]
    if backend not in ("sqlite", "postgresql", "postgres"):
        raise bad(f"unsupported database in {shown}: use sqlite:///PATH or postgresql://…")
    if backend == "sqlite":
        rest = url.split("://", 1)[1]
        if not rest.startswith("/") and rest not in ("",):
            raise bad(f"a SQLite URL names a file, not a host or user: {shown} (use sqlite:///PATH)")
        database = rest[1:].split("?", 1)[0] if rest else ""
        if database in ("", ":memory:"):
            return
        path = Path(database)
        # The default store is exempt from both checks. Asked only when one fails: finding the default
        # imports platformdirs, which gpu-fit --db would otherwise pay on every run.
        if not path.parent.is_dir():
            if path == default_sqlite_path():
                return
            raise bad(
                f"directory {path.parent} of the SQLite store {path} does not exist "
                "(only the default store's directory is created; check the path)"
            )
        if path.exists() and not path.is_file() and path != default_sqlite_path():
            raise bad(f"{path} is not a regular file")
        return
    cut = _userinfo_delimiter(url)
    if cut is not None:
        # urlsplit would read the password's tail as host, port and path; never echo what it read.
        raise bad(f"cannot parse {shown}: the user name or password holds {cut!r}, which ends the host part "
                  f"of a URL, so it reads two ways; percent-encode '/', '?', '#' and '@' in a user name, password "
                  f"or query value ({cut!r} is %{ord(cut):02X})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        # The parser's own message repeats what it read as the port, which may be part of a secret.
        raise bad(f"cannot parse {shown}: the port must be a whole number from 0 to 65535") from None
    if not parts.hostname and "host=" not in parts.query:
        raise bad(f"no host in {shown}")
