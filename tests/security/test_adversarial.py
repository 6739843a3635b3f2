"""The adversarial table: every case is bad input (or an unreachable store) and must end with the
documented exit code, one message line naming the problem, no traceback, the store unchanged and no
file written outside it.

The whole table runs in-process through the CLI's own entry point (``canary.cli._run`` with a
fresh parser, so exit code and stderr are exactly the CLI's); a representative subset also runs as
real subprocesses of the installed ``canary`` script.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from canary.cli import _run, build_parser
from evidence_store import database
from evidence_store.database import RetryPolicy, make_engine, session_scope
from evidence_store.migrate import upgrade
from tests.conftest import canary_cmd, cli_env
from tests.security.adversarial import (
    Case,
    all_cases,
    expand,
    listing,
    now_utc,
    store_digest,
    write_files,
)

CASES = all_cases()


def test_case_ids_are_distinct() -> None:
    """An id names one case: SUBPROCESS_IDS and SLOW_IDS select by id."""
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], str]]:
    from evidence_store.evidence import record_evidence
    from evidence_store.reservations import reserve
    from tests.evidence_store.evidence_store_testkit import evidence

    folder = tmp_path_factory.mktemp("adversarial")
    files = folder / "files"
    files.mkdir()
    paths = write_files(files, now_utc())
    store = f"sqlite:///{folder / 'store.sqlite3'}"
    upgrade(store)
    eng = make_engine(store)
    now = now_utc()
    try:
        with session_scope(eng) as session:  # something to lose: evidence and a reservation
            record_evidence(session, evidence("adv-1", created_at=now - timedelta(hours=2)))
            record_evidence(session, evidence("adv-2", created_at=now - timedelta(hours=1), outcome="unsafe"))
            reserve(session, device_id="GPU-adv", holder="adv", memory_bytes=2**30, mig_instance=None,
                         capacity_memory_bytes=2**34, lease_s=3600, now=now)
    finally:
        eng.dispose()
    yield folder, paths, store


def _check(case: Case, code: int, err: str, before: tuple[str, list[str]], after: tuple[str, list[str]]) -> None:
    assert "Traceback" not in err, err
    assert code == case.exit_code, err
    lines = [line for line in err.splitlines() if line.strip()]
    messages = [line for line in lines if not line.startswith(("usage:", " ", "\t"))]
    assert len(messages) == 1, err  # one message line (argparse adds its usage line before it)
    assert case.fragment.lower() in messages[0].lower() or case.fragment.lower() in err.lower(), err
    assert "hunter2" not in err  # passwords never echo
    assert after[0] == before[0], "the store changed on rejected input"
    assert after[1] == before[1], "a file was written outside the store"
    assert not any("pwned" in name for name in after[1])


# Cases that take seconds alone (a 300 000-value document parsed before it is refused): ``make test``.
SLOW_IDS = {"profile-wide", "snapshot-wide"}


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.id in SLOW_IDS else []) for c in CASES])
def test_adversarial_input_in_process(
    case: Case,
    world: tuple[Path, dict[str, str], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, paths, store = world
    monkeypatch.setattr(database, "DEFAULT_RETRY", RetryPolicy(attempts=2, initial_wait_s=0.01, max_wait_s=0.02))
    monkeypatch.setenv("CANARY_DB_URL", store)
    monkeypatch.setenv("XDG_DATA_HOME", str(folder / "xdg"))
    argv = expand(case, paths, store)
    before = (store_digest(store), listing(folder))
    capsys.readouterr()
    try:
        code = _run(build_parser(), argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    _check(case, code, err, before, (store_digest(store), listing(folder)))


SUBPROCESS_IDS = [
    "profile-bomb", "profile-fifo", "profile-deep", "snapshot-huge", "policy-json_nan", "policy-pol_ttl_1e300",
    "warm-plan_missing_candidate", "revalidate-missing-plan", "import-imp_safe_over_bound",
    "import-imp_samples_huge", "import-dev-zero", "export-dev-null", "admit-snapshot-ssrf",
    "admit-resident-metadata", "db-missing-dir", "db-bad-port", "db-dsn",
    "feedback-nan",
]  # previews (downgrade, expire without --yes) are not bad input: tests/cli/test_previews.py


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if c.id in SUBPROCESS_IDS])
def test_adversarial_input_as_a_real_process(case: Case, world: tuple[Path, dict[str, str], str]) -> None:
    folder, paths, store = world
    env = cli_env(folder) | {"CANARY_DB_URL": store}
    before = (store_digest(store), listing(folder))
    proc = subprocess.run([*canary_cmd(), *expand(case, paths, store)], capture_output=True, text=True,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)
    _check(case, proc.returncode, proc.stderr, before, (store_digest(store), listing(folder)))


def test_the_subset_is_in_the_table() -> None:
    assert set(SUBPROCESS_IDS) <= {c.id for c in CASES}
    assert SLOW_IDS.issubset(c.id for c in CASES)
