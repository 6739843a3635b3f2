"""What a snapshot may claim and what it may make canary read.

- Unknown MIG / MPS state is unknown, never "off": with MIG on, only work inside a GPU instance runs
  (NVIDIA MIG User Guide), so a non-MIG regime on a device whose MIG mode is unknown is *unknown*,
  and on one where MIG is on it is *no* (``now``: disabling MIG needs the GPU drained and reset).
- A resident's ``profile:`` path is read only as a profile: the error names the snapshot file and
  ``residents[N].profile``, and never echoes a file that is not profile-shaped.
- Identifiers (uuid, versions, names) hold no control characters: exit 2 naming file and field.
- An MPS regime without a server says what is true: with no resident, nobody would restart.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from canary.catalog import lookup
from canary.errors import InputError
from canary.hardfit import check, choose_regime, parse_regime
from canary.policy import load_policy
from canary.profile import MemoryEnvelope, SharingModes, WorkloadProfile
from canary.snapshot import DeviceSnapshot, MigState, MpsState, Resident, load_snapshot
from tests.support.paths import canary_cmd, cli_env

GiB = 1 << 30
POLICY = load_policy("default")
ROOT = Path(__file__).resolve().parents[2]
EMBEDDING = ROOT / "examples" / "profiles" / "embedding-service.yaml"


def candidate() -> WorkloadProfile:
    return WorkloadProfile(name="cand", version="v1",
                           memory=MemoryEnvelope(reserved_bytes=4 * GiB, peak_bytes=4 * GiB),
                           sharing=SharingModes(timeslice=True, streams=True, mps_active_thread_pct=30,
                                                 mig_profiles=("1g.10gb",)))


def snap(**kw: Any) -> DeviceSnapshot:
    base: dict[str, Any] = dict(device_type="h100-sxm", compute_mode="DEFAULT", memory_total_bytes=80 * GiB,
                                memory_used_bytes=0, memory_reserved_bytes=GiB)
    base.update(kw)
    return DeviceSnapshot(**base)


def fit(s: DeviceSnapshot, regime: str | None = None):  # type: ignore[no-untyped-def]
    spec = lookup(s.device_type)
    chosen = parse_regime(regime) if regime else choose_regime(s, spec, candidate(), POLICY).regime
    return check(s, spec, candidate(), POLICY, chosen)


def finding(hard, resource: str):  # type: ignore[no-untyped-def]
    return next((f for f in hard.findings if f.resource == resource), None)


# --- 1. unknown MIG/MPS state is not "off" -------------------------------------------------------------

@pytest.mark.parametrize(("mig", "mps", "regime", "verdict", "limiting"), [
    pytest.param(MigState(), MpsState(), None, "unknown", "mig_mode", id="nothing-stated-chosen"),
    pytest.param(MigState(), MpsState(running=False, clients=0), "timeslice", "unknown", "mig_mode",
                 id="mig-unknown-timeslice"),
    pytest.param(MigState(), MpsState(running=False, clients=0), "streams", "unknown", "mig_mode",
                 id="mig-unknown-streams"),
    pytest.param(MigState(enabled=True), MpsState(running=False, clients=0), "timeslice", "no", "mig_mode",
                 id="mig-on-timeslice"),
    pytest.param(MigState(enabled=False), MpsState(), "mps:30", "unknown", "mps_server", id="mps-unknown-mps"),
    pytest.param(MigState(enabled=False), MpsState(running=False, clients=0), "timeslice", "yes", None,
                 id="both-off-timeslice"),
])
def test_unknown_mig_or_mps_state_is_not_off(mig: MigState, mps: MpsState, regime: str | None, verdict: str,
                                             limiting: str | None) -> None:
    hard = fit(snap(mig=mig, mps=mps), regime)
    assert hard.verdict == verdict
    assert hard.limiting_resource == limiting
    if limiting == "mig_mode":
        f = finding(hard, "mig_mode")
        assert "mig.enabled" in f.detail or "MIG is enabled" in f.detail
        if verdict == "no":
            assert f.shortfall == "now"
    if limiting == "mps_server":
        assert "mps.running" in finding(hard, "mps_server").detail


def test_chosen_regime_says_mig_state_is_unknown_not_inactive() -> None:
    s = snap()
    why = choose_regime(s, lookup("h100-sxm"), candidate(), POLICY).why
    assert "neither MIG nor MPS is active" not in why
    assert "mig.enabled" in why and "mps.running" in why


@pytest.mark.parametrize("device", [pytest.param("l4", id="nvidia-without-mig"),
                                    pytest.param("mi300x", id="amd")])
def test_mig_mode_is_not_asked_of_a_device_that_cannot_have_mig(device: str) -> None:
    spec = lookup(device)
    assert spec.vendor == "amd" or not spec.mig_profiles  # the premise, from the catalog
    hard = fit(snap(device_type=device, memory_total_bytes=spec.memory_bytes, mps=MpsState(running=False,
                                                                                        clients=0)), "timeslice")
    assert finding(hard, "mig_mode") is None


def test_cli_snapshot_without_mig_or_mps_is_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("device_type: h100-sxm\ncompute_mode: DEFAULT\nmemory_total_bytes: 80Gi\n"
                    "memory_used_bytes: 0\nresidents: []\n")
    done = subprocess.run([*canary_cmd(), "fit", "--no-store", str(path), str(EMBEDDING)], capture_output=True,
                          text=True, env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("UNKNOWN")
    assert "mig.enabled" in done.stdout


# --- 4. an MPS regime without a server --------------------------------------------------------------

def test_no_mps_server_on_an_idle_device_names_no_resident() -> None:
    hard = fit(snap(mig=MigState(enabled=False), mps=MpsState(running=False, clients=0), residents=()), "mps:30")
    f = finding(hard, "mps_server")
    assert f.verdict == "no" and f.shortfall == "now"
    assert "residents would have to restart" not in f.detail
    assert "disturbs nobody" in f.detail


def test_no_mps_server_with_a_resident_names_the_restart() -> None:
    resident = Resident(name="r", observed_memory_bytes=2 * GiB)
    hard = fit(snap(mig=MigState(enabled=False), mps=MpsState(running=False, clients=0), residents=(resident,),
                    memory_used_bytes=2 * GiB), "mps:30")
    f = finding(hard, "mps_server")
    assert f.verdict == "no"
    assert "restart as MPS clients" in f.detail


# --- 2. a resident's profile path ---------------------------------------------------------------------

SNAPSHOT = """device_type: h100-sxm
compute_mode: DEFAULT
mig: {{enabled: false}}
mps: {{running: false, clients: 0}}
memory_total_bytes: 80Gi
memory_used_bytes: 21Gi
residents:
  - name: r
    profile: {ref}
    observed_memory_bytes: 21Gi
"""

SECRET = "zq7secret:*:20228:0:99999:7::\nzq7daemon:*:20228:0:99999:7::\n"


def write_snapshot(tmp_path: Path, ref: str) -> Path:
    path = tmp_path / "snaps" / "s.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SNAPSHOT.format(ref=ref))
    return path


@pytest.mark.parametrize(("setup", "ref", "want"), [
    pytest.param(lambda d: (d / "shadow").write_text(SECRET), "../shadow", "not workload-profile fields",
                 id="mapping-of-other-keys"),
    pytest.param(lambda d: (d / "list.yaml").write_text("- zq7secret:x\n- zq7secret\n"), "../list.yaml",
                 "top level is not a mapping", id="a-list"),
    pytest.param(lambda d: (d / "text").write_text("zq7secret-line\n"), "../text", "top level is not a mapping",
                 id="a-scalar"),
    pytest.param(lambda d: (d / "bad.yaml").write_text("a: [zq7secret\n"), "../bad.yaml", "not a profile",
                 id="malformed"),
    pytest.param(lambda d: (d / "dir").mkdir(), "../dir", "directory", id="directory"),
    pytest.param(lambda d: None, "/dev/zero", "not a regular file", id="dev-zero"),
    pytest.param(lambda d: None, "../absent.yaml", "not found", id="missing"),
])
def test_resident_profile_path_refusals(tmp_path: Path, setup: Any, ref: str, want: str) -> None:
    setup(tmp_path)
    path = write_snapshot(tmp_path, ref)
    with pytest.raises(InputError) as caught:
        load_snapshot(path)
    exc = caught.value
    assert exc.file == str(path)
    assert exc.field == "residents[0].profile"
    assert want in exc.problem
    assert "zq7" not in str(exc)  # nothing of the file's content


def test_resident_profile_path_is_relative_to_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.yaml").write_text(EMBEDDING.read_text())
    path = write_snapshot(tmp_path, "../p.yaml")
    monkeypatch.chdir(path.parent.parent.parent)  # a working directory where ../p.yaml is something else
    loaded = load_snapshot(path)
    assert loaded.residents[0].profile is not None
    assert loaded.residents[0].profile.name == "embedding-service"


def test_profile_shaped_file_errors_name_the_snapshot_and_the_inner_field(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("name: x\nversion: v\n")
    path = write_snapshot(tmp_path, "../p.yaml")
    with pytest.raises(InputError) as caught:
        load_snapshot(path)
    assert caught.value.field == "residents[0].profile"
    assert "memory" in caught.value.problem


# --- 3. control characters in identifiers ---------------------------------------------------------------

@pytest.mark.parametrize(("field", "yaml_line"), [
    pytest.param("uuid", 'uuid: "GPU-$(id)\\nADMIT"', id="uuid"),
    pytest.param("driver_version", 'driver_version: "580\\n$(id)"', id="driver"),
    pytest.param("cuda_driver_version", 'cuda_driver_version: "13.0\\u001b[2J"', id="cuda-esc"),
    pytest.param("device_type", 'device_type: "h100-sxm\\r"', id="device-type"),
    pytest.param("residents[0].name", 'residents: [{name: "r\\nADMIT", observed_memory_bytes: 1Gi}]',
                 id="resident-name"),
    pytest.param("residents[0].mig_instance", 'residents: [{name: r, mig_instance: "1g.10gb\\n"}]',
                 id="mig-instance-ref"),
    pytest.param("mig.instances[0].holder",
                 'mig: {enabled: true, instances: [{profile: 1g.10gb, start: 0, size: 1, holder: "a\\u2028b"}]}',
                 id="instance-holder"),
    pytest.param("mig.instances[0].profile",
                 'mig: {enabled: true, instances: [{profile: "1g.10gb\\n", start: 0, size: 1}]}',
                 id="instance-profile"),
    pytest.param("unknown_reasons.mps", 'unknown_reasons: {mps: "x\\nADMIT"}', id="unknown-reason"),
])
def test_control_characters_in_identifiers_are_refused(tmp_path: Path, field: str, yaml_line: str) -> None:
    lines = {"device_type": "device_type: h100-sxm", "compute_mode": "compute_mode: DEFAULT"}
    key = yaml_line.split(":", 1)[0]
    lines[key] = yaml_line
    path = tmp_path / "s.yaml"
    path.write_text("\n".join(lines.values()) + "\n")
    with pytest.raises(InputError) as caught:
        load_snapshot(path)
    assert caught.value.file == str(path)
    assert caught.value.field == field
    assert "control character" in caught.value.problem


def test_cli_uuid_with_a_newline_is_exit_2_and_prints_no_verdict(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text('device_type: h100-sxm\nuuid: "GPU-x\\nADMIT"\ncompute_mode: DEFAULT\n'
                    "mig: {enabled: false}\nmps: {running: false, clients: 0}\n")
    done = subprocess.run([*canary_cmd(), "fit", "--no-store", str(path), str(EMBEDDING)], capture_output=True,
                          text=True, env=cli_env(tmp_path), timeout=120)
    assert done.returncode == 2
    assert "ADMIT" not in done.stdout.splitlines()
    assert "'uuid'" in done.stderr and str(path) in done.stderr
