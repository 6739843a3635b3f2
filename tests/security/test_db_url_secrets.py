"""No message about a store URL ever holds its password, not even a piece of it: a password with
``/``, ``#``, ``?``, ``@``, spaces or control characters, a URL that cannot be parsed at all, a driver
error. The URL is shown the way SQLAlchemy's ``URL.render_as_string(hide_password=True)`` shows it
(``user:***@host``); an unparsable one says so without repeating the secret part.

Every secret below is ``SEC`` + a separator + ``RET``: neither half may appear in any message (a
parser that splits the password at its separator would show one half as a port or a path)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import exc, make_url

from canary.errors import InputError
from evidence_store.database import normalize_url, redact, translate
from evidence_store.location import check_db_url, redact_url
from tests.support.cli import run_in_process
from tests.support.paths import EXAMPLES, canary_cmd, cli_env

SEPARATORS = ["/", "#", "?", "@", " ", ":", "%", "\\", "\t", "\x00", "/ #?@", "://"]


def _no_secret(text: str) -> None:
    assert "SEC" not in text and "RET" not in text, text


@pytest.mark.parametrize("sep", SEPARATORS, ids=[repr(s) for s in SEPARATORS])
@pytest.mark.parametrize("template", [
    pytest.param("postgresql://u:{pw}@host/db", id="plain"),
    pytest.param("postgresql://u:{pw}@host:5432/db", id="with-port"),
    pytest.param("postgresql://u:{pw}@host:abc/db", id="bad-port"),
    pytest.param("postgresql://u:{pw}@host:99999/db", id="port-out-of-range"),
    pytest.param("postgres://u:{pw}@[::1]/db?sslmode=require", id="ipv6"),
    pytest.param("postgresql://u:{pw}@/db", id="no-host"),
    pytest.param("mysql://u:{pw}@host/db", id="unsupported"),
    pytest.param("sqlite://u:{pw}@host/x.db", id="sqlite-with-userinfo"),
    pytest.param("postgresql+asyncpg://u:{pw}@host/db", id="other-driver"),
])
def test_no_message_holds_any_part_of_the_password(template: str, sep: str) -> None:
    url = template.format(pw=f"SEC{sep}RET")
    _no_secret(redact_url(url))
    _no_secret(redact(url))
    try:
        normalize_url(url)  # runs check_db_url first
    except InputError as err:
        _no_secret(str(err))
        assert err.field == "--db"


@pytest.mark.parametrize(("url", "problem"), [
    pytest.param("postgresql://u:SEC/RET@host/db", "holds '/'", id="slash"),
    pytest.param("postgresql://u:SEC#RET@host/db", "holds '#'", id="hash"),
    pytest.param("postgresql://u:SEC?RET@host/db", "holds '?'", id="question-mark"),
    pytest.param("postgresql://u:SECRET@host:abc/db", "port must be a whole number", id="bad-port"),
])
def test_an_ambiguous_url_is_refused_saying_what_to_percent_encode(url: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        check_db_url(url)
    message = str(info.value)
    assert "cannot parse postgresql://u:***@host" in message and problem in message, message
    _no_secret(message)


def test_the_percent_encoded_form_is_accepted_and_decoded() -> None:
    parsed = normalize_url("postgresql://u:SEC%2FRET@host/db")
    assert parsed.password == "SEC/RET" and parsed.host == "host"
    assert redact(parsed) == "postgresql+psycopg://u:***@host/db"


@pytest.mark.parametrize("url", [
    "postgresql://u:SEC RET@host/db",  # a space: a word-by-word masking would show both halves
    "postgresql://u:SEC\nRET@host/db",
    "postgresql://u:SEC@RET@host/db",
])
def test_masking_matches_sqlalchemys_hidden_form(url: str) -> None:
    assert redact_url(url) == "postgresql://u:***@host/db"


def test_a_driver_message_that_repeats_the_password_is_scrubbed() -> None:
    url = make_url("postgresql+psycopg://u:SEC%2FRET@host/db")
    for said in ("FATAL: password SEC/RET rejected", "bad conninfo 'password=SEC%2FRET'"):
        error = exc.OperationalError("connect", {}, Exception(said))
        _no_secret(str(translate(error, url)))
        _no_secret(str(translate(error, "postgresql://u:SEC%2FRET@host/db")))


@settings(derandomize=True, deadline=None, database=None, max_examples=300)
@given(st.text(alphabet="/#?@:% \\[]&=.x", max_size=6), st.text(alphabet="/#?@:%", min_size=1, max_size=3))
def test_no_password_shape_leaks(around: str, sep: str) -> None:
    url = f"postgresql://u:SEC{sep}RET@host{around}/db"
    _no_secret(redact_url(url))
    try:
        normalize_url(url)
    except InputError as err:
        _no_secret(str(err))


def test_the_cli_refuses_it_with_exit_2_and_no_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--db", "postgresql://u:SEC/RET@host/db", "fit", "h200", str(EXAMPLES / "profiles" / "embedding-service.yaml")]
    done = subprocess.run([*canary_cmd(), *argv], capture_output=True, text=True, env=cli_env(tmp_path),
                          timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "--db" in done.stderr and "%2F" in done.stderr and "Traceback" not in done.stderr
    _no_secret(done.stdout + done.stderr)
    for command in (["admit", "h200"], ["reservations", "list"], ["evidence", "list"], ["db", "current"]):
        args = ["--db", "postgresql://u:SEC#RET@host/db", *command]
        if command[0] == "admit":
            args.append(str(EXAMPLES / "profiles" / "embedding-service.yaml"))
        done = run_in_process(args, capsys=capsys, monkeypatch=monkeypatch, env=cli_env(tmp_path))
        assert done.returncode == 2, (command, done.stderr)
        _no_secret(done.stdout + done.stderr)
