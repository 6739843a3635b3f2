"""The candidate gets an allow-listed environment; caches and workload files never run code or
make canary contact or run what the operator did not allow."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import anyio  # noqa: F401 -- the anyio pytest plugin
import pytest

from canary.errors import InputError
from canary.policy import DEFAULT_PROBE_HOSTS, Policy, load_policy
from canary.probe.executors.process import ProcessExecutor, candidate_environment
from canary.probe.factory import check_profile, make_executor, make_monitor
from tests.probe.helpers import candidate_profile, free_port, proc_environ, profile
from tests.support import catalog_cache

REPO = Path(__file__).resolve().parents[2]
SECRET_URL = "postgresql+psycopg://canary:hunter2-secret@db.internal:5432/evidence"


def _policy(**changes: object) -> Policy:
    base = load_policy("default")
    return Policy.model_validate_json(base.model_copy(update=changes).model_dump_json())


# --- 1. the candidate's environment -------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_candidate_process_sees_no_canary_configuration_or_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CANARY_DB_URL", SECRET_URL)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("PGPASSWORD", "pg-secret-value")
    monkeypatch.setenv("OPERATOR_MODEL_DIR", "/models")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps-pipe")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    port = free_port()
    ex = ProcessExecutor(
        candidate_profile(port), mps_active_thread_pct=40, environment_passthrough=("OPERATOR_MODEL_DIR",)
    )
    cand = await ex.prepare("probe-env")
    assert cand is not None
    try:
        await ex.start()
        env = proc_environ(cand.pid)  # what the running command really got
    finally:
        report = await ex.rollback()
    assert report.verified
    values = "\n".join(env.values())
    assert "hunter2-secret" not in values and "aws-secret-value" not in values and "pg-secret-value" not in values
    assert "CANARY_DB_URL" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "PGPASSWORD" not in env
    assert env["PATH"] == os.environ["PATH"]
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/mps-pipe"
    assert env["OPERATOR_MODEL_DIR"] == "/models"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CANARY_PROBE_ID"] == "probe-env"
    assert set(env) <= {
        "PATH", "LC_ALL", "CUDA_MPS_PIPE_DIRECTORY", "OPERATOR_MODEL_DIR", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CANARY_STREAM_PRIORITY", "CANARY_PROBE_ID", "LANG", "LANGUAGE", "TZ", "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER", "CUDA_MPS_LOG_DIRECTORY", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    } | {k for k in env if k.startswith("LC_")}


def test_a_canary_variable_never_passes_even_from_a_policy_built_in_code() -> None:
    env = candidate_environment(
        {"CANARY_DB_URL": SECRET_URL, "canary_db_url": SECRET_URL, "PATH": "/bin"},
        extra_names=("CANARY_DB_URL", "canary_db_url"), probe_id="p", mps_active_thread_pct=10,
    )
    assert SECRET_URL not in env.values()
    assert env["PATH"] == "/bin"


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        pytest.param(["CANARY_DB_URL"], "never passes", id="canary-own-config"),
        pytest.param(["canary_token"], "never passes", id="canary-own-config-lowercase"),
        pytest.param(["A=B"], "not an environment variable name", id="assignment-not-a-name"),
        pytest.param([""], "not an environment variable name", id="empty-name"),
    ],
)
def test_policy_refuses_to_pass_canary_configuration(tmp_path: Path, names: list[str], problem: str) -> None:
    text = (REPO / "policies" / "default.yaml").read_text() + f"candidate_environment: {names!r}\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=problem) as info:
        load_policy(path)
    assert "candidate_environment" in str(info.value)


def test_make_executor_passes_the_policy_allow_list() -> None:
    prof = candidate_profile(free_port())
    policy = _policy(candidate_commands=(sys.executable,), candidate_environment=("OPERATOR_MODEL_DIR",))
    ex = make_executor(prof, policy=policy)
    assert isinstance(ex, ProcessExecutor)
    assert ex.environment_passthrough == ("OPERATOR_MODEL_DIR",)


# --- 4. commands and URLs come from the operator ------------------------------------------------------


def test_a_profile_cannot_make_canary_run_a_command_by_default() -> None:
    prof = candidate_profile(free_port())
    with pytest.raises(InputError, match="candidate_commands") as info:
        make_executor(prof, policy=load_policy("default"))
    assert info.value.field == "canary.command"
    assert make_executor(prof, policy=_policy(candidate_commands=("*",))) is not None


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        pytest.param("http://127.0.0.1:8000", True, id="loopback-v4"),
        pytest.param("http://localhost:8000", True, id="localhost"),
        pytest.param("http://[::1]:8000", True, id="loopback-v6"),
        pytest.param("http://127.000.000.001:8000", False, id="odd-spelling-of-loopback-is-not-listed"),
        pytest.param("http://169.254.169.254/latest/meta-data", False, id="cloud-metadata"),
        pytest.param("http://10.0.0.8:9400", False, id="private-net"),
        pytest.param("http://evil.example:80", False, id="other-host"),
        pytest.param("http://user:pw@127.0.0.1:80", False, id="credentials-in-url"),
        pytest.param("file:///etc/passwd", False, id="file-scheme"),
        pytest.param("gopher://127.0.0.1:6379/_FLUSHALL", False, id="gopher"),
        pytest.param("http://127.0.0.1:99999", False, id="bad-port"),
        pytest.param("http://localhost.:8000", True, id="trailing-dot"),
    ],
)
def test_monitor_urls_are_checked_against_the_policy(url: str, allowed: bool) -> None:
    if allowed:
        check_profile(profile("resident", monitor="http", endpoint=url), load_policy("default"), as_candidate=False)
        return
    with pytest.raises(InputError) as info:
        # A URL that is no http(s) URL without credentials is refused when the profile loads; one on a
        # host the policy does not list, when the monitor is built (default policy: loopback only).
        make_monitor(profile("resident", monitor="http", endpoint=url))
    assert info.value.field == "canary.endpoint"


def test_an_operator_can_allow_another_host() -> None:
    prof = profile("r", monitor="prometheus", metrics_url="http://10.0.0.8:9400/metrics", latency_metric="x_seconds")
    with pytest.raises(InputError, match="probe_hosts"):
        check_profile(prof, load_policy("default"), as_candidate=False)
    check_profile(prof, _policy(probe_hosts=(*DEFAULT_PROBE_HOSTS, "10.0.0.8")), as_candidate=False)


# --- 2. no code from caches -------------------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _gpu_fit(cache_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "CANARY_DB_URL": f"sqlite:///{cache_home}/none.db"}
    env.pop("CANARY_NO_CATALOG_CACHE", None)
    return subprocess.run(
        [sys.executable, "-c", "import sys; from canary.cli import gpu_fit_main; sys.exit(gpu_fit_main())",
         "h100-sxm", str(REPO / "examples/profiles/llm-decode.yaml"), "--no-store"],
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO,
    )


def _verdict(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The answer without its clock-dependent lines (expiry times)."""
    return [line for line in run.stdout.splitlines() if "20" not in line or "GiB" in line]


def test_a_planted_cache_file_runs_no_code(tmp_path: Path) -> None:
    first = _gpu_fit(tmp_path)
    caches = list((tmp_path / "canary").glob("catalog-*"))
    assert first.returncode in (0, 1, 3) and len(caches) == 1
    assert caches[0].suffix == ".json"
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    # The cache canary reads, and where older versions kept their pickle, both replaced by an exploit.
    for path in (caches[0], caches[0].with_suffix(".pickle")):
        path.write_bytes(payload)
    second = _gpu_fit(tmp_path)
    assert not marker.exists()
    assert (second.returncode, _verdict(second)) == (first.returncode, _verdict(first))
    # A well-formed JSON cache naming a class outside the catalog is refused, not looked up.
    caches[0].write_text('[{"$": "os.system", "f": {"command": "touch ' + str(marker) + '"}}]')
    third = _gpu_fit(tmp_path)
    assert not marker.exists()
    assert (third.returncode, _verdict(third)) == (first.returncode, _verdict(first))


def test_a_cache_writable_by_others_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import canary.catalog as catalog

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CANARY_NO_CATALOG_CACHE", raising=False)
    catalog.all_devices.cache_clear()
    try:
        good = catalog.all_devices()
        (cache,) = (tmp_path / "canary").glob("catalog-*.json")
        data = catalog_cache.read(cache)
        h100 = next(d for d in data if d["f"]["name"] == "h100-sxm")
        assert h100["f"]["sm_count"] == 132
        h100["f"]["sm_count"] = 9999
        catalog_cache.write_signed(cache, data)  # a consistent file: only its permissions are wrong
        cache.chmod(0o666)
        assert catalog._read_cache(cache) is None
        cache.chmod(0o600)
        assert catalog._read_cache(cache) is not None  # the same file, owned and private: read
        catalog.all_devices.cache_clear()
        cache.chmod(0o666)
        assert catalog.all_devices() == good
    finally:
        catalog.all_devices.cache_clear()


def test_a_profile_cannot_make_canary_load_gpu_code_from_anywhere(tmp_path: Path) -> None:
    allowed_dir = tmp_path / "cubins"
    allowed_dir.mkdir()
    inside = allowed_dir / "k.cubin"
    inside.write_bytes(b"\x7fELF")
    outside = tmp_path / "elsewhere.cubin"
    outside.write_bytes(b"\x7fELF")
    sneaky = allowed_dir / "link.cubin"
    sneaky.symlink_to(outside)  # a link out of the allowed directory does not count as inside
    policy = _policy(candidate_cubin_dirs=(str(allowed_dir),))
    check_profile(profile("c", executor="cuda", cubin=str(inside), kernel="k"), policy, as_candidate=True)
    for cubin in (outside, sneaky, allowed_dir / ".." / "elsewhere.cubin"):
        with pytest.raises(InputError, match="candidate_cubin_dirs") as info:
            check_profile(profile("c", executor="cuda", cubin=str(cubin), kernel="k"), policy, as_candidate=True)
        assert info.value.field == "canary.cubin"
    with pytest.raises(InputError, match="candidate_cubin_dirs"):
        check_profile(profile("c", executor="cuda", cubin=str(inside), kernel="k"), load_policy("default"),
                      as_candidate=True)


@pytest.mark.parametrize(
    ("canary", "field"),
    [
        pytest.param({"monitor": "http", "endpoint": "http://127.0.0.1:80", "request_path": "@169.254.169.254/x"},
                     "canary.request_path", id="path-turns-host-into-userinfo"),
        pytest.param({"monitor": "http", "endpoint": "http://127.0.0.1:80", "request_path": "metrics"},
                     "canary.request_path", id="path-without-slash"),
    ],
)
def test_the_joined_url_is_what_is_checked(canary: dict[str, str], field: str) -> None:
    with pytest.raises(InputError) as info:
        check_profile(profile("r", **canary), load_policy("default"), as_candidate=False)
    assert info.value.field == field
