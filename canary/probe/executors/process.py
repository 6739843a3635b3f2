"""The ``process`` executor: runs ``candidate.canary.command`` and sends requests to its endpoint.

The command comes from the candidate's profile on disk, never from a request body. It runs:

- in its **own process group** (``start_new_session``), so rollback and recovery can kill all of it;
- held at a gate until the journal row exists: a small launcher (this interpreter) creates the
  session, lowers its priority, then waits for one byte on stdin before it ``exec``s the command;
  if the prober dies first, the launcher reads end-of-file and exits without starting anything;
- at **low priority**: OS niceness 19; ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from the policy (an MPS
  client started with it may use at most that share of the SMs); ``CANARY_STREAM_PRIORITY=lowest``,
  a hint workloads are asked to honour by creating their CUDA streams at the lowest priority (the
  larger number of ``cuCtxGetStreamPriorityRange``); ``CANARY_PROBE_ID`` marks the processes.

The candidate's **environment is an allow-list**, never canary's own: ``PATH``, the locale
(``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``), the device-selection and MPS variables a GPU process needs
to reach the right device and MPS daemon (``CUDA_VISIBLE_DEVICES``, ``CUDA_MPS_PIPE_DIRECTORY``, …),
the variables canary sets above, and the names the operator lists in the policy's
``candidate_environment``. Canary's configuration (``CANARY_DB_URL`` with its password, …) and any
other credential in canary's environment never reach the workload under test.

Readiness: ``GET endpoint + ready_path`` answers 2xx (without a ``ready_path``: the endpoint accepts
a TCP connection). Requests go to ``endpoint + request_path`` one at a time, each only after the
orchestrator's gate grants it (optionally paced by ``request_interval_s``, so the prober's own
event loop, which also times the resident, is not saturated). Rollback sends SIGTERM to the group, SIGKILL after ``term_grace_s``,
and verifies that no process of the group is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import anyio
import httpx
from anyio.abc import TaskStatus

from canary.errors import ProbeError
from canary.probe.interfaces import CandidateProcess, ExposureGate, RollbackReport
from canary.probe.procs import group_alive, terminate_group
from canary.profile import WorkloadProfile

# Runs in the new session: lower priority, wait for the go byte, then become the command.
_LAUNCHER = r"""
import os, sys
os.nice(19)
go = sys.stdin.buffer.read(1)
if go != b"1":
    os._exit(0)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    sys.stderr.write(f"cannot start {sys.argv[1]!r}: {exc}\n")
    os._exit(127)
"""


#: Passed from canary's environment to the candidate when set (names, or prefixes ending in ``*``).
CANDIDATE_ENV_ALLOWED: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


def candidate_environment(
    source: dict[str, str] | os._Environ[str], *, extra_names: tuple[str, ...], probe_id: str, mps_active_thread_pct: int
) -> dict[str, str]:
    """The candidate's environment: the allow-listed variables of ``source`` that are set, the operator's
    ``extra_names``, and what canary sets. A ``CANARY_*`` variable of ``source`` never passes (the policy
    refuses to list one; this holds even for a policy built in code)."""
    allowed = CANDIDATE_ENV_ALLOWED + tuple(extra_names)
    exact = {name for name in allowed if not name.endswith("*")}
    prefixes = tuple(name[:-1] for name in allowed if name.endswith("*"))
    env = {
        name: value
        for name, value in source.items()
        if (name in exact or name.startswith(prefixes)) and not name.upper().startswith("CANARY_")
    }
    env.setdefault("PATH", os.defpath)
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(mps_active_thread_pct)
    env["CANARY_STREAM_PRIORITY"] = "lowest"
    env["CANARY_PROBE_ID"] = probe_id
    return env


class ProcessExecutor:
    name = "process"
    simulated = False

    def __init__(
        self,
        profile: WorkloadProfile,
        *,
        mps_active_thread_pct: int,
        term_grace_s: float = 1.0,
        kill_wait_s: float = 0.5,
        request_timeout_s: float = 5.0,
        request_interval_s: float = 0.0,
        environment_passthrough: tuple[str, ...] = (),
    ) -> None:
        spec = profile.canary
        if spec is None or not spec.command:
            raise ProbeError(f"profile {profile.name!r}: executor 'process' needs canary.command")
        if not spec.endpoint:
            raise ProbeError(
                f"profile {profile.name!r}: executor 'process' needs canary.endpoint to send requests to"
            )
        self.profile = profile
        self.command: tuple[str, ...] = spec.command
        self.endpoint = spec.endpoint.rstrip("/")
        self.spec = spec
        self.mps_active_thread_pct = mps_active_thread_pct
        self.term_grace_s = term_grace_s
        self.kill_wait_s = kill_wait_s
        self.request_timeout_s = request_timeout_s
        self.request_interval_s = request_interval_s
        self.environment_passthrough = environment_passthrough
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self._log: IO[bytes] | None = None
        self._client: httpx.AsyncClient | None = None
        self.request_errors = 0
        self.requests_sent = 0

    def environment(self, probe_id: str) -> dict[str, str]:
        return candidate_environment(
            os.environ,
            extra_names=self.environment_passthrough,
            probe_id=probe_id,
            mps_active_thread_pct=self.mps_active_thread_pct,
        )

    async def prepare(self, probe_id: str) -> CandidateProcess | None:
        if self.proc is not None:
            raise ProbeError("process executor prepared twice")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 -- lives until rollback, not a block
        cwd = self.spec.workdir
        if cwd is not None and not Path(cwd).is_dir():
            raise ProbeError(f"profile {self.profile.name!r}: canary.workdir {cwd!r} is not a directory")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER, *self.command],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self.environment(probe_id),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ProbeError(f"cannot launch the candidate {self.command[0]!r}: {exc}") from exc
        # start_new_session makes the child a session and group leader: its pgid is its pid.
        self.pgid = self.proc.pid
        return CandidateProcess(self.proc.pid, self.pgid)

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - 600))
        return self._log.read().decode("utf-8", "replace").strip()

    async def start(self) -> None:
        if self.proc is None or self.proc.stdin is None:
            raise ProbeError("process executor started before prepare()")
        try:
            self.proc.stdin.write(b"1")
            self.proc.stdin.close()
        except BrokenPipeError as exc:
            raise ProbeError(
                f"the candidate launcher exited before it was started: {self._log_tail()}"
            ) from exc
        self._client = httpx.AsyncClient(timeout=self.request_timeout_s)
        with anyio.move_on_after(self.spec.startup_timeout_s) as scope:
            while not await self._ready():
                code = self.proc.poll()
                if code is not None:
                    raise ProbeError(
                        f"the candidate exited with code {code} before it was ready: {self._log_tail()}"
                    )
                await anyio.sleep(0.05)
        if scope.cancelled_caught:
            raise ProbeError(f"the candidate was not ready within {self.spec.startup_timeout_s:g} s")

    async def _ready(self) -> bool:
        assert self._client is not None
        if self.spec.ready_path is None:
            parts = urlsplit(self.endpoint)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", port)
            except OSError:
                return False
            await stream.aclose()
            return True
        try:
            response = await self._client.get(self.endpoint + self.spec.ready_path, timeout=1.0)
        except httpx.HTTPError:
            return False
        return response.is_success

    async def drive(self, duration_s: float, gate: ExposureGate, *, task_status: TaskStatus[None]) -> None:
        if self._client is None:
            raise ProbeError("process executor drove requests before start()")
        url = self.endpoint + self.spec.request_path
        body = self.spec.request_body.encode() if self.spec.request_body is not None else None
        task_status.started()
        with anyio.move_on_after(duration_s):
            # The gate is asked before every request: a refused request is never sent.
            while gate.try_acquire():
                self.requests_sent += 1
                try:
                    await self._client.request(self.spec.request_method, url, content=body)
                except httpx.HTTPError:
                    self.request_errors += 1
                if self.request_interval_s > 0:
                    await anyio.sleep(self.request_interval_s)
            await anyio.sleep_forever()

    async def rollback(self) -> RollbackReport:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
        if self.proc is None or self.pgid is None:
            return RollbackReport(True, "no candidate process was started")
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # an unreleased launcher reads EOF and exits without starting
        pgid, proc = self.pgid, self.proc

        def alive() -> bool:
            proc.poll()  # reap the leader, else its zombie keeps the group alive
            return group_alive(pgid)

        ended = await terminate_group(
            pgid, alive=alive, term_grace_s=self.term_grace_s, kill_wait_s=self.kill_wait_s
        )
        killed = ended.killed
        self.proc.poll()
        gone = not group_alive(pgid)
        if self._log is not None and gone:
            self._log.close()
            self._log = None
        how = "SIGKILL after SIGTERM was ignored" if killed else "SIGTERM"
        if gone:
            return RollbackReport(
                True, f"process group {pgid} gone ({how}); exit code {self.proc.returncode}", killed=killed
            )
        return RollbackReport(False, f"process group {pgid} still has processes after {how}", killed=killed)
