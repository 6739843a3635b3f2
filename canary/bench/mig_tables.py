"""NVIDIA's MIG GPU-instance tables, transcribed here independently of canary's catalog, and the
placement rule the driver applies — the ground truth of ``canary bench``'s ``hard-mig`` family.

Stage 1 reads MIG profiles from ``canary/catalog/devices.yaml`` through ``canary.catalog`` and decides
with ``canary.hardfit``; a truth computed through the same catalog and code would only show that the
code agrees with itself. This module shares neither: its numbers are typed in from the sources below
and its rule is written from the MIG user guide's wording, not from ``canary.hardfit``.
``tests/bench/test_mig_tables.py`` checks that the catalog agrees with this table, profile by profile.

Sources (NVIDIA):

- *NVIDIA Multi-Instance GPU User Guide*, "Supported MIG Profiles"
  (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): per product, each GPU
  instance profile's fraction of memory (in eighths: the memory slices) and "Number of Instances
  Available". For A100-80GB the guide says the names follow the memory (1g.10gb, 1g.20gb, 2g.20gb,
  3g.40gb, 4g.40gb, 7g.80gb); H100 80GB and H200 141GB have their own tables with the same fractions.
- the same guide, "Getting Started with MIG" → "List GPU Instance Profiles": the
  ``nvidia-smi mig -lgipp`` listing of *possible placements* ``{starts}:size`` in memory slices
  (A100: 1g ``{0..6}:1``, 1g double-memory ``{0,2,4,6}:2``, 2g ``{0,2,4}:2``, 3g ``{0,4}:4``, 4g
  ``{0}:4``, 7g ``{0}:8``); the guide's placement diagrams show the same eight-slice layout for
  GA100 and GH100 products.
- cross-checked against NVIDIA's own NVML mock of a DGX A100 (NVIDIA/go-nvml,
  ``pkg/nvml/mock/dgxa100/dgxa100.go``, ``MIGPlacements.GpuInstancePossiblePlacements``): identical
  starts and sizes for every profile.

The rule (user guide, "Concepts" → "Partitioning" and the NVML placement API): a new GPU instance of
profile P is created in one of P's possible placements whose memory slices do not overlap any
existing instance, and no more than P's "Number of Instances Available" may exist at once. The
``+me`` profile shares the memory layout of its ``1g`` profile; only one instance may carry the media
extensions.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class GiProfile:
    """One GPU instance profile as the guide lists it."""

    name: str
    memory_slices: int  # eighths of the memory ("Fraction of Memory")
    instances_available: int  # "Number of Instances Available"
    starts: tuple[int, ...]  # nvidia-smi mig -lgipp: possible placements {starts}:memory_slices


def _layout(one: str, one_me: str, one_double: str, two: str, three: str, four: str, seven: str) -> tuple[GiProfile, ...]:
    """The eight-slice GA100/GH100 layout under one product's profile names."""
    return (
        GiProfile(one, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        GiProfile(one_me, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        GiProfile(one_double, 2, 4, (0, 2, 4, 6)),
        GiProfile(two, 2, 3, (0, 2, 4)),
        GiProfile(three, 4, 2, (0, 4)),
        GiProfile(four, 4, 1, (0,)),
        GiProfile(seven, 8, 1, (0,)),
    )


#: Product → its GPU instance profiles (catalog device names as keys, for the consistency test).
TABLES: dict[str, tuple[GiProfile, ...]] = {
    "a100-40gb": _layout("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "a100-80gb": _layout("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "h100-sxm": _layout("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "h200": _layout("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}


def table_for(device: str) -> dict[str, GiProfile]:
    """The profiles of ``device`` by name (``KeyError`` naming the device when not transcribed)."""
    try:
        return {p.name: p for p in TABLES[device]}
    except KeyError:
        raise KeyError(f"no transcribed MIG table for {device!r} (have: {', '.join(sorted(TABLES))})") from None


def creation_blocker(device: str, profile: str, existing: list[tuple[str, int]]) -> tuple[str, str] | None:
    """Why a new ``profile`` instance cannot be created next to ``existing`` ((profile, start) pairs), as
    (resource, detail), or ``None`` when the driver would create it.

    The reasons, in the order a user would fix them: too few memory slices left in total
    (``mig_slices``), the profile's instance limit reached (``mig_instances``), slices enough but none
    of the profile's placements free (``mig_placement``)."""
    table = table_for(device)
    if profile not in table:
        raise KeyError(f"{device}: profile {profile!r} is not in the transcribed table")
    wanted = table[profile]
    taken: set[int] = set()
    for name, start in existing:
        other = table.get(name)
        if other is None:
            raise KeyError(f"{device}: existing instance profile {name!r} is not in the transcribed table")
        if start not in other.starts:
            raise ValueError(f"{device}: an existing {name} instance at slice {start} is not one of its placements {other.starts}")
        span = set(range(start, start + other.memory_slices))
        if span & taken:
            raise ValueError(f"{device}: existing instances overlap at slices {sorted(span & taken)}")
        taken |= span
    free = MEMORY_SLICES - len(taken)
    if free < wanted.memory_slices:
        return "mig_slices", f"{free} memory slices free, {wanted.memory_slices} needed"
    same = sum(1 for name, _ in existing if name == profile)
    if same >= wanted.instances_available:
        return "mig_instances", f"{same} {profile} instance(s) exist, at most {wanted.instances_available} allowed"
    for start in wanted.starts:
        if not set(range(start, start + wanted.memory_slices)) & taken:
            return None
    return "mig_placement", f"no {profile} placement is free (slices taken: {sorted(taken)})"
