"""A live AMD Instinct device through amdsmi → ``DeviceSnapshot`` (source ``rocm``).

Read: VRAM total and used in bytes (``amdsmi_get_gpu_memory_total/usage`` with
``AmdSmiMemoryType.VRAM``), activity (``gfx_activity`` → utilisation, ``umc_activity`` → DRAM
activity; ``"N/A"`` = unknown), processes with their VRAM (``pid:<N>`` residents), driver version.
The compute partition (``SPX``…``CPX``) and memory partition (``NPS1``…``NPS8``) go into
``snapshot.partition`` (and :func:`read_with_partitions` also returns them beside the snapshot). Without
``libamd_smi.so`` the import itself fails (``KeyError``); that is ``DeviceUnavailable``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any

from canary.backends._vendor import AmdSmi, Unavailable
from canary.errors import DeviceUnavailable, InputError
from canary.snapshot import DevicePartition, DeviceSnapshot, Measured, MigState, MpsState, Resident, Telemetry


@dataclass(frozen=True)
class Partitions:
    """Compute partition (``SPX``/``DPX``/``TPX``/``QPX``/``CPX``) and memory partition (``NPS1``…);
    ``None`` = not reported."""

    compute: str | None
    memory: str | None


def _mode(value: str | None, allowed: str) -> str | None:
    """amdsmi's partition string (``"CPX"``, ``"NPS4"``; sometimes lower case) or ``None``."""
    if value is None:
        return None
    text = str(value).strip().upper()
    return text if text in allowed.split() else None


def _known(value: Any) -> Any:
    """amdsmi writes ``"N/A"`` for values the device does not report."""
    return None if value is None or value == "N/A" else value


class _Session:
    def __init__(self, module: Any) -> None:
        self.smi = AmdSmi(module)
        self.lib = self.smi.lib
        try:
            self.smi.call("amdsmi_init", self.lib.AmdSmiInitFlags.INIT_AMD_GPUS)
        except Unavailable as exc:
            raise DeviceUnavailable(f"amdsmi could not start: {exc.reason}") from None

    def handle(self, index: int) -> Any:
        try:
            handles = self.smi.call("amdsmi_get_processor_handles")
        except Unavailable as exc:
            raise DeviceUnavailable(f"amdsmi lists no GPUs: {exc.reason}") from None
        if not 0 <= index < len(handles):
            raise DeviceUnavailable(f"no AMD GPU with index {index} (this machine has {len(handles)})")
        return handles[index]

    def close(self) -> None:
        # shutting down a library that failed midway: nothing more to release
        with contextlib.suppress(Unavailable):
            self.smi.call("amdsmi_shut_down")


def read_snapshot(index: int, *, module: Any = None) -> DeviceSnapshot:
    """Read AMD GPU ``index``; every field may be unknown, with the reason in ``unknown_reasons``."""
    snap, _ = read_with_partitions(index, module=module)
    return snap


def read_with_partitions(index: int, *, module: Any = None) -> tuple[DeviceSnapshot, Partitions]:
    from canary.catalog import lookup

    session = _Session(module)
    try:
        handle = session.handle(index)
        unknown: dict[str, str] = {}
        taken_at = dt.datetime.now(dt.UTC)

        def get(field: str, name: str, *args: Any) -> Any:
            try:
                return session.smi.call(name, handle, *args)
            except Unavailable as exc:
                unknown.setdefault(field, f"{name}: {exc.reason}")
                return None

        asic = get("device_type", "amdsmi_get_gpu_asic_info") or {}
        market = _known(asic.get("market_name"))
        device_type = market or f"unknown-amd-{index}"
        if market:
            try:
                device_type = lookup(market).name
            except InputError as exc:
                unknown["device_type"] = (
                    f"amdsmi name {market!r} is not in the catalog ({exc.problem}); kept as reported"
                )
        uuid = _known(get("uuid", "amdsmi_get_gpu_device_uuid"))
        driver = get("driver_version", "amdsmi_get_gpu_driver_info") or {}
        vram = session.lib.AmdSmiMemoryType.VRAM
        total = _known(get("memory_total_bytes", "amdsmi_get_gpu_memory_total", vram))
        used = _known(get("memory_used_bytes", "amdsmi_get_gpu_memory_usage", vram))
        activity = get("telemetry.utilization_gpu_pct", "amdsmi_get_gpu_activity") or {}
        gfx, umc = _known(activity.get("gfx_activity")), _known(activity.get("umc_activity"))
        if activity and gfx is None:
            unknown["telemetry.utilization_gpu_pct"] = "amdsmi reports gfx_activity as N/A"
        if umc is None:
            unknown.setdefault("telemetry.dram_active_pct", "amdsmi reports umc_activity as N/A")
        procs = get("residents", "amdsmi_get_gpu_process_list") or []
        residents = []
        for proc in procs:
            pid = int(proc["pid"])
            vram_used = _known((proc.get("memory_usage") or {}).get("vram_mem"))
            if vram_used is None:
                unknown[f"residents.pid:{pid}.observed_memory_bytes"] = "amdsmi does not report its VRAM"
            residents.append(
                Resident(
                    name=f"pid:{pid}",
                    pid=pid,
                    observed_memory_bytes=int(vram_used) if vram_used is not None else None,
                )
            )
        partitions = Partitions(
            compute=_known(get("partition.compute", "amdsmi_get_gpu_compute_partition")),
            memory=_known(get("partition.memory", "amdsmi_get_gpu_memory_partition")),
        )
        unknown["telemetry.sm_occupancy_pct"] = (
            "amdsmi has no occupancy counter; use rocprof for CU occupancy"
        )
        unknown["compute_mode"] = "AMD GPUs have no compute mode (no exclusive or prohibited mode to report)"
        unknown["mps"] = "MPS is an NVIDIA mechanism"

        def measured(value: Any) -> Measured | None:
            return (
                None if value is None else Measured(value=float(value), observed_at=taken_at, source="amdsmi")
            )

        snapshot = DeviceSnapshot(
            device_type=device_type,
            uuid=str(uuid) if uuid is not None else None,
            index=index,
            driver_version=_known(driver.get("driver_version")),
            mig=MigState(enabled=False),
            mps=MpsState(running=None),
            partition=DevicePartition(compute=_mode(partitions.compute, "SPX DPX TPX QPX CPX"),
                                      memory=_mode(partitions.memory, "NPS1 NPS2 NPS3 NPS4 NPS5 NPS6 NPS7 NPS8")),
            memory_total_bytes=int(total) if total is not None else None,
            memory_used_bytes=int(used) if used is not None else None,
            telemetry=Telemetry(utilization_gpu_pct=measured(gfx), dram_active_pct=measured(umc)),
            residents=tuple(residents),
            green_partitions_sms=(),
            taken_at=taken_at,
            source="rocm",
            unknown_reasons=unknown,
        )
        return snapshot, partitions
    finally:
        session.close()
