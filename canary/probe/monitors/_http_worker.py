"""The http monitor's timing process: ``python …/_http_worker.py CONFIG_JSON``.

It times requests in a process of its own, so the prober's event loop (which also drives the
candidate's requests and writes the journal) never adds its own delays to the resident's latency.
Protocol: one line ``<duration_s>`` on stdin → one JSON line ``{"latencies_ms": [...], "failures": n}``
on stdout. Standard library only (``http.client``, keep-alive), to start fast.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit


def main() -> None:
    config = json.loads(sys.argv[1])
    parts = urlsplit(config["url"])
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    body = config["body"].encode() if config.get("body") is not None else None
    timeout_s = float(config["timeout_s"])
    interval_s = float(config.get("interval_s", 0.0))
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = None
    for line in sys.stdin:
        duration_s = float(line)
        latencies_ms: list[float] = []
        failures = 0
        deadline = time.perf_counter() + duration_s
        while True:
            began = time.perf_counter()
            if began >= deadline:
                break
            try:
                if conn is None:
                    conn = cls(
                        parts.hostname or "127.0.0.1",
                        parts.port,
                        timeout=min(timeout_s, max(deadline - began, 0.001)),
                    )
                conn.request(config["method"], path, body=body)
                response = conn.getresponse()
                response.read()
                if 200 <= response.status < 300:
                    latencies_ms.append((time.perf_counter() - began) * 1000.0)
                else:
                    failures += 1
            except (OSError, http.client.HTTPException):
                failures += 1
                if conn is not None:
                    conn.close()
                conn = None
            if interval_s > 0:
                time.sleep(interval_s)
        sys.stdout.write(json.dumps({"latencies_ms": latencies_ms, "failures": failures}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
