"""dcgm-exporter scrapes: a saved two-GPU H200 scrape (dcgm-exporter's default counters plus the
DCGM_FI_PROF_* profiling fields, Prometheus text format), from a file, from text and over loopback HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from canary.backends import idle_snapshot
from canary.backends.dcgm_exporter import merge_telemetry, read_scrape
from canary.catalog import lookup
from canary.errors import DeviceUnavailable, InputError

SCRAPE = Path(__file__).parent / "data" / "dcgm-exporter-h200x2.prom"
UUID0 = "GPU-5e1a3c1e-8f0b-4d5e-9b9c-2f64d1e0a7b1"
MIB = 1024 * 1024


def test_gpu0_values_and_units() -> None:
    scrape = read_scrape(str(SCRAPE), gpu=0)
    assert (scrape.uuid, scrape.model_name) == (UUID0, "NVIDIA H200")
    t = scrape.telemetry
    assert t.utilization_gpu_pct is not None and t.utilization_gpu_pct.value == 97
    # DCGM_FI_PROF_* are ratios; canary holds percentages
    assert t.sm_active_pct is not None and t.sm_active_pct.value == pytest.approx(35.1904)
    assert t.sm_occupancy_pct is not None and t.sm_occupancy_pct.value == pytest.approx(11.2563)
    assert t.dram_active_pct is not None and t.dram_active_pct.value == pytest.approx(28.4417)
    assert t.power_w is not None and t.power_w.source == "dcgm-exporter"
    assert scrape.memory_used_bytes == 103754 * MIB and scrape.memory_reserved_bytes == 549 * MIB


def test_missing_profiling_fields_are_unknown() -> None:
    text = "\n".join(line for line in SCRAPE.read_text().splitlines() if "DCGM_FI_PROF" not in line) + "\n"
    scrape = read_scrape(text, gpu=1)
    assert scrape.telemetry.sm_occupancy_pct is None
    assert "DCGM_FI_PROF_SM_OCCUPANCY" in scrape.unknown_reasons["telemetry.sm_occupancy_pct"]
    assert (
        scrape.telemetry.utilization_gpu_pct is not None and scrape.telemetry.utilization_gpu_pct.value == 0
    )


def test_merge_fills_only_unknowns() -> None:
    base = idle_snapshot(lookup("h200")).model_copy(
        update={
            "memory_used_bytes": None,
            "unknown_reasons": {"telemetry.sm_occupancy_pct": "GPM unsupported", "memory_used_bytes": "x"},
        }
    )
    merged = merge_telemetry(base, read_scrape(str(SCRAPE), gpu=0))
    assert merged.telemetry.sm_occupancy_pct is not None
    assert merged.memory_used_bytes == 103754 * MIB
    assert (
        "telemetry.sm_occupancy_pct" not in merged.unknown_reasons
        and "memory_used_bytes" not in merged.unknown_reasons
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu": 7}, "no dcgm-exporter series for gpu 7 (gpus in the scrape: 0, 1)"),
        ({"gpu": 0, "uuid": "GPU-other"}, "but the device is GPU-other"),
    ],
)
def test_wrong_gpu_is_input_error(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_scrape(str(SCRAPE), **kwargs)


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_scrape(str(tmp_path / "absent.prom"), gpu=0)
    assert caught.value.file == str(tmp_path / "absent.prom")


@pytest.fixture
def exporter() -> Iterator[str]:
    body = SCRAPE.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            if self.path == "/metrics":
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_scrape_over_http(exporter: str) -> None:
    scrape = read_scrape(f"{exporter}/metrics", gpu=1)
    assert scrape.uuid == "GPU-0b7c2d44-1a6e-4f3b-8e21-93c5d7a4e6f0"
    with pytest.raises(DeviceUnavailable, match="cannot scrape dcgm-exporter"):
        read_scrape(f"{exporter}/nothing", gpu=0)
