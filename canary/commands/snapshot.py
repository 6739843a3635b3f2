"""``canary snapshot DEVICE [--json] [--dcgm URL_OR_FILE]``: what a device looks like now."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from canary.tables import key_values

if TYPE_CHECKING:
    from canary.snapshot import DeviceSnapshot, Measured


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="read a device (catalog name, snapshot file, nvml:N, cuda:N, rocm:N) and print it",
        description=(
            "Read DEVICE once and print what canary sees: memory, compute mode, MIG, residents, "
            "telemetry, and why any value is unknown. Exit 4 when the device cannot be reached."
        ),
    )
    parser.add_argument("device", metavar="DEVICE", help="h100-sxm, snapshot.yaml, nvml:0, cuda:0 or rocm:0")
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    parser.add_argument(
        "--dcgm",
        metavar="URL_OR_FILE",
        help="merge telemetry from a dcgm-exporter scrape (http(s) URL or a saved metrics file)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from canary.backends import resolve_device

    resolved = resolve_device(args.device)
    snapshot = resolved.snapshot
    if args.dcgm:
        from canary.backends.dcgm_exporter import merge_telemetry, read_scrape

        gpu = snapshot.index if snapshot.index is not None else 0
        snapshot = merge_telemetry(snapshot, read_scrape(args.dcgm, gpu=gpu, uuid=snapshot.uuid))
    if args.json:
        sys.stdout.write(json.dumps(snapshot.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(format_table(snapshot))
    return 0


def _measured(value: Measured | None, unit: str) -> str:
    if value is None:
        return "unknown"
    return f"{value.value:.1f}{unit} ({value.source})"


def format_table(snapshot: DeviceSnapshot) -> str:
    """A compact two-column table; unknown values say ``unknown`` and the reasons follow."""
    from canary.units import format_bytes

    def opt(value: object) -> str:
        return "unknown" if value is None else str(value)

    mig = snapshot.mig
    mig_text = "unknown" if mig.enabled is None else ("enabled" if mig.enabled else "disabled")
    if mig.enabled and mig.instances:
        mig_text += ": " + ", ".join(f"{m.profile}@{m.start}+{m.size}" for m in mig.instances)
    mps = snapshot.mps
    mps_text = "unknown" if mps.running is None else ("running" if mps.running else "not running")
    t = snapshot.telemetry
    rows: list[tuple[str, str]] = [
        ("device", f"{snapshot.device_type} (index {opt(snapshot.index)}, source {snapshot.source})"),
        ("uuid", opt(snapshot.uuid)),
        ("driver / CUDA", f"{opt(snapshot.driver_version)} / {opt(snapshot.cuda_driver_version)}"),
        ("compute mode", opt(snapshot.compute_mode)),
        ("memory total", format_bytes(snapshot.memory_total_bytes)),
        ("memory used", format_bytes(snapshot.memory_used_bytes)),
        ("memory reserved", format_bytes(snapshot.memory_reserved_bytes)),
        ("MIG", mig_text),
        ("MPS", mps_text),
        ("GPU utilisation", _measured(t.utilization_gpu_pct, "%")),
        ("SM active", _measured(t.sm_active_pct, "%")),
        ("SM occupancy", _measured(t.sm_occupancy_pct, "%")),
        ("DRAM active", _measured(t.dram_active_pct, "%")),
        ("power", f"{_measured(t.power_w, ' W')} of {_measured(t.power_limit_w, ' W')}"),
        ("temperature", _measured(t.temperature_c, " °C")),
        (
            "clock events",
            "unknown" if t.clock_event_reasons is None else (", ".join(t.clock_event_reasons) or "none"),
        ),
    ]
    if not snapshot.residents:
        rows.append(("residents", "none"))
    for resident in snapshot.residents:
        what = "profiled" if resident.profiled else "unprofiled"
        rows.append(("resident", f"{resident.name}: {format_bytes(resident.observed_memory_bytes)} ({what})"))
    lines = key_values(rows)
    if snapshot.unknown_reasons:
        lines.append("unknown:")
        lines.extend(f"  {field}: {reason}" for field, reason in sorted(snapshot.unknown_reasons.items()))
    return "\n".join(lines) + "\n"
