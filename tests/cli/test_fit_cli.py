"""`canary fit` / `gpu-fit` through real subprocesses: exit codes, JSON, bad input, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, canary_cmd, cli_env

PROFILE = str(EXAMPLES / "profiles" / "embedding-service.yaml")


def run(tmp_path: Path, *args: str, prog: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prog or canary_cmd()), *args], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=60)


def gpu_fit() -> list[str]:
    script = Path(sys.executable).parent / "gpu-fit"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from canary.cli import gpu_fit_main; raise SystemExit(gpu_fit_main())"]


def test_idle_catalog_device_admits(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "h100", PROFILE, "--json")
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)
    assert cert["verdict"] == "admit" and cert["decided_by"] == "hard-fit" and cert["simulated"] is True
    assert cert["device"]["type"] == "h100-sxm"


def test_gpu_fit_is_the_same_command(tmp_path: Path) -> None:
    a = run(tmp_path, "h100", PROFILE, "--json", prog=gpu_fit())
    b = run(tmp_path, "fit", "h100", PROFILE, "--json")
    assert a.returncode == b.returncode == 0
    strip = lambda c: {k: v for k, v in json.loads(c).items() if k not in ("issued_at", "expiry_or_revalidation_trigger")}  # noqa: E731
    assert strip(a.stdout) == strip(b.stdout)


def test_resident_flag_adds_residents(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "h100", PROFILE, "--resident", str(EXAMPLES / "profiles" / "llm-decode.yaml"),
               "--json")
    assert proc.returncode == 3, proc.stderr  # fits; interference unknown until probed
    cert = json.loads(proc.stdout)
    assert cert["hard_fit"] == "yes" and cert["verdict"] == "unknown"
    assert "interference is not yet known" in cert["reason"]


def test_terminal_table_marks_the_limiting_resource(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", str(EXAMPLES / "snapshots" / "b-idle-hbm-held.yaml"),
               str(EXAMPLES / "profiles" / "resnet50-training.yaml"))
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if x.startswith("> "))
    assert "hbm" in line and "NO" in line and "GiB" in line
    assert "limiting resource: hbm" in proc.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["fit", "h1000", PROFILE], "h100"),  # suggestion
    (["fit", "h100", "/nonexistent.yaml"], "file not found"),
    (["fit", "h100", PROFILE, "--regime", "quantum"], "unknown regime"),
    (["fit", "h100", PROFILE, "--policy", "nope"], "no policy named"),
    (["fit", "foo:1", PROFILE], "unknown device"),
    (["fit", "/dev/zero", PROFILE], "'/dev/zero' is not a regular file"),  # never opened, never "unknown device"
    (["fit", "/", PROFILE], "'/' is a directory"),
    (["fit"], "required"),
])
def test_bad_input_exits_2_without_traceback(tmp_path: Path, args: list[str], words: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert words in proc.stderr


def test_bad_profile_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: '1'\nmemory: {reserved_bytes: 1Gi, peak_bytes: -2Gi}\n")
    proc = run(tmp_path, "fit", "h100", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "memory.peak_bytes" in proc.stderr


def test_live_device_without_driver_exits_4(tmp_path: Path) -> None:
    proc = run(tmp_path, "fit", "nvml:0", PROFILE)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "NVIDIA" in proc.stderr


def test_schema_command_prints_json_schema(tmp_path: Path) -> None:
    for kind in ("profile", "snapshot", "policy", "certificate"):
        proc = run(tmp_path, "schema", kind)
        assert proc.returncode == 0
        assert json.loads(proc.stdout)["type"] == "object"


def test_gpu_fit_imports_no_sqlalchemy_or_cuda(tmp_path: Path) -> None:
    code = (f"import sys; from canary.cli import gpu_fit_main; rc = gpu_fit_main(['h100', {PROFILE!r}, '--json']); "
            "heavy = [m for m in ('sqlalchemy', 'alembic', 'pynvml', 'cuda', 'amdsmi') if m in sys.modules]; "
            "sys.stderr.write(repr(heavy)); raise SystemExit(10 if heavy else rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr


# What the local gpu-fit path may load besides the standard library: pydantic and what it needs,
# PyYAML for the profile, platformdirs for the default store and cache locations. Anything else
# (SQLAlchemy, Alembic, NVML, CUDA, numpy, httpx, anyio, the simulator, the probe runners, the
# service) is start-up time a fit does not need.
GPU_FIT_THIRD_PARTY = frozenset({"pydantic", "pydantic_core", "annotated_types", "typing_extensions",
                                 "typing_inspection", "yaml", "_yaml", "cython_runtime", "platformdirs"})
# canary's own packages on that path (``canary.<name>`` and below).
GPU_FIT_CANARY = frozenset({"cli", "commands", "errors", "_model", "_values", "admission", "backends", "catalog", "certificate",
                            "hardfit", "occupancy", "policy", "probe", "profile", "regime", "render", "snapshot",
                            "tables", "units"})
# Of canary.probe only the request check of the factory may be loaded, never a runner.
GPU_FIT_PROBE = frozenset({"canary.probe", "canary.probe.factory"})
# Of the store package only the pure parts (the store's URL, the pair key), never the engine.
GPU_FIT_STORE = frozenset({"evidence_store", "evidence_store.location"})

_MODULES_AFTER_GPU_FIT = (
    "import sys\n"
    "before = set(sys.modules)\n"
    "from canary.cli import gpu_fit_main\n"
    "rc = gpu_fit_main(sys.argv[1:])\n"
    "import json\n"
    "sys.stderr.write(json.dumps(sorted(set(sys.modules) - before)))\n"
    "raise SystemExit(rc)\n"
)


@pytest.mark.parametrize("extra", [["--no-store"], []], ids=["no-store", "store-absent"])
def test_gpu_fit_imports_only_the_allowed_modules(tmp_path: Path, extra: list[str]) -> None:
    env = cli_env(tmp_path) | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("CANARY_SERVER", None)
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER_GPU_FIT, "h100", PROFILE, "--json", *extra],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "admit"
    modules = json.loads(proc.stderr)
    tops = {m.split(".")[0] for m in modules}
    third_party = {t for t in tops if t not in sys.stdlib_module_names and t not in ("canary", "evidence_store")
                   and not t.startswith(("_cython_", "_sysconfigdata_"))}  # PyYAML's compiled loader; sysconfig's
    assert third_party <= GPU_FIT_THIRD_PARTY, f"not on the allow-list: {sorted(third_party - GPU_FIT_THIRD_PARTY)}"
    ours = {m.split(".")[1] for m in modules if m.startswith("canary.")}
    assert ours <= GPU_FIT_CANARY, f"canary modules a fit does not need: {sorted(ours - GPU_FIT_CANARY)}"
    commands = {m for m in modules if m.startswith("canary.commands.")}
    assert commands == {"canary.commands.fit"}, f"other command modules loaded: {sorted(commands)}"
    probe = {m for m in modules if m == "canary.probe" or m.startswith("canary.probe.")}
    assert probe <= GPU_FIT_PROBE, f"probe modules a fit does not need: {sorted(probe - GPU_FIT_PROBE)}"
    store = {m for m in modules if m.split(".")[0] in ("evidence_store", "migrations")}
    assert store <= GPU_FIT_STORE, f"store code a fit without a store does not need: {sorted(store - GPU_FIT_STORE)}"


def test_gpu_fit_checks_a_store_url_without_loading_store_code(tmp_path: Path) -> None:
    """``--db`` (or ``$CANARY_DB_URL``) is checked even with ``--no-store``: that check is the store's
    URL rules alone — no pair key, and no platformdirs unless the URL's file is in doubt."""
    env = cli_env(tmp_path) | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("CANARY_SERVER", None)
    db = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER_GPU_FIT, "h100", PROFILE, "--json", "--no-store",
                           "--db", db], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stderr)
    assert "platformdirs" not in modules
    assert {m for m in modules if m.startswith("evidence_store")} == {"evidence_store", "evidence_store.location"}
    missing = subprocess.run([sys.executable, "-c", _MODULES_AFTER_GPU_FIT, "h100", PROFILE, "--no-store",
                              "--db", f"sqlite:///{tmp_path / 'nowhere' / 'store.sqlite3'}"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr  # the check still runs


def test_schema_head_constant_is_alembics_head() -> None:
    """``check_schema`` recognises a current store by ``SCHEMA_HEAD`` without importing Alembic."""
    from evidence_store.migrate import SCHEMA_HEAD, head_revisions

    assert head_revisions() == (SCHEMA_HEAD,), "a new migration: set evidence_store.migrate.SCHEMA_HEAD to its revision"


@pytest.mark.slow
def test_gpu_fit_reads_a_current_store_without_alembic(tmp_path: Path) -> None:
    env = cli_env(tmp_path) | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    upgrade = subprocess.run([*canary_cmd(), "db", "upgrade"], capture_output=True, text=True, env=env, timeout=120)
    assert upgrade.returncode == 0, upgrade.stderr
    resident = str(EXAMPLES / "profiles" / "llm-decode.yaml")
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER_GPU_FIT, "h100", PROFILE, "--resident", resident,
                           "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr  # fits; the store holds no evidence for the pair
    cert = json.loads(proc.stdout)
    assert "no evidence store" not in json.dumps(cert)  # the store was read, not skipped
    modules = json.loads(proc.stderr)
    assert "sqlalchemy" in modules and "alembic" not in modules


@pytest.mark.slow
def test_gpu_fit_refuses_an_old_store(tmp_path: Path) -> None:
    """The fast check only recognises the current revision; any other still gets Alembic's answer."""
    import sqlite3

    db = tmp_path / "evidence.sqlite3"
    with sqlite3.connect(db) as conn:  # a store stamped with a revision this canary does not know
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('0123456789ab')")
    proc = subprocess.run([*gpu_fit(), "h100", PROFILE, "--resident", str(EXAMPLES / "profiles" / "llm-decode.yaml")],
                          capture_output=True, text=True, env=cli_env(tmp_path), timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "0123456789ab" in proc.stderr
