"""Live or simulated device → ``DeviceSnapshot``.

``resolve_device(ref)`` understands the CLI's DEVICE argument:

- a catalog name (``h100-sxm``, ``H200``, an NVML name, a PCI id): an idle simulated device;
- a snapshot file (``.yaml``/``.yml``/``.json``): a simulated device with the residents it lists;
- ``nvml:N``, ``cuda:N``, ``rocm:N``: a live device, read through that vendor library.

``agent:NODE/NAME`` (a device a node agent publishes) is not resolved here: only the service's store
holds what agents publish, so ``canary fit/admit`` pass it to the service (``--server URL`` or
``$CANARY_SERVER``); without one it is bad input that says so.

Vendor libraries are imported only when a live device is asked for.
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.errors import InputError
from canary.snapshot import DeviceSnapshot, MigState, MpsState, load_snapshot, validate_snapshot

_LIVE = re.compile(r"^(nvml|cuda|rocm):(\d+)$")
#: A device a node agent publishes to the service: ``agent:NODE/NAME`` (``canary.serve.client.AGENT_PREFIX``).
AGENT_PREFIX = "agent:"
_SNAPSHOT_SUFFIXES = (".yaml", ".yml", ".json")

if TYPE_CHECKING:  # the catalog is imported lazily below to keep start-up light
    from canary.catalog import DeviceSpec, Vendor


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class ResolvedDevice:
    snapshot: DeviceSnapshot
    spec: DeviceSpec
    ref: str
    kind: str  # "catalog", "file", "nvml", "cuda", "rocm"


SIMULATOR_DRIVER = "simulator-1"
"""The driver version simulated devices report by default: evidence recorded on the simulator is
keyed to it, so it never counts for a real driver (and goes stale when the simulator's model changes)."""

SIM_DRIVER_ENV = "CANARY_SIM_DRIVER"
"""Environment variable: the driver version every simulated device reports (``canary --sim-driver``)."""

_sim_driver: ContextVar[str | None] = ContextVar("canary_sim_driver", default=None)


#: A driver version as drivers and the simulator write it (580.95.05, 6.2.4, simulator-1): a letter or
#: digit, then letters, digits and ``. _ + ~ -``, at most 64 characters. No spaces, no punctuation that a
#: shell or a terminal would read.
_DRIVER_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}")


def check_sim_driver(value: str, *, field: str) -> str:
    """A driver version (``_DRIVER_VERSION``), surrounding whitespace stripped."""
    text = value.strip()
    if not _DRIVER_VERSION.fullmatch(text):
        raise InputError(f"{value!r} is not a driver version (e.g. 590.10.02: letters, digits and . _ + ~ -, "
                         "at most 64 characters)", field=field)
    return text


def set_sim_driver(value: str | None) -> object:
    """Make every simulated device report driver ``value`` (``None``: the environment's or the default)
    in this context; returns a token for ``reset_sim_driver``."""
    return _sim_driver.set(None if value is None else check_sim_driver(value, field="--sim-driver"))


def reset_sim_driver(token: object) -> None:
    _sim_driver.reset(token)  # type: ignore[arg-type]


def sim_driver_override() -> str | None:
    """The driver simulated devices are told to report (``--sim-driver``, else ``$CANARY_SIM_DRIVER``),
    or ``None`` when neither is set."""
    chosen = _sim_driver.get()
    if chosen is not None:
        return chosen
    env = os.environ.get(SIM_DRIVER_ENV)
    return None if env is None else check_sim_driver(env, field=SIM_DRIVER_ENV)


def simulated_driver() -> str:
    """The driver version an idle simulated (catalog) device reports."""
    return sim_driver_override() or SIMULATOR_DRIVER


def idle_snapshot(spec: DeviceSpec) -> DeviceSnapshot:
    """An idle simulated device of this model: nothing resident, default compute mode, MIG off; its
    driver is ``simulated_driver()``."""
    return DeviceSnapshot(
        device_type=spec.name,
        driver_version=simulated_driver(),
        compute_mode="DEFAULT",
        mig=MigState(enabled=False),
        mps=MpsState(running=False, clients=0),
        memory_total_bytes=spec.memory_bytes,
        memory_used_bytes=0,
        memory_reserved_bytes=spec.driver_reserve_bytes,
        green_partitions_sms=(),
        source="simulated",
    )


_LIVE_SOURCES = ("nvml", "cuda", "rocm", "dcgm-exporter")


def observed_spec(snapshot: DeviceSnapshot, vendor: Vendor) -> DeviceSpec:
    """The catalog spec of a device read from the world, or, when the catalog lacks its model, an
    uncatalogued spec that knows only what the device reported (stage 1 answers *unknown* for what
    needs catalog numbers and still decides HBM from the device's own counts)."""
    from canary.catalog import UnknownDevice, lookup
    from canary.catalog._spec import uncatalogued_spec

    try:
        return lookup(snapshot.device_type)
    except UnknownDevice:
        return uncatalogued_spec(snapshot.device_type, vendor, memory_bytes=snapshot.memory_total_bytes)


def resolve_device(ref: str) -> ResolvedDevice:
    from canary.catalog import lookup

    live = _LIVE.match(ref)
    if live:
        kind, index = live.group(1), int(live.group(2))
        if kind == "nvml":
            from canary.backends import nvml

            snap = nvml.read_snapshot(index)
        elif kind == "cuda":
            from canary.backends import cuda

            snap = cuda.read_snapshot(index)
        else:
            from canary.backends import rocm

            snap = rocm.read_snapshot(index)
        vendor: Vendor = "amd" if kind == "rocm" else "nvidia"
        return ResolvedDevice(snapshot=snap, spec=observed_spec(snap, vendor), ref=ref, kind=kind)
    path = Path(ref)
    if path.suffix.lower() in _SNAPSHOT_SUFFIXES or path.is_file():
        snap = load_snapshot(path)
        if snap.source in _LIVE_SOURCES:
            # Read from a real device: a model the catalog lacks is a fact, not a typo.
            spec = observed_spec(snap, "amd" if snap.source == "rocm" else "nvidia")
        else:
            try:
                spec = lookup(snap.device_type)
            except InputError as exc:
                raise InputError(exc.problem, file=ref, field="device_type") from None
        validate_snapshot(snap, spec, file=ref)
        # A snapshot of a device the catalog lacks cannot be simulated: it is treated as the live
        # device it was read from (stage 1 and real executors only).
        kind = "file" if spec.catalogued else snap.source
        driver = sim_driver_override() if kind == "file" else None
        if driver is not None and driver != snap.driver_version:  # rehearsing another driver on the simulator
            snap = snap.model_copy(update={"driver_version": driver})
        return ResolvedDevice(snapshot=snap, spec=spec, ref=ref, kind=kind)
    if ref.startswith(AGENT_PREFIX):
        raise InputError(
            f"'{ref}' names a device a node agent publishes to the canary service, and only the service "
            "holds what agents publish: canary fit and canary admit reach it with --server URL (or $CANARY_SERVER)",
            field="DEVICE",
        )
    if ":" in ref:
        raise InputError(
            f"unknown device '{ref}': use a catalog name (h100-sxm), a snapshot file, or nvml:N / cuda:N / rocm:N",
            field="DEVICE",
        )
    if ("/" in ref or ref.startswith(".")) and path.exists():
        # A path to something that is not a regular file (a directory, /dev/zero, a FIFO): say so, not
        # "unknown device" — and never open it.
        what = "a directory" if path.is_dir() else "not a regular file"
        raise InputError(f"'{ref}' is {what}: DEVICE takes a snapshot file, a catalog name (h100-sxm) or "
                         "nvml:N / cuda:N / rocm:N", field="DEVICE")
    spec = lookup(ref)
    return ResolvedDevice(snapshot=idle_snapshot(spec), spec=spec, ref=ref, kind="catalog")
