"""Every store URL form parses or is refused with exit 2, and no message shows a password."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.errors import InputError
from evidence_store.database import normalize_url, redact
from evidence_store.location import check_db_url, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("postgresql://u:hunter2@h:5432/db", "postgresql://u:***@h:5432/db", id="userinfo"),
        pytest.param("postgresql://u@h/db?password=hunter2&sslmode=require",
                     "postgresql://u@h/db?password=***&sslmode=require", id="query-password"),
        pytest.param("postgresql://u@h/db?sslmode=require&PASSWORD=hunter2",
                     "postgresql://u@h/db?sslmode=require&PASSWORD=***", id="query-password-upper"),
        pytest.param("host=h password=hunter2 dbname=x", "host=h password=*** dbname=x", id="dsn"),
        pytest.param("host=h password = 'hunter 2' dbname=x", "host=h password = *** dbname=x", id="dsn-quoted"),
        pytest.param("postgresql://u:p@ss:w0rd@h/db", "postgresql://u:***@h/db", id="at-in-password"),
        pytest.param(":hunter2@postgresql://", ":***@postgresql://", id="garbage-before-scheme"),
    ],
)
def test_redaction(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "hunter2" not in redact(url)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        pytest.param("", "is empty", id="empty"),
        pytest.param("   ", "is empty", id="blank"),
        pytest.param("sqlite:////nonexistent/dir/x.sqlite3", "does not exist", id="missing-sqlite-dir"),
        pytest.param("postgresql://u:hunter2@localhost:abc/db", "cannot parse", id="port-not-a-number"),
        pytest.param("postgresql://u:hunter2@localhost:70000/db", "cannot parse", id="port-out-of-range"),
        pytest.param("sqlite://u:hunter2@host/x.db", "names a file", id="sqlite-with-userinfo"),
        pytest.param("host=localhost password=hunter2", "not a url", id="key-value"),
        pytest.param("mysql://u:hunter2@h/x", "unsupported", id="mysql"),
        pytest.param("postgresql:///x", "no host", id="no-host"),
    ],
)
def test_refused_forms_are_input_errors_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        check_db_url(url)
    assert problem in str(info.value).lower() and info.value.field == "--db"
    assert "hunter2" not in str(info.value)


def test_accepted_forms(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path / 'x.sqlite3'}", "sqlite://", "sqlite:///:memory:",
                "postgresql://u@127.0.0.1:5432/x", "postgres://u:pw@h/x", "postgresql+psycopg://u@h/x",
                "postgresql://u@[::1]:5432/x", "postgresql:///x?host=/var/run/postgresql"):
        check_db_url(url)
        normalize_url(url)


_PIECES = ["postgresql://", "postgres://", "postgresql+psycopg://", "mysql://", "u", ":", ":SECRETPW@",
           "password=SECRETPW", "@", "[", "]", "::1", "h", "/", "db", "?", "&", "=", "%", "%zz", "#", "5432", "abc",
           "99999", "host=", " ", "\x00", "é", "'", "\\"]


@settings(derandomize=True, deadline=None, database=None, max_examples=400)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=4), max_size=10).map("".join))
def test_no_url_form_escapes_or_leaks(url: str) -> None:
    try:
        normalize_url(url)
    except InputError as exc:
        assert "SECRETPW" not in str(exc)
    assert "SECRETPW" not in redact(url)
