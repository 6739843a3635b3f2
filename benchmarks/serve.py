"""Service benchmark: cached admissions over HTTP against the no-op ceiling, a probe storm, a crash.

    python benchmarks/serve.py                               # SQLite and PostgreSQL, 1/16/64 clients
    python benchmarks/serve.py --backends sqlite --seconds 2 # a quick run

The server is a real ``canary serve`` subprocess on a loopback port; this process is the load
generator (closed loop: each of N clients sends its next request when the last one is answered), one
keep-alive HTTP/1.1 socket per client with ``TCP_NODELAY`` and each request written in one ``send``
(``HttpConnection``). For each backend, in the same run and against the same server:

* ``noop``: ``GET /v1/noop`` (authentication, routing, JSON) — the ceiling for this server;
* ``admit-value``: ``POST /v1/admissions`` answered from evidence, profile and snapshot sent by value;
* ``admit-ref``: the same with registry references (``name@version``), as a scheduler sends them;
* ``admit-distinct``: by value, each client asking about a device of its own (its own UUID), so no two
  concurrent decisions share a read of the store (the service shares one read among concurrent
  decisions on the same device and pairs: ``canary.serve.reads``);

at 1, 16 and 64 clients, every load over the same connections spread evenly over the server's worker
processes (checked in /proc): throughput, p50, p99, the server processes that served them and the
busiest one's share, and the CPU time the server's processes, PostgreSQL's and this client spent per
request (``/proc``; on a shared machine the figure its other load distorts least), then each goal,
met or not and by how much. Goals on
PostgreSQL: one client p50 ≤ 3 ms and p99 ≤ 6 ms; 16 clients ≥ 25% of the no-op throughput with
p99 ≤ 3 × p50. Cached admissions are sent with ``reserve: false`` (decide, do not book): booking
200,000 times would fill the device, and the booking write is measured by the storm's admissions.

Then, where the time of one cached admission goes (in this process, on the service's own objects and
against the same store; wall and CPU): a kept body, a body's first sight (validation, resolution),
the decision and its steps (the read, pooling, stage 1, settling, the certificate and its JSON), the
same read through SQLAlchemy's ``execute`` for comparison, and one history row.

Then a storm: 200 concurrent admissions over 10 unseen pairs on 4 simulated devices, served by 2
worker processes → the store must record exactly 10 probes, never two running on one device at
once, and every request gets its pair's certificate. Then a crash: a server is killed (SIGKILL)
mid-probe, a new one starts, and the probe must be found aborted with a reason, its waiter having
got a connection error rather than a hang.

Probes run on the simulator (paced with ``--sim-time-scale``); the numbers are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import anyio  # noqa: E402
import httpx  # noqa: E402

ROOT = _HERE.parent
EX = ROOT / "examples"
CANARY = [str(Path(sys.executable).parent / "canary")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, db: str, log: Path, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        with log.open("ab") as out:
            self.proc = subprocess.Popen([*CANARY, "--db", db, "serve", "--port", str(self.port), *args],
                                         stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"canary serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("canary serve did not start within 60 s")

    def _workers(self) -> list[int]:
        """uvicorn's worker processes (children of the server, but multiprocessing's helper)."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid and b"resource_tracker" not in cmdline:
                out.append(int(stat.parent.name))
        return out

    def processes(self) -> int:
        """Processes that serve requests: uvicorn's workers, or the server itself when it has none."""
        return len(self._workers()) or 1

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server's processes have used so far: per request, a figure the
        machine's other load does not inflate the way it inflates wall-clock latency."""
        return sum(_cpu_seconds(pid) for pid in [self.proc.pid, *self._workers()])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> dict[int, float]:
    """CPU time (user + system) each PostgreSQL server process on this machine has used so far (none
    where none can be read): a cached admission's read costs the database's CPU too, and on a small
    machine that CPU is the server's and the load generator's as well. By process, so that one that
    ends during a series (an idle connection closed, an autovacuum worker) is left out of the
    difference instead of taking its whole past CPU with it."""
    found: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text[text.index("(") + 1:text.rindex(")")].startswith("postgres"):
            found[int(stat.parent.name)] = _cpu_seconds(int(stat.parent.name))
    return found


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes of ``after`` used since ``before`` (new ones: all of theirs)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def make_store(backend: str, tmp: Path) -> tuple[str, Any]:
    from evidence_store.migrate import upgrade

    if backend == "sqlite":
        url = f"sqlite:///{tmp / 'bench.sqlite3'}"
        upgrade(url)
        return url, lambda: None
    import psycopg

    name = f"canary_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    upgrade(url)
    return url, drop


def token(url: str, *scopes: str) -> str:
    from evidence_store.database import make_engine, session_scope
    from evidence_store.service import tokens

    engine = make_engine(url)
    with session_scope(engine) as s:
        secret, _ = tokens.create(s, name="bench", scopes=scopes, now=dt.datetime.now(dt.UTC))
    engine.dispose()
    return secret


def docs() -> tuple[dict[str, Any], dict[str, Any]]:
    from canary.profile import load_profile
    from canary.snapshot import load_snapshot

    return (load_profile(EX / "profiles" / "embedding-service.yaml").model_dump(mode="json"),
            load_snapshot(EX / "snapshots" / "g-nccl-mps-room.yaml").model_dump(mode="json"))


@dataclass
class Series:
    backend: str
    endpoint: str
    clients: int
    workers: int
    requests: int
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms_per_request: float
    client_cpu_ms_per_request: float
    db_cpu_ms_per_request: float  # PostgreSQL's server processes (0 on SQLite, which runs in the server)
    busiest_process_share: float  # of the server's CPU in the series: ~1/workers when the load is spread


class HttpConnection:
    """One keep-alive HTTP/1.1 connection with ``TCP_NODELAY``, sending pre-encoded requests and
    reading ``Content-Length`` responses: the load generator's client.

    Not ``httpx.AsyncClient``: on this 2-core machine it spent 4–7 ms of client CPU per request (a
    no-op answered in 0.7 ms by the server measured 4.7–7.4 ms through it; encode/httpx#3215), time
    that is the client's, not the server's, and that it takes from the server's cores."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> HttpConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # asyncio sets it too; say so here
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)  # headers and body in one write: no Nagle/delayed-ACK stall either way
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise RuntimeError(f"unexpected Transfer-Encoding {value.strip()!r}: the server streams")
        if length is None:
            raise RuntimeError("a response without Content-Length")
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def encode_request(method: str, path: str, auth: str, body: Any) -> bytes:
    content = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", f"authorization: Bearer {auth}"]
    if body is not None:
        head += ["content-type: application/json", f"content-length: {len(content)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + content


def closed_loops(port: int, auth: str, loads: list[tuple[str, str, Any]], clients: int, seconds: float,
                 measure: Any, owners: ConnectionOwners | None = None) -> list[
                     tuple[list[float], int, int, Any, Any]]:
    """For each load (method, path, body) in turn, over the **same** ``clients`` connections: each
    connection sends its next request when the last is answered, for a warm-up then ``seconds``.

    The same connections for every load, spread evenly over the server's worker processes
    (``spread_connections``, with ``owners``): the kernel hands each new connection to whichever worker
    accepts first, and sixteen connections opened at once were seen all on one of two workers in one
    series and split 8/8 in the next, which made the no-op and the admissions of one run incomparable
    and a "two worker" series a one-worker series. Per load: the latencies of the 200 answers after the
    warm-up, the count of other answers, the count of all answers (warm-up included), and
    ``measure()`` before and after it."""
    out: list[tuple[list[float], int, int, Any, Any]] = []

    async def one(conns: list[HttpConnection], requests: list[bytes]) -> tuple[list[float], int, int]:
        latencies: list[float] = []
        errors = answered = 0
        loop = asyncio.get_running_loop()
        warm_until = loop.time() + min(1.0, seconds / 4)
        stop = warm_until + seconds

        async def worker(conn: HttpConnection, request: bytes) -> None:
            nonlocal errors, answered
            while True:
                t0 = time.perf_counter()
                status, _ = await conn.send(request)
                t1 = time.perf_counter()
                answered += 1
                now = loop.time()
                if now > stop:
                    return
                if status != 200:
                    errors += 1
                elif now > warm_until:
                    latencies.append(t1 - t0)

        await asyncio.gather(*(worker(c, requests[i % len(requests)]) for i, c in enumerate(conns)))
        return latencies, errors, answered

    async def main() -> None:
        conns = await spread_connections(port, auth, clients, owners)
        try:
            for method, path, body in loads:
                before = measure()
                bodies = body if isinstance(body, list) else [body]  # a list: one body per connection, in turn
                latencies, errors, answered = await one(conns, [encode_request(method, path, auth, b) for b in bodies])
                out.append((latencies, errors, answered, before, measure()))
        finally:
            for c in conns:
                c.close()

    run_loop(main())
    return out


async def spread_connections(port: int, auth: str, clients: int, owners: ConnectionOwners | None) -> list[
        HttpConnection]:
    """``clients`` connections, spread evenly over the server's processes as far as ``owners`` (the
    process serving each client port, read from /proc) tells: a connection that lands on a process
    already holding its share is closed and opened again (each answers a request first, so the server
    has accepted it), up to 50 tries per connection."""
    ping = encode_request("GET", "/healthz", auth, None)
    share = -(-clients // (owners.processes if owners is not None else 1))  # ceil
    conns: list[HttpConnection] = []
    held: dict[int | None, int] = {}
    for _ in range(50 * clients):
        if len(conns) == clients:
            break
        conn = await HttpConnection.open(port)
        await conn.send(ping)
        pid = None if owners is None else owners().get(conn.writer.get_extra_info("sockname")[1])
        if pid is not None and held.get(pid, 0) >= share:
            conn.close()
            continue
        held[pid] = held.get(pid, 0) + 1
        conns.append(conn)
    while len(conns) < clients:  # the tries ran out: take what the kernel gives
        conns.append(await HttpConnection.open(port))
    return conns


class ConnectionOwners:
    """Which of a server's processes serves each client connection (by the client's local port), from
    each process's socket descriptors and the kernel's TCP table."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.processes = server.processes()

    def __call__(self) -> dict[int, int]:
        inodes: dict[str, int] = {}
        for pid in self.server._workers() or [self.server.proc.pid]:
            try:
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes[target[8:-1]] = pid
            except OSError:
                continue
        owners: dict[int, int] = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(local.rsplit(":", 1)[1], 16) == self.server.port:
                    owners[int(remote.rsplit(":", 1)[1], 16)] = inodes[inode]
        return owners


def run_loop(coro: Any) -> None:
    """uvloop where it is installed (it is with ``canary-gpu[serve]``): less client CPU per request."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def probe_to_end(c: httpx.Client, r: httpx.Response) -> dict[str, Any]:
    while True:
        status: dict[str, Any] = r.json()
        if status.get("state") not in ("queued", "running"):
            return status
        r = c.get(f"/v1/probes/{status['id']}", params={"wait": "30s"})


def run_http(backend: str, url: str, tmp: Path, args: argparse.Namespace) -> list[Series]:
    profile, snapshot = docs()
    secret = token(url, "admin")
    out: list[Series] = []
    for workers in args.workers:
        server = Server(url, tmp / f"server-{backend}-{workers}.log", "--workers", str(workers))
        try:
            with httpx.Client(base_url=server.base, timeout=60, headers={"Authorization": f"Bearer {secret}"}) as c:
                body = {"device": snapshot, "candidate": profile}
                status = probe_to_end(c, c.post("/v1/admissions", json=body))
                assert status.get("state", "done") == "done", status
                c.post("/v1/profiles", json={"document": profile}).raise_for_status()
                c.post("/v1/snapshots", json={"document": snapshot, "name": "bench-node", "version": "1"}).raise_for_status()
                by_value = {"device": snapshot, "candidate": profile, "reserve": False}
                by_ref = {"device": "bench-node@1", "candidate": f"{profile['name']}@{profile['version']}",
                          "reserve": False}
                # one device of its own per connection (evidence is keyed by the device type, so the pair's
                # evidence answers them all): decisions no two of which can share a read of the store
                distinct = [by_value | {"device": snapshot | {"uuid": f"GPU-bench-{i:04d}"}} for i in range(max(args.clients))]
                for b in (by_value, by_ref, distinct[0]):
                    cert = c.post("/v1/admissions", json=b).json()
                    assert cert["decided_by"] == "cache", cert
            served = server.processes()
            loads = [("noop", "GET", "/v1/noop", None), ("admit-value", "POST", "/v1/admissions", by_value),
                     ("admit-ref", "POST", "/v1/admissions", by_ref),
                     ("admit-distinct", "POST", "/v1/admissions", distinct)]

            def measure(server: Server = server) -> tuple[dict[int, float], float, dict[int, float]]:
                return ({pid: _cpu_seconds(pid) for pid in [server.proc.pid, *server._workers()]},
                        time.process_time(), postgres_cpu_seconds() if backend == "postgresql" else {})

            owners = ConnectionOwners(server)
            for clients in args.clients:
                runs = closed_loops(server.port, secret, [load[1:] for load in loads], clients, args.seconds, measure,
                                    owners)
                for (endpoint, *_), (lat, errors, answered, before, after) in zip(loads, runs, strict=True):
                    per = 1000 / max(answered, 1)
                    by_process = {pid: after[0].get(pid, 0.0) - cpu for pid, cpu in before[0].items()}
                    server_cpu = sum(by_process.values())
                    s = Series(backend, endpoint, clients, served, len(lat), len(lat) / args.seconds,
                               pct(lat, 0.5), pct(lat, 0.99), errors, server_cpu * per, (after[1] - before[1]) * per,
                               spent(before[2], after[2]) * per,
                               max(by_process.values()) / server_cpu if server_cpu > 0 else float("nan"))
                    out.append(s)
                    print(f"  {backend:10} {endpoint:12} clients {clients:3}  workers {served}  "
                          f"{s.throughput_rps:8.0f} req/s  p50 {s.p50_ms:6.2f} ms  p99 {s.p99_ms:6.2f} ms  "
                          f"cpu/req server {s.server_cpu_ms_per_request:5.2f} ms client "
                          f"{s.client_cpu_ms_per_request:5.2f} ms db {s.db_cpu_ms_per_request:5.2f} ms  "
                          f"busiest process {s.busiest_process_share:4.0%} of the server's CPU"
                          f"{f'  errors {errors}' if errors else ''}", flush=True)
        finally:
            server.stop()
    return out


def breakdown(url: str, n: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU microseconds of each step of one cached admission, run in this process on
    the service's own objects (``create_app`` and its lifespan, so the decision read is the server's:
    psycopg's asynchronous pool on PostgreSQL, a worker thread on SQLite): what a kept body costs, what
    the first sight of a body costs, and the steps inside the decision; then the same read through
    SQLAlchemy's ``Connection.execute``, which it replaced, and one history row. CPU time (this thread's)
    is the figure the machine's other load inflates least."""
    import uvloop

    from canary.admission.decisions import hard_fit as stage1
    from canary.admission.decisions import make_certificate, settle
    from canary.admission.store import BOOKED_SOURCE, _single_statement, evidence_from_rows
    from canary.serve import decide
    from canary.serve import resolve as resolving
    from canary.serve.app import create_app
    from canary.serve.config import ServeConfig
    from canary.serve.schemas import AdmissionRequest
    from evidence_store import admission_log
    from evidence_store.database import session_scope
    from evidence_store.lookup import _decision_statement

    profile, snapshot = docs()
    raw = json.dumps({"device": snapshot, "candidate": profile, "reserve": False}).encode()
    app = create_app(ServeConfig(db_url=url, auth="none"))
    names = ("kept body: its SHA-256 and the kept preparation", "first sight: validate the body (pydantic)",
             "first sight: prepare (resolve, pair keys, history row)",
             "decision: decide.admission (read, stage 1 memo, settle, certificate)",
             "  store: the decision read (the server's)", "  pool the evidence rows",
             "  stage 1: hard fit (pure; what a memo miss costs)", "  settle", "  certificate",
             "  certificate to JSON (compact, as served)",
             "the same read through SQLAlchemy Connection.execute (before)",
             "history row, 10 in one INSERT and transaction (per row)")
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}

    def tick() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def note(name: str, t0: tuple[float, float], t1: tuple[float, float], per: int = 1) -> None:
        wall[name].append((t1[0] - t0[0]) / per)
        cpu[name].append((t1[1] - t0[1]) / per)

    async def main() -> None:
        async with app.router.lifespan_context(app):
            svc = app.state.service
            body = AdmissionRequest.model_validate_json(raw)
            prepared = decide.prepare(svc, body, probe=True, reserve=False, seed=0)
            svc.prepared["admissions"].put(raw, prepared)
            req = prepared.request
            engine = svc.engine
            statement = _decision_statement(engine.dialect)
            for i in range(n):
                t = tick()
                assert svc.prepared["admissions"].get(raw) is prepared
                note(names[0], t, tick())
                t = tick()
                body = AdmissionRequest.model_validate_json(raw)
                note(names[1], t, tick())
                resolving._documents.clear()  # the first sight of these documents
                resolving._inline_refs.clear()
                t = tick()
                decide.prepare(svc, body, probe=True, reserve=False, seed=0)
                note(names[2], t, tick())
                t = tick()
                response = await decide.admission(svc, prepared, time.perf_counter())
                note(names[3], t, tick())
                assert response.status_code == 200 and b'"decided_by":"cache"' in response.body, response.body
                t = tick()
                read = await svc.reads.read(device_id=req.device_id, digests=prepared.digests,
                                            ttl_s=req.policy.evidence_ttl_s)
                t2 = tick()
                now = read.at
                evidence = evidence_from_rows(req, prepared.keys, read.rows, at=now, now=now)
                t3 = tick()
                hard = stage1(req, reserved_bytes_by_others=read.booked, reservations_source=BOOKED_SOURCE)
                t4 = tick()
                settled = settle(req, hard, evidence)
                t5 = tick()
                cert = make_certificate(req, hard, settled.decision, now)
                t6 = tick()
                cert.model_dump_json()
                t7 = tick()
                for name, (a, b) in zip(names[4:10], itertools.pairwise((t, t2, t3, t4, t5, t6, t7)), strict=True):
                    note(name, a, b)
                arrays: Any = ([req.device_id], list(prepared.digests))
                if engine.dialect.name != "postgresql":  # SQLite's json_each takes the arrays as JSON text
                    arrays = tuple(json.dumps(a) for a in arrays)
                values = {"devices": arrays[0], "digests": arrays[1], "booked_at": now, "evidence_at": now,
                          "oldest": now - dt.timedelta(seconds=req.policy.evidence_ttl_s)}

                def through_sqlalchemy(values: dict[str, Any] = values) -> None:
                    with _single_statement(engine) as connection:
                        connection.execute(statement, values).all()

                t = tick()
                through_sqlalchemy()
                note(names[10], t, tick())
                if i % 10 == 0:
                    entry = decide._history(prepared, "admit")
                    assert entry is not None
                    t = tick()
                    with session_scope(engine) as session:
                        admission_log.log_admissions(session, [entry] * 10)
                    note(names[11], t, tick(), per=10)

    uvloop.run(main())
    return {k: {"wall_us": statistics.median(wall[k]) * 1e6, "cpu_us": statistics.median(cpu[k]) * 1e6}
            for k in names if wall[k]}


def goals(series: list[Series]) -> dict[str, Any]:
    """The issue's goals, judged on this run's cached admissions (``admit-ref``, what a scheduler
    sends, ``admit-value``, and ``admit-distinct``: a device per client, so no two decisions share a
    read of the store) per worker count: one client p50 ≤ 3 ms and p99 ≤ 6 ms; 16 clients ≥ 25% of the
    no-op's throughput and p99 ≤ 3 × p50."""
    out: dict[str, Any] = {"lines": []}
    for s in series:
        if s.endpoint == "noop":
            continue
        noop = next(n for n in series if n.endpoint == "noop" and n.clients == s.clients and n.workers == s.workers)
        name = f"{s.endpoint} clients {s.clients} workers {s.workers}"
        if s.clients == 1:
            ok = s.p50_ms <= 3 and s.p99_ms <= 6
            text = (f"p50 {s.p50_ms:.1f} ms (goal 3: {s.p50_ms / 3:.1f}x), p99 {s.p99_ms:.1f} ms "
                    f"(goal 6: {s.p99_ms / 6:.1f}x)")
        elif s.clients == 16:
            share = s.throughput_rps / noop.throughput_rps if noop.throughput_rps else float("nan")
            ratio = s.p99_ms / s.p50_ms
            ok = share >= 0.25 and ratio <= 3
            total = s.server_cpu_ms_per_request + s.db_cpu_ms_per_request + s.client_cpu_ms_per_request
            noop_total = noop.server_cpu_ms_per_request + noop.db_cpu_ms_per_request + noop.client_cpu_ms_per_request
            text = (f"throughput {share:.0%} of the no-op's (goal 25%), p99/p50 {ratio:.1f} (goal 3); CPU per "
                    f"request, server + database + client: {total:.2f} ms against the no-op's {noop_total:.2f} ms")
        else:
            continue
        out[name] = {"met": ok, "detail": text}
        out["lines"].append(f"goal {name}: {'met' if ok else 'NOT met'}: {text}")
    return out


async def get_again(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """A long-poll GET, retried once when a pooled connection was closed under it (idempotent)."""
    try:
        return await client.get(path, params={"wait": "30s"})
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return await client.get(path, params={"wait": "30s"})


def storm(url: str, tmp: Path, scale: float) -> dict[str, Any]:
    from sqlalchemy import select

    from evidence_store.database import make_engine, session_scope
    from evidence_store.service.models import ServeProbe

    profile, snapshot = docs()
    secret = token(url, "admit")
    run = uuid.uuid4().hex[:6]
    cands = [profile | {"version": f"storm-{run}-{i}"} for i in range(10)]
    devices = [snapshot | {"uuid": f"GPU-storm-{run}-{d}"} for d in range(4)]
    bodies: list[dict[str, Any]] = [{"device": devices[(j // 10) % 4], "candidate": cands[j % 10], "reserve": False}
                                   for j in range(200)]
    server = Server(url, tmp / "storm.log", "--workers", "2", "--sim-time-scale", str(scale))
    answers: list[dict[str, Any]] = [{} for _ in bodies]
    t0 = time.perf_counter()
    try:
        async def main() -> None:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits,
                                         headers={"Authorization": f"Bearer {secret}"}) as client:
                async def one(j: int) -> None:
                    r = await client.post("/v1/admissions", json=bodies[j])
                    while r.status_code == 202 or r.json().get("state") in ("queued", "running"):
                        r = await get_again(client, f"/v1/probes/{r.json()['id']}")
                    got = r.json()
                    answers[j] = got.get("certificate") or got

                async with anyio.create_task_group() as tg:
                    for j in range(len(bodies)):
                        tg.start_soon(one, j)

        anyio.run(main)
    finally:
        server.stop()
    wall = time.perf_counter() - t0
    engine = make_engine(url)
    with session_scope(engine, read_only=True) as s:
        probes = [p for p in s.scalars(select(ServeProbe)).all()
                  if p.request_json["candidate"]["version"].startswith(f"storm-{run}")]
    engine.dispose()
    overlaps = 0
    by_device: dict[str, list[Any]] = {}
    for p in probes:
        by_device.setdefault(p.device_id, []).append((p.started_at, p.finished_at))
    for spans in by_device.values():
        spans.sort()
        overlaps += sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if end > start)
    right = sum(1 for b, a in zip(bodies, answers, strict=True) if a.get("workload_version") == b["candidate"]["version"])
    return {"requests": len(bodies), "pairs": 10, "devices": 4, "probes_recorded": len(probes),
            "probes_done": sum(1 for p in probes if p.state == "done"), "device_overlaps": overlaps,
            "answered_with_their_pairs_certificate": right, "wall_s": round(wall, 2),
            "coalesced_waiters": sum(p.waiters for p in probes) - len(probes)}


def crash(url: str, tmp: Path) -> dict[str, Any]:
    profile, snapshot = docs()
    secret = token(url, "admit")
    first = Server(url, tmp / "crash-1.log", "--sim-time-scale", "1")
    body = {"device": snapshot | {"uuid": f"GPU-crash-{uuid.uuid4().hex[:6]}"},
            "candidate": profile | {"version": f"crash-{uuid.uuid4().hex[:6]}"}}
    h = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=first.base, timeout=30, headers=h) as c:
        r = c.post("/v1/admissions", json=body)
        probe_id = r.json()["id"]
        while c.get(f"/v1/probes/{probe_id}", params={"wait": "100ms"}).json()["state"] == "queued":
            pass
    waiter: dict[str, Any] = {}

    def wait() -> None:
        t = time.perf_counter()
        try:
            with httpx.Client(base_url=first.base, timeout=60, headers=h) as w:
                waiter["answer"] = w.get(f"/v1/probes/{probe_id}", params={"wait": "60s"}).status_code
        except httpx.HTTPError as exc:
            waiter["error"] = type(exc).__name__
        waiter["seconds_after_kill"] = round(time.perf_counter() - t, 2)

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.5)
    first.kill()
    th.join(timeout=60)
    t_restart = time.perf_counter()
    second = Server(url, tmp / "crash-2.log")
    try:
        with httpx.Client(base_url=second.base, timeout=60, headers=h) as c:
            status = c.get(f"/v1/probes/{probe_id}", params={"wait": "30s"}).json()
        ready_s = time.perf_counter() - t_restart
    finally:
        second.stop()
    return {"probe_state_after_restart": status["state"], "error": status["error"],
            "restart_to_answer_s": round(ready_s, 2), "waiter": waiter}


def plot(series: list[dict[str, Any]], path: Path) -> Path | None:
    """Per backend and worker count: each cached-admission load's throughput as a share of the no-op's
    (the 25% goal drawn) and its p99/p50 (the goal of 3 drawn), by clients. ``None`` without matplotlib
    (the ``bench`` extra)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(s["backend"], s["workers"]) for s in series})
    if not groups:
        return None
    fig, axes = plt.subplots(2, len(groups), figsize=(4.2 * len(groups), 6.5), squeeze=False)
    loads = [e for e in ("admit-value", "admit-ref", "admit-distinct") if any(s["endpoint"] == e for s in series)]
    for col, (backend, workers) in enumerate(groups):
        mine = [s for s in series if s["backend"] == backend and s["workers"] == workers]
        clients = sorted({s["clients"] for s in mine})
        noop = {s["clients"]: s["throughput_rps"] for s in mine if s["endpoint"] == "noop"}
        width = 0.8 / max(len(loads), 1)
        for i, load in enumerate(loads):
            rows = {s["clients"]: s for s in mine if s["endpoint"] == load}
            xs = [j + (i - (len(loads) - 1) / 2) * width for j in range(len(clients))]
            share = [100 * rows[c]["throughput_rps"] / noop[c] if c in rows and noop.get(c) else 0 for c in clients]
            tail = [rows[c]["p99_ms"] / rows[c]["p50_ms"] if c in rows and rows[c]["p50_ms"] else 0 for c in clients]
            axes[0][col].bar(xs, share, width, label=load)
            axes[1][col].bar(xs, tail, width, label=load)
        for row, (goal, label) in enumerate(((25, "throughput, % of the no-op's"), (3, "p99 / p50"))):
            ax = axes[row][col]
            ax.axhline(goal, color="black", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(clients)), [str(c) for c in clients])
            ax.set_xlabel("clients")
            ax.set_ylabel(label)
        axes[0][col].set_title(f"{backend}, {workers} worker{'s' if workers > 1 else ''}")
    axes[0][0].legend(fontsize="small")
    fig.suptitle("Cached admissions against the no-op (dashed: the goals, stated for 16 clients)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--workers", default="1,2", help="server worker processes to measure (comma-separated)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per series")
    parser.add_argument("--breakdown", type=int, default=300, help="cached admissions timed step by step (0: none)")
    parser.add_argument("--sim-time-scale", type=float, default=0.01, help="pacing of the storm's simulated probes")
    parser.add_argument("--out", default="bench-out/serve.json")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    args.workers = [int(w) for w in args.workers.split(",")]
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "series": [], "breakdown_us": {}, "storm": {},
                              "crash": {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for backend in args.backends.split(","):
            url, drop = make_store(backend, tmp)
            try:
                print(f"{backend}:", flush=True)
                series = run_http(backend, url, tmp, args)
                report["series"] += [asdict(s) for s in series]
                report.setdefault("goals", {})[backend] = goals(series)
                for line in report["goals"][backend]["lines"]:
                    print(f"  {backend:10} {line}", flush=True)
                report["breakdown_us"][backend] = breakdown(url, args.breakdown) if args.breakdown > 0 else {}
                for step, us in report["breakdown_us"][backend].items():
                    print(f"  {backend:10} {step:55} wall {us['wall_us']:8.0f} µs  cpu {us['cpu_us']:8.0f} µs",
                          flush=True)
                report["storm"][backend] = storm(url, tmp, args.sim_time_scale)
                print(f"  {backend:10} storm {report['storm'][backend]}", flush=True)
                report["crash"][backend] = crash(url, tmp)
                print(f"  {backend:10} crash {report['crash'][backend]}", flush=True)
            finally:
                drop()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")
    picture = plot(report["series"], out.with_suffix(".png"))
    if picture is not None:
        print(f"wrote {picture}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
