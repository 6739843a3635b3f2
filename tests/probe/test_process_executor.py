"""The process executor with real subprocesses: gate, low priority, readiness, exposure, rollback."""

from __future__ import annotations

import anyio
import httpx
import pytest

from canary.errors import ProbeError
from canary.probe.executors.process import ProcessExecutor
from canary.probe.interfaces import ExposureGate
from canary.probe.procs import group_alive, group_members
from tests.support.helpers import candidate_profile, free_port, proc_environ, proc_nice, profile
from tests.support.subprocesses import HANG_S


def _listening(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/ready", timeout=0.3)
    except httpx.HTTPError:
        return False
    return True


@pytest.mark.anyio
async def test_held_until_start_then_low_priority_bounded_and_rolled_back() -> None:
    port = free_port()
    ex = ProcessExecutor(candidate_profile(port), mps_active_thread_pct=30)
    cand = await ex.prepare("probe-abc")
    assert cand is not None and cand.pid == cand.pgid
    try:
        await anyio.sleep(0.3)
        assert not _listening(port)  # held at the gate: the command has not run
        await ex.start()
        env = proc_environ(cand.pid)  # the launcher exec'd into the command: same pid
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert env["CANARY_STREAM_PRIORITY"] == "lowest"
        assert env["CANARY_PROBE_ID"] == "probe-abc"
        assert proc_nice(cand.pid) == 19
        gate = ExposureGate(5)
        async with anyio.create_task_group() as tg:
            await tg.start(ex.drive, HANG_S, gate)
            # Wait for what the executor recorded, not for a time: a busy machine is slow, not wrong.
            with anyio.fail_after(HANG_S):
                while ex.requests_sent < 5:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # room to overrun the gate, if it could
            tg.cancel_scope.cancel()
        assert gate.used == 5 and ex.requests_sent == 5 and ex.request_errors == 0
    finally:
        report = await ex.rollback()
    assert report.verified and not report.killed
    assert not group_alive(cand.pgid)
    again = await ex.rollback()  # idempotent
    assert again.verified


@pytest.mark.anyio
async def test_a_candidate_that_ignores_sigterm_is_killed_with_its_children() -> None:
    port = free_port()
    ex = ProcessExecutor(
        candidate_profile(port, "--ignore-sigterm", "--burners", "2"),
        mps_active_thread_pct=50,
        term_grace_s=0.3,
    )
    cand = await ex.prepare("probe-stubborn")
    assert cand is not None
    await ex.start()
    assert len(group_members(cand.pgid)) >= 3  # server + 2 burners
    report = await ex.rollback()
    # What the executor recorded: SIGTERM was ignored, SIGKILL ended the group, nothing is left.
    assert report.verified and report.killed
    assert "SIGKILL" in report.detail
    assert not group_alive(cand.pgid)


@pytest.mark.anyio
async def test_rollback_before_start_never_runs_the_command() -> None:
    port = free_port()
    ex = ProcessExecutor(candidate_profile(port), mps_active_thread_pct=50)
    cand = await ex.prepare("probe-unstarted")
    assert cand is not None
    report = await ex.rollback()
    assert report.verified and not report.killed
    assert not _listening(port)
    # The launcher either read EOF and left (0) or took the SIGTERM first; it never exec'd the server.
    assert ex.proc is not None and ex.proc.returncode in (0, -15)


@pytest.mark.anyio
async def test_a_command_that_exits_is_a_start_failure_with_its_output() -> None:
    prof = profile(
        "broken",
        executor="process",
        command=["sh", "-c", "echo model file missing >&2; exit 3"],
        endpoint="http://127.0.0.1:9",
        ready_path="/ready",
    )
    ex = ProcessExecutor(prof, mps_active_thread_pct=50)
    await ex.prepare("probe-broken")
    try:
        with pytest.raises(ProbeError, match=r"exited with code 3.*model file missing"):
            await ex.start()
    finally:
        assert (await ex.rollback()).verified


@pytest.mark.anyio
async def test_startup_timeout() -> None:
    port = free_port()
    ex = ProcessExecutor(
        candidate_profile(port, "--ready-delay", "5", startup_timeout_s=0.5), mps_active_thread_pct=50
    )
    await ex.prepare("probe-slow")
    try:
        with pytest.raises(ProbeError, match=r"not ready within 0\.5 s"):
            await ex.start()
    finally:
        assert (await ex.rollback()).verified


def test_a_profile_without_command_or_endpoint_is_refused() -> None:
    with pytest.raises(ProbeError, match=r"needs canary\.endpoint"):
        ProcessExecutor(profile("x", executor="process", command=["true"]), mps_active_thread_pct=50)
