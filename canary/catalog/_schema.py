"""The schema of ``devices.yaml`` and its translation into :class:`DeviceSpec` values.

Everything here is strict (``extra="forbid"``): a misspelt key, a missing citation, a placement
that leaves the memory-slice axis or a lookup key claimed by two devices fails at load time with
an :class:`~canary.errors.InputError` naming the file, the device and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, ValidationError

from canary.catalog._spec import CDNA_FIELD_NAMES, CdnaSpec, DeviceSpec, MigPlacement, MigProfile
from canary.errors import InputError

_GIB = 1 << 30
_PCI_VENDOR_CITATIONS = {
    "nvidia": (0x10DE, "[pci.ids] 10de NVIDIA Corporation"),
    "amd": (0x1002, "[pci.ids] 1002 Advanced Micro Devices, Inc. [AMD/ATI]"),
}
_PLACEMENT_RE = re.compile(r"^\{\s*(\d+(?:\s*,\s*\d+)*)\s*\}\s*:\s*(\d+)$")
_PCI_ID_RE = re.compile(r"^0x[0-9a-f]{4}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _CdnaRaw(_Strict):
    simds_per_cu: PositiveInt
    max_waves_per_simd: PositiveInt
    vgprs_per_simd: PositiveInt
    vgpr_alloc_granule: PositiveInt
    max_arch_vgprs: PositiveInt
    max_vgprs_per_wave: PositiveInt
    agpr_base_alignment: PositiveInt
    sgprs_per_simd: PositiveInt
    sgpr_alloc_granule: PositiveInt
    max_sgprs_per_wave: PositiveInt
    lds_per_cu_bytes: PositiveInt
    lds_alloc_granule_bytes: PositiveInt
    max_workgroup_size: PositiveInt
    max_workgroup_barrier_slots: PositiveInt


# Fields an architecture defines and a device may override.
_ARCH_NUMBERS = (
    "registers_per_sm",
    "registers_per_block",
    "max_registers_per_thread",
    "shared_memory_per_sm_bytes",
    "shared_memory_per_block_bytes",
    "shared_memory_per_block_optin_bytes",
    "reserved_shared_memory_per_block_bytes",
    "max_threads_per_sm",
    "max_threads_per_block",
    "max_blocks_per_sm",
    "warp_size",
    "mps_max_clients",
    "green_min_partition_sms",
    "green_sm_alignment",
    "compute_capability",
)


class _ArchRaw(_Strict):
    family: str = Field(min_length=1)
    vendor: Literal["nvidia", "amd"]
    compute_capability: tuple[NonNegativeInt, NonNegativeInt] | None
    registers_per_sm: PositiveInt
    registers_per_block: PositiveInt
    max_registers_per_thread: PositiveInt
    shared_memory_per_sm_bytes: PositiveInt
    shared_memory_per_block_bytes: PositiveInt
    shared_memory_per_block_optin_bytes: PositiveInt
    reserved_shared_memory_per_block_bytes: NonNegativeInt
    max_threads_per_sm: PositiveInt
    max_threads_per_block: PositiveInt
    max_blocks_per_sm: PositiveInt
    warp_size: PositiveInt
    mps_max_clients: PositiveInt | None
    green_min_partition_sms: PositiveInt | None
    green_sm_alignment: PositiveInt | None
    cdna: _CdnaRaw | None = None
    source: str = Field(min_length=1)
    sources: dict[str, str] = Field(default_factory=dict)


class _MigRaw(_Strict):
    name: str = Field(min_length=1)
    profile_id: NonNegativeInt
    compute_slices: PositiveInt
    memory_slices: PositiveInt
    sm_count: PositiveInt | None
    memory_gib: PositiveFloat | None
    max_instances: PositiveInt
    placements: str
    source: str = Field(min_length=1)
    sources: dict[str, str] = Field(default_factory=dict)


class _DeviceRaw(_Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    architecture: str
    aliases: list[str] = Field(default_factory=list)
    nvml_names: list[str] = Field(default_factory=list)
    pci_vendor_id: str | None = None
    pci_device_ids: list[str] = Field(default_factory=list)
    sm_count: PositiveInt
    memory_bytes: PositiveInt
    memory_bandwidth_bytes_per_s: PositiveFloat
    driver_reserve_bytes: NonNegativeInt | None
    mig_memory_slices: PositiveInt | None = None
    mig_profiles: list[_MigRaw] = Field(default_factory=list)
    # AMD's MIG analogue: compute partition modes (SPX/DPX/QPX/CPX → logical devices) and memory
    # partition modes (NPS1/NPS4 → memory partitions), each with the number of parts it makes.
    compute_partitions: dict[str, PositiveInt] = Field(default_factory=dict)
    memory_partitions: dict[str, PositiveInt] = Field(default_factory=dict)
    # Per-device overrides of architecture numbers (rare; each needs a citation in `sources`).
    registers_per_sm: PositiveInt | None = None
    registers_per_block: PositiveInt | None = None
    max_registers_per_thread: PositiveInt | None = None
    shared_memory_per_sm_bytes: PositiveInt | None = None
    shared_memory_per_block_bytes: PositiveInt | None = None
    shared_memory_per_block_optin_bytes: PositiveInt | None = None
    reserved_shared_memory_per_block_bytes: NonNegativeInt | None = None
    max_threads_per_sm: PositiveInt | None = None
    max_threads_per_block: PositiveInt | None = None
    max_blocks_per_sm: PositiveInt | None = None
    warp_size: PositiveInt | None = None
    source: str = Field(min_length=1)
    sources: dict[str, str] = Field(default_factory=dict)


class _CatalogRaw(_Strict):
    schema_version: Literal[1]
    architectures: dict[str, _ArchRaw]
    devices: list[_DeviceRaw] = Field(min_length=1)


def _fail(file: str, where: str, problem: str) -> InputError:
    return InputError(problem, file=file, field=where)


def _parse_placements(text: str, file: str, where: str) -> tuple[MigPlacement, ...]:
    match = _PLACEMENT_RE.match(text.strip())
    if match is None:
        raise _fail(file, where, f"placements {text!r} are not in -lgipp form '{{0,2,4}}:2'")
    size = int(match.group(2))
    starts = [int(s) for s in match.group(1).split(",")]
    if starts != sorted(set(starts)):
        raise _fail(file, where, f"placement starts {starts} must be strictly increasing")
    return tuple(MigPlacement(start=s, size=size) for s in starts)


def _parse_pci_id(text: str, file: str, where: str) -> int:
    lowered = text.strip().lower()
    if not _PCI_ID_RE.match(lowered):
        raise _fail(file, where, f"PCI id {text!r} must look like 0x2330")
    return int(lowered, 16)


def _build_mig(raw: _MigRaw, memory_slices_total: int, file: str, where: str) -> MigProfile:
    placements = _parse_placements(raw.placements, file, f"{where}.placements")
    for placement in placements:
        if placement.size != raw.memory_slices:
            raise _fail(
                file,
                f"{where}.placements",
                f"placement size {placement.size} differs from memory_slices {raw.memory_slices}",
            )
        if placement.end > memory_slices_total:
            raise _fail(
                file,
                f"{where}.placements",
                f"placement {placement.start}:{placement.size} leaves the {memory_slices_total}-slice axis",
            )
    allowed = set(MigProfile.NUMERIC_FIELDS) | {"memory_gib"}
    unknown = set(raw.sources) - allowed
    if unknown:
        raise _fail(file, f"{where}.sources", f"citations for unknown fields: {sorted(unknown)}")
    citations = tuple(
        ("memory_bytes" if key == "memory_gib" else key, value) for key, value in sorted(raw.sources.items())
    )
    memory_bytes = None if raw.memory_gib is None else round(raw.memory_gib * _GIB)
    return MigProfile(
        name=raw.name,
        profile_id=raw.profile_id,
        compute_slices=raw.compute_slices,
        memory_slices=raw.memory_slices,
        sm_count=raw.sm_count,
        memory_bytes=memory_bytes,
        max_instances=raw.max_instances,
        placements=placements,
        citation=raw.source,
        field_citations=citations,
    )


def _build_device(raw: _DeviceRaw, arch_key: str, arch: _ArchRaw, file: str) -> DeviceSpec:
    where = f"devices[{raw.name}]"
    device_numbers = (
        "sm_count",
        "memory_bytes",
        "memory_bandwidth_bytes_per_s",
        "driver_reserve_bytes",
        "mig_memory_slices",
        "pci_device_ids",
        "pci_vendor_id",
        "mig_profiles",
        "nvml_names",
        "compute_partitions",
        "memory_partitions",
    )
    known = set(device_numbers) | set(_ARCH_NUMBERS) | {f"cdna.{n}" for n in CDNA_FIELD_NAMES}
    for origin, mapping in (("architecture", arch.sources), ("device", raw.sources)):
        unknown = set(mapping) - known
        if unknown:
            prefix = f"architectures[{arch_key}]" if origin == "architecture" else where
            raise _fail(file, f"{prefix}.sources", f"citations for unknown fields: {sorted(unknown)}")

    values: dict[str, Any] = {}
    citations: dict[str, str] = {}
    for name in _ARCH_NUMBERS:
        override = getattr(raw, name, None) if name != "compute_capability" else None
        if override is not None:
            if name not in raw.sources:
                raise _fail(
                    file,
                    f"{where}.{name}",
                    "a device override of an architecture number needs its own citation",
                )
            values[name] = override
            citations[name] = raw.sources[name]
        else:
            values[name] = getattr(arch, name)
            citations[name] = arch.sources.get(name, arch.source)
    for name in device_numbers:
        citations[name] = raw.sources.get(name, raw.source)

    vendor_id, vendor_citation = _PCI_VENDOR_CITATIONS[arch.vendor]
    if raw.pci_vendor_id is not None:
        vendor_id = _parse_pci_id(raw.pci_vendor_id, file, f"{where}.pci_vendor_id")
    else:
        citations["pci_vendor_id"] = vendor_citation
    pci_ids = tuple(_parse_pci_id(text, file, f"{where}.pci_device_ids") for text in raw.pci_device_ids)

    cdna: CdnaSpec | None = None
    if arch.vendor == "amd":
        if arch.cdna is None:
            raise _fail(
                file, f"architectures[{arch_key}].cdna", "an AMD architecture needs its CDNA parameters"
            )
        cdna = CdnaSpec(**arch.cdna.model_dump())
        for name in CDNA_FIELD_NAMES:
            key = f"cdna.{name}"
            citations[key] = arch.sources.get(key, arch.source)
        if arch.compute_capability is not None:
            raise _fail(
                file,
                f"architectures[{arch_key}].compute_capability",
                "AMD devices have no compute capability",
            )
    elif arch.compute_capability is None:
        raise _fail(file, f"architectures[{arch_key}].compute_capability", "NVIDIA architectures need one")

    if raw.mig_profiles and raw.mig_memory_slices is None:
        raise _fail(file, f"{where}.mig_memory_slices", "a device with MIG profiles needs mig_memory_slices")
    if raw.mig_memory_slices is not None and not raw.mig_profiles:
        raise _fail(file, f"{where}.mig_profiles", "mig_memory_slices is set but no profiles are listed")
    profiles = tuple(
        _build_mig(p, raw.mig_memory_slices or 0, file, f"{where}.mig_profiles[{p.name}]")
        for p in raw.mig_profiles
    )
    seen_profiles: set[str] = set()
    for profile in profiles:
        for key in (profile.name.lower(), str(profile.profile_id)):
            if key in seen_profiles:
                raise _fail(
                    file, f"{where}.mig_profiles[{profile.name}]", f"duplicate profile name or id {key!r}"
                )
            seen_profiles.add(key)

    for mode, parts in raw.compute_partitions.items():
        if raw.sm_count % parts:
            raise _fail(file, f"{where}.compute_partitions.{mode}",
                        f"{raw.sm_count} compute units do not split into {parts} equal partitions")
    for mode, parts in raw.memory_partitions.items():
        if raw.memory_bytes % parts:
            raise _fail(file, f"{where}.memory_partitions.{mode}",
                        f"{raw.memory_bytes} bytes do not split into {parts} equal partitions")
    compute_capability = values.pop("compute_capability")
    return DeviceSpec(
        name=raw.name,
        vendor=arch.vendor,
        architecture=arch.family,
        compute_capability=None
        if compute_capability is None
        else (compute_capability[0], compute_capability[1]),
        aliases=tuple(raw.aliases),
        nvml_names=tuple(raw.nvml_names),
        pci_vendor_id=vendor_id,
        pci_device_ids=pci_ids,
        sm_count=raw.sm_count,
        memory_bytes=raw.memory_bytes,
        memory_bandwidth_bytes_per_s=float(raw.memory_bandwidth_bytes_per_s),
        mig_profiles=profiles,
        mig_memory_slices=raw.mig_memory_slices,
        driver_reserve_bytes=raw.driver_reserve_bytes,
        compute_partitions=tuple((mode.upper(), parts) for mode, parts in raw.compute_partitions.items()),
        memory_partitions=tuple((mode.upper(), parts) for mode, parts in raw.memory_partitions.items()),
        cdna=cdna,
        citations=tuple(sorted(citations.items())),
        **values,
    )


def _location(error: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """Turn a pydantic error location into ``devices[h100-sxm].sm_count`` form."""
    loc = list(error.get("loc", ()))
    parts: list[str] = []
    if len(loc) >= 2 and loc[0] == "devices" and isinstance(loc[1], int):
        devices = data.get("devices") or []
        name = (
            devices[loc[1]].get("name")
            if loc[1] < len(devices) and isinstance(devices[loc[1]], Mapping)
            else None
        )
        parts.append(f"devices[{name or loc[1]}]")
        loc = loc[2:]
    elif len(loc) >= 2 and loc[0] == "architectures":
        parts.append(f"architectures[{loc[1]}]")
        loc = loc[2:]
    parts.extend(str(item) for item in loc)
    return ".".join(parts) or "<root>"


def build_catalog(data: Any, file: str) -> tuple[DeviceSpec, ...]:
    """Validate the parsed YAML document and return the device specs in file order."""
    if not isinstance(data, Mapping):
        raise InputError("the catalog must be a YAML mapping", file=file)
    try:
        catalog = _CatalogRaw.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(first["msg"], file=file, field=_location(first, data)) from exc
    specs: list[DeviceSpec] = []
    names: set[str] = set()
    for raw in catalog.devices:
        if raw.name in names:
            raise _fail(file, f"devices[{raw.name}]", "duplicate device name")
        names.add(raw.name)
        arch = catalog.architectures.get(raw.architecture)
        if arch is None:
            raise _fail(
                file,
                f"devices[{raw.name}].architecture",
                f"unknown architecture {raw.architecture!r}; known: {sorted(catalog.architectures)}",
            )
        specs.append(_build_device(raw, raw.architecture, arch, file))
    return tuple(specs)
