"""Loopback HTTP servers that stand in for GPU workloads in the probe tests (run as scripts).

CPU contention stands in for GPU contention. ``--device-lock FILE`` is the stand-in GPU: work runs
while holding an exclusive ``flock`` on it, so contexts are serialised the way a time-sliced GPU
serialises kernels of different processes (and, like a GPU, regardless of OS niceness). The resident
spends ``--work-ms`` of CPU per request on the "device"; the candidate, while it receives requests,
keeps ``--burners`` child processes spinning on the device in ``--burner-slice-ms`` slices (and
spends ``--work-ms + --burn-ms`` per request). ``/metrics`` exports the request latency as a
Prometheus histogram (seconds), as serving stacks do.

    python tests/support/servers.py --port P [--work-ms 2] [--burn-ms 0] [--burners 0]
        [--device-lock FILE] [--burner-slice-ms 5] [--ignore-sigterm] [--ready-delay S] [--nice N]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import http.server
import multiprocessing
import os
import signal
import threading
import time

BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1


@contextlib.contextmanager
def on_device(path: str | None):  # type: ignore[no-untyped-def]
    if path is None:
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def burner(active_until, lock_path: str | None, slice_ms: float) -> None:  # type: ignore[no-untyped-def]
    while True:
        if time.time() < active_until.value:
            with on_device(lock_path):
                spin(slice_ms)
            time.sleep(0.0005)
        else:
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--work-ms", type=float, default=2.0)
    parser.add_argument("--burn-ms", type=float, default=0.0)
    parser.add_argument("--burners", type=int, default=0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--ready-delay", type=float, default=0.0)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--device-lock", default=None)
    parser.add_argument("--burner-slice-ms", type=float, default=5.0)
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.nice:
        os.nice(args.nice)
    active_until = multiprocessing.Value("d", 0.0)
    for _ in range(args.burners):
        multiprocessing.Process(
            target=burner, args=(active_until, args.device_lock, args.burner_slice_ms), daemon=True
        ).start()
    counts = [0] * (len(BUCKETS_S) + 1)
    total = [0.0, 0]
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: object) -> None:
            return

        def _send(self, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/ready":
                self._send(b"ok")
                return
            if self.path == "/metrics":
                lines = ["# TYPE request_latency_seconds histogram"]
                with lock:
                    running = 0
                    for le, c in zip(BUCKETS_S, counts, strict=False):
                        running += c
                        lines.append(f'request_latency_seconds_bucket{{le="{le}"}} {running}')
                    lines.append(f'request_latency_seconds_bucket{{le="+Inf"}} {running + counts[-1]}')
                    lines.append(f"request_latency_seconds_sum {total[0]}")
                    lines.append(f"request_latency_seconds_count {total[1]}")
                self._send(("\n".join(lines) + "\n").encode())
                return
            began = time.perf_counter()
            if args.burners:
                active_until.value = time.time() + 0.1
            if args.work_ms + args.burn_ms > 0:
                with on_device(args.device_lock):
                    spin(args.work_ms + args.burn_ms)
            elapsed = time.perf_counter() - began
            with lock:
                index = next((i for i, le in enumerate(BUCKETS_S) if elapsed <= le), len(BUCKETS_S))
                counts[index] += 1
                total[0] += elapsed
                total[1] += 1
            self._send(b"done")

        do_POST = do_GET

    time.sleep(args.ready_delay)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
