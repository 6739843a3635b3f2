"""The catalog's public value types: :class:`DeviceSpec`, :class:`MigProfile`, :class:`MigPlacement`.

They are frozen, slotted dataclasses (hashable, cheap to pass around); the YAML schema that feeds
them is validated separately in :mod:`canary.catalog._schema`. Every number a spec holds has a
citation, read with ``spec.source(field_name)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from canary._values import value_methods
from canary.errors import InputError

Vendor = Literal["nvidia", "amd"]


class UnknownDevice(InputError):
    """No catalog device matches the name, alias, NVML name or PCI id; the message suggests names."""


class UnknownMigProfile(InputError):
    """The device has no MIG profile of that name, alias or profile id; the message lists them."""


class UnknownCatalogField(InputError):
    """``source()`` was asked about a field the spec does not have."""


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MigPlacement:
    """Where a GPU instance may sit: ``start`` and ``size`` in memory-slice units (``-lgipp``)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        """One past the last memory slice the instance occupies."""
        return self.start + self.size

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.end and other.start < self.end


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class MigProfile:
    """One GPU-instance profile as ``nvidia-smi mig -lgip`` / ``-lgipp`` lists it.

    ``sm_count`` and ``memory_bytes`` are ``None`` where no trustworthy source gives them
    (unknown, never zero).
    """

    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    sm_count: int | None
    memory_bytes: int | None
    max_instances: int
    placements: tuple[MigPlacement, ...]
    citation: str
    field_citations: tuple[tuple[str, str], ...] = ()

    NUMERIC_FIELDS = (
        "profile_id",
        "compute_slices",
        "memory_slices",
        "sm_count",
        "memory_bytes",
        "max_instances",
        "placements",
    )

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other spellings accepted by :meth:`DeviceSpec.mig_profile`: ``MIG <name>``, the id."""
        return (f"MIG {self.name}", str(self.profile_id))

    def source(self, field_name: str) -> str:
        """Citation for one of this profile's numbers."""
        if field_name not in self.NUMERIC_FIELDS and field_name != "name":
            raise UnknownCatalogField(
                f"MIG profile {self.name} has no field {field_name!r}", field=field_name
            )
        for key, value in self.field_citations:
            if key == field_name:
                return value
        return self.citation


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class CdnaSpec:
    """AMD CDNA occupancy parameters (per CU / per SIMD), as LLVM's AMDGPU backend models them."""

    simds_per_cu: int
    max_waves_per_simd: int
    vgprs_per_simd: int
    vgpr_alloc_granule: int
    max_arch_vgprs: int
    max_vgprs_per_wave: int
    agpr_base_alignment: int
    sgprs_per_simd: int
    sgpr_alloc_granule: int
    max_sgprs_per_wave: int
    lds_per_cu_bytes: int
    lds_alloc_granule_bytes: int
    max_workgroup_size: int
    max_workgroup_barrier_slots: int


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DeviceSpec:
    """One GPU model. Numbers that are unknown are ``None`` (never zero); each has a citation.

    For AMD devices ``sm_count`` counts CUs, ``warp_size`` is the wave size (64),
    ``compute_capability`` is ``None`` and ``cdna`` holds the CU/SIMD occupancy parameters.
    """

    name: str
    vendor: Vendor
    architecture: str
    compute_capability: tuple[int, int] | None
    aliases: tuple[str, ...]
    nvml_names: tuple[str, ...]
    pci_vendor_id: int
    pci_device_ids: tuple[int, ...]
    sm_count: int
    registers_per_sm: int
    registers_per_block: int
    max_registers_per_thread: int
    shared_memory_per_sm_bytes: int
    shared_memory_per_block_bytes: int
    shared_memory_per_block_optin_bytes: int
    reserved_shared_memory_per_block_bytes: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    warp_size: int
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    mig_profiles: tuple[MigProfile, ...]
    mig_memory_slices: int | None
    mps_max_clients: int | None
    green_min_partition_sms: int | None
    green_sm_alignment: int | None
    driver_reserve_bytes: int | None
    cdna: CdnaSpec | None
    citations: tuple[tuple[str, str], ...]
    catalogued: bool = True
    """``False`` for a live device the catalog lacks (:func:`uncatalogued_spec`): its per-SM numbers
    are unknown and every consumer that needs them must answer *unknown* (occupancy raises)."""
    compute_partitions: tuple[tuple[str, int], ...] = ()
    """AMD compute partition modes and the logical devices each makes (``("CPX", 8)``); empty: none."""
    memory_partitions: tuple[tuple[str, int], ...] = ()
    """AMD memory partition (NPS) modes and the memory partitions each makes (``("NPS4", 4)``)."""

    def partitions_of(self, kind: str, mode: str) -> int | None:
        """How many parts compute (``kind="compute"``) or memory partition ``mode`` makes; ``None``
        when the device has no such mode."""
        table = self.compute_partitions if kind == "compute" else self.memory_partitions
        return next((parts for name, parts in table if name == mode.upper()), None)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def has_mig(self) -> bool:
        return bool(self.mig_profiles)

    def source(self, field_name: str) -> str:
        """Citation for the number in ``field_name`` (``cdna.<name>`` for CDNA parameters).

        A field whose value is ``None`` still has a citation saying why it is unknown or not
        applicable.
        """
        for key, value in self.citations:
            if key == field_name:
                return value
        raise UnknownCatalogField(f"device {self.name} has no catalog field {field_name!r}", field=field_name)

    def sources(self, field_names: tuple[str, ...] | list[str]) -> dict[str, str]:
        """Citations for several fields, keyed by field name."""
        return {name: self.source(name) for name in field_names}

    def mig_profile(self, name_or_alias: str | int) -> MigProfile:
        """The MIG profile named ``name_or_alias`` (``3g.40gb``, ``MIG 3g.40gb`` or the lgip id).

        Raises :class:`UnknownMigProfile` (an ``InputError``) listing the valid names when there
        is no such profile, including on devices without MIG.
        """
        wanted = str(name_or_alias).strip().lower()
        if wanted.startswith("mig "):
            wanted = wanted[4:].strip()
        for profile in self.mig_profiles:
            if wanted in (profile.name.lower(), str(profile.profile_id)):
                return profile
        if not self.mig_profiles:
            raise UnknownMigProfile(f"device {self.name} has no MIG profiles", field="mig_profile")
        import difflib  # only for the suggestion in this error

        valid = ", ".join(p.name for p in self.mig_profiles)
        close = difflib.get_close_matches(wanted, [p.name for p in self.mig_profiles], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UnknownMigProfile(
            f"device {self.name} has no MIG profile {name_or_alias!r}{hint}; valid: {valid}",
            field="mig_profile",
        )

    @classmethod
    def numeric_field_names(cls) -> tuple[str, ...]:
        """Fields of the spec that hold numbers (the ones that must carry a citation)."""
        skip = {
            "name",
            "vendor",
            "architecture",
            "aliases",
            "nvml_names",
            "mig_profiles",
            "cdna",
            "citations",
            "catalogued",
        }
        return tuple(f.name for f in fields(cls) if f.name not in skip)


CDNA_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(CdnaSpec))


def uncatalogued_spec(name: str, vendor: Vendor, *, memory_bytes: int | None = None) -> DeviceSpec:
    """A real device the catalog does not know (a fact about the world, not a typo).

    Only what the device itself reported is known: its name, vendor and, when given, its memory.
    The per-SM counts are not known; they are set to 0 with ``catalogued=False`` and a citation
    saying so, and every stage-1 check that needs them answers *unknown* instead of reading them
    (``canary.occupancy`` refuses such a spec)."""
    why = f"unknown: {name!r} is not in the catalog"
    numeric = DeviceSpec.numeric_field_names()
    citations = {field: why for field in numeric}
    if memory_bytes is not None:
        citations["memory_bytes"] = "observed: the device's own report (NVML/amdsmi memory total)"
    return DeviceSpec(
        name=name, vendor=vendor, architecture="unknown", compute_capability=None, aliases=(), nvml_names=(),
        pci_vendor_id=0x10DE if vendor == "nvidia" else 0x1002, pci_device_ids=(), sm_count=0, registers_per_sm=0,
        registers_per_block=0, max_registers_per_thread=0, shared_memory_per_sm_bytes=0,
        shared_memory_per_block_bytes=0, shared_memory_per_block_optin_bytes=0,
        reserved_shared_memory_per_block_bytes=0, max_threads_per_sm=0, max_threads_per_block=0,
        max_blocks_per_sm=0, warp_size=32 if vendor == "nvidia" else 64, memory_bytes=memory_bytes or 0,
        memory_bandwidth_bytes_per_s=0.0, mig_profiles=(), mig_memory_slices=None, mps_max_clients=None,
        green_min_partition_sms=None, green_sm_alignment=None, driver_reserve_bytes=None, cdna=None,
        citations=tuple(sorted(citations.items())), catalogued=False,
    )
