"""Every catalog number carries a citation, and the numbers agree with each other."""

from __future__ import annotations

import itertools

import pytest

from canary.catalog import DeviceSpec, MigPlacement, MigProfile, all_devices, lookup
from canary.catalog._spec import CDNA_FIELD_NAMES

DEVICES = all_devices()
IDS = [spec.name for spec in DEVICES]


@pytest.mark.parametrize("spec", DEVICES, ids=IDS)
def test_every_number_has_a_source(spec: DeviceSpec) -> None:
    for field in DeviceSpec.numeric_field_names():
        citation = spec.source(field)
        assert isinstance(citation, str) and len(citation) >= 8, (spec.name, field, citation)
        if getattr(spec, field) is None:
            # An absent number says why: unknown or not applicable, never silently empty.
            assert "unknown" in citation.lower() or "not applicable" in citation.lower(), (spec.name, field)
    if spec.cdna is not None:
        for field in CDNA_FIELD_NAMES:
            assert len(spec.source(f"cdna.{field}")) >= 8


@pytest.mark.parametrize(
    ("spec", "profile"),
    [(spec, profile) for spec in DEVICES for profile in spec.mig_profiles],
    ids=[f"{spec.name}:{profile.name}" for spec in DEVICES for profile in spec.mig_profiles],
)
def test_every_mig_number_has_a_source(spec: DeviceSpec, profile: MigProfile) -> None:
    for field in MigProfile.NUMERIC_FIELDS:
        citation = profile.source(field)
        assert len(citation) >= 8
        if getattr(profile, field) is None:
            assert "unknown" in citation.lower(), (spec.name, profile.name, field)


def test_unknown_source_field_is_an_error() -> None:
    with pytest.raises(Exception, match="no catalog field"):
        lookup("h100").source("tensor_cores")


# The 7-compute-slice / 8-memory-slice placement table (nvidia-smi mig -lgipp on A100/H100).
EXPECTED_PLACEMENTS = {
    19: ((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
    20: ((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
    15: ((0, 2), (2, 2), (4, 2), (6, 2)),
    14: ((0, 2), (2, 2), (4, 2)),
    9: ((0, 4), (4, 4)),
    5: ((0, 4),),
    0: ((0, 8),),
}


@pytest.mark.parametrize(
    "name", ["a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200", "b200"]
)
def test_mig_placements_on_seven_slice_parts(name: str) -> None:
    spec = lookup(name)
    assert spec.mig_memory_slices == 8
    assert {p.profile_id for p in spec.mig_profiles} == set(EXPECTED_PLACEMENTS)
    for profile in spec.mig_profiles:
        expected = tuple(MigPlacement(start, size) for start, size in EXPECTED_PLACEMENTS[profile.profile_id])
        assert profile.placements == expected, (name, profile.name)


@pytest.mark.parametrize(
    ("spec", "profile"),
    [(spec, profile) for spec in DEVICES for profile in spec.mig_profiles],
    ids=[f"{spec.name}:{profile.name}" for spec in DEVICES for profile in spec.mig_profiles],
)
def test_mig_profile_consistency(spec: DeviceSpec, profile: MigProfile) -> None:
    # max_instances instances must fit side by side in the listed placements.
    fits = any(
        all(not a.overlaps(b) for a, b in itertools.combinations(choice, 2))
        for choice in itertools.combinations(profile.placements, profile.max_instances)
    )
    assert fits
    assert 1 <= profile.compute_slices <= 7
    if profile.sm_count is not None:
        assert profile.sm_count <= spec.sm_count
    if profile.memory_bytes is not None:
        assert profile.memory_bytes <= spec.memory_bytes
        assert profile.memory_bytes >= spec.memory_bytes * profile.memory_slices // 8 * 0.8


def test_mig_sm_counts_grow_with_compute_slices() -> None:
    for spec in DEVICES:
        known = sorted(
            (p.compute_slices, p.sm_count)
            for p in spec.mig_profiles
            if p.sm_count is not None and "+me" not in p.name
        )
        counts = [sm for _, sm in known]
        assert counts == sorted(counts), spec.name


@pytest.mark.parametrize("spec", DEVICES, ids=IDS)
def test_architecture_numbers_are_consistent(spec: DeviceSpec) -> None:
    assert spec.max_threads_per_sm % spec.warp_size == 0
    assert spec.max_threads_per_block <= spec.max_threads_per_sm
    assert (
        spec.shared_memory_per_block_bytes
        <= spec.shared_memory_per_block_optin_bytes
        <= spec.shared_memory_per_sm_bytes
    )
    assert spec.registers_per_block <= spec.registers_per_sm
    if spec.vendor == "nvidia":
        assert spec.compute_capability is not None and spec.cdna is None
        assert spec.warp_size == 32
        assert spec.pci_vendor_id == 0x10DE
        if spec.compute_capability < (7, 0):
            # Pre-Volta (P100, K80): no shared-memory opt-in, no green contexts, 16 MPS clients.
            assert spec.shared_memory_per_block_optin_bytes == spec.shared_memory_per_block_bytes
            assert spec.green_min_partition_sms is None and spec.mps_max_clients == 16
            return
        # Devices report opt-in = shared memory per SM - the per-block reservation (gpu-facts §2).
        assert (
            spec.shared_memory_per_block_optin_bytes
            == spec.shared_memory_per_sm_bytes - spec.reserved_shared_memory_per_block_bytes
        )
        assert spec.reserved_shared_memory_per_block_bytes == (
            1024 if spec.compute_capability >= (8, 0) else 0
        )
        expected_granularity = 8 if spec.compute_capability >= (9, 0) else 2
        assert spec.green_min_partition_sms == expected_granularity
        assert spec.green_sm_alignment == expected_granularity
        assert spec.mps_max_clients == 48
    else:
        assert spec.compute_capability is None and spec.cdna is not None
        assert spec.warp_size == 64
        assert spec.pci_vendor_id == 0x1002
        assert spec.mps_max_clients is None and spec.green_min_partition_sms is None
    assert spec.has_mig == (spec.mig_memory_slices is not None)


@pytest.mark.parametrize(
    ("name", "cc", "sms", "memory_gib"),
    [
        ("v100-sxm2-16gb", (7, 0), 80, 16),
        ("t4", (7, 5), 40, 16),
        ("a100-40gb", (8, 0), 108, 40),
        ("a100-80gb", (8, 0), 108, 80),
        ("a10", (8, 6), 72, 24),
        ("l4", (8, 9), 58, 24),
        ("l40s", (8, 9), 142, 48),
        ("h100-sxm", (9, 0), 132, 80),
        ("h100-pcie", (9, 0), 114, 80),
        ("h200", (9, 0), 132, 141),
        ("b200", (10, 0), 148, 180),
        ("mi300x", None, 304, 192),
    ],
)
def test_headline_numbers(name: str, cc: tuple[int, int] | None, sms: int, memory_gib: int) -> None:
    spec = lookup(name)
    assert (spec.compute_capability, spec.sm_count, spec.memory_bytes) == (cc, sms, memory_gib << 30)


def test_mi300x_cdna_parameters() -> None:
    cdna = lookup("mi300x").cdna
    assert cdna is not None
    assert (cdna.max_waves_per_simd, cdna.vgprs_per_simd, cdna.vgpr_alloc_granule) == (8, 512, 8)
    assert (cdna.lds_per_cu_bytes, cdna.lds_alloc_granule_bytes, cdna.max_workgroup_barrier_slots) == (
        65536,
        512,
        16,
    )
