"""Catalog lookup by canonical name, alias, NVML name and PCI id; unknown names get suggestions."""

from __future__ import annotations

import pytest

from canary.catalog import DeviceSpec, UnknownDevice, UnknownMigProfile, all_devices, lookup
from canary.errors import InputError
from tests.support import catalog_cache

REQUIRED = {
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "t4",
    "a100-40gb",
    "a100-80gb",
    "a10",
    "l4",
    "l40s",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "mi300x",
}


def test_required_devices_present() -> None:
    assert {spec.name for spec in all_devices()} >= REQUIRED


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("h100-sxm", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("h100 sxm5", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("nvidia h100 80gb hbm3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("MI300X", "mi300x"),
        ("0x2330", "h100-sxm"),
        ("0X2330", "h100-sxm"),
        (0x2330, "h100-sxm"),
        (0x233010DE, "h100-sxm"),  # NVML pciDeviceId: device << 16 | vendor
        ("0x233010de", "h100-sxm"),
        ("10de:2335", "h200"),
        ("0x2335", "h200"),
        ("0x20b2", "a100-80gb"),
        ("0x20b0", "a100-40gb"),
        ("0x2331", "h100-pcie"),
        ("0x2901", "b200"),
        ("0x27b8", "l4"),
        ("0x1eb8", "t4"),
        ("0x74a1", "mi300x"),
        ("1002:74a1", "mi300x"),
    ],
)
def test_lookup(query: str | int, name: str) -> None:
    assert lookup(query).name == name


def test_lookup_returns_the_same_object() -> None:
    assert lookup("H100") is lookup("0x2330")


@pytest.mark.parametrize(
    ("query", "suggestion"),
    [
        ("H10", "h100-sxm"),
        ("h200x", "h200"),
        ("l40", "l40s"),
        ("a100-08gb", "a100-80gb"),
    ],
)
def test_unknown_name_suggests_closest(query: str, suggestion: str) -> None:
    with pytest.raises(UnknownDevice) as info:
        lookup(query)
    assert suggestion in str(info.value).split("(catalog:")[0]
    assert isinstance(info.value, InputError)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("query", ["0x9999", 0x9999, "10de:74a1", "", "rtx-9090"])
def test_unknown_device(query: str | int) -> None:
    with pytest.raises(UnknownDevice):
        lookup(query)


def test_mig_profile_lookup_by_name_alias_and_id() -> None:
    spec = lookup("h100")
    assert spec.mig_profile("3g.40gb") is spec.mig_profile("MIG 3g.40gb") is spec.mig_profile(9)
    assert spec.mig_profile("9").sm_count == 60


def test_mig_profile_unknown_lists_valid_names() -> None:
    with pytest.raises(UnknownMigProfile) as info:
        lookup("h200").mig_profile("3g.40gb")
    assert "3g.71gb" in str(info.value)
    with pytest.raises(UnknownMigProfile, match="no MIG profiles"):
        lookup("l4").mig_profile("1g.10gb")


def test_device_spec_is_hashable_and_frozen() -> None:
    spec = lookup("h100")
    assert {spec: 1}[spec] == 1
    with pytest.raises(AttributeError):
        spec.sm_count = 1  # type: ignore[misc]
    assert isinstance(spec, DeviceSpec)


def test_value_methods_match_what_dataclass_generates() -> None:
    """The catalog classes share ``__eq__``/``__hash__``/``__repr__`` instead of having them generated;
    they must behave exactly as ``@dataclass(frozen=True)``'s own: compared with reference classes
    that dataclass builds from the same fields, on every catalog object."""
    import dataclasses

    from canary.catalog import CdnaSpec, MigPlacement, MigProfile

    references: dict[type, type] = {
        cls: dataclasses.make_dataclass(cls.__name__, [(f.name, f.type) for f in dataclasses.fields(cls)], frozen=True)
        for cls in (DeviceSpec, MigProfile, MigPlacement, CdnaSpec)
    }
    objects: list[object] = []
    for spec in all_devices():
        objects.append(spec)
        if spec.cdna is not None:
            objects.append(spec.cdna)
        for profile in spec.mig_profiles:
            objects.append(profile)
            objects.extend(profile.placements)
    assert {type(o) for o in objects} == set(references)
    for obj in objects:
        ref_cls = references[type(obj)]
        values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
        ref = ref_cls(**values)
        assert repr(obj) == repr(ref)
        assert hash(obj) == hash(ref)
        assert obj == dataclasses.replace(obj)  # type: ignore[type-var]
        assert obj.__eq__(ref) is NotImplemented and obj != ref
        first = dataclasses.fields(obj)[0].name  # type: ignore[arg-type]
        changed = dataclasses.replace(obj, **{first: "changed"})  # type: ignore[type-var]
        assert obj != changed and (obj == changed) == (ref == ref_cls(**{**values, first: "changed"}))


def test_catalog_cache_round_trips_and_survives_corruption(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The validated catalog is cached for fast starts; a corrupt cache is ignored and rewritten."""
    import canary.catalog as catalog

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    catalog.all_devices.cache_clear()
    first = catalog.all_devices()
    cached = list(tmp_path.glob("canary/catalog-*.json"))
    assert len(cached) == 1
    catalog.all_devices.cache_clear()
    assert catalog.all_devices() == first
    cached[0].write_bytes(b"not json {")
    catalog.all_devices.cache_clear()
    assert catalog.all_devices() == first
    assert cached[0].read_bytes() != b"not json {"
    catalog.all_devices.cache_clear()


@pytest.fixture
def fresh_catalog_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The catalog cache in ``tmp_path``, written by a first ``all_devices()``; lookups read it afresh."""
    import canary.catalog as catalog

    def clear() -> None:
        for cached in (catalog.all_devices, catalog._cached_table, catalog._validated_table):
            cached.cache_clear()

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CANARY_NO_CATALOG_CACHE", raising=False)
    clear()
    devices = catalog.all_devices()
    (cache,) = (tmp_path / "canary").glob("catalog-*.json")
    clear()
    yield devices, cache
    clear()


def _queries(spec: DeviceSpec) -> list[str | int]:
    queries: list[str | int] = [spec.name, spec.name.upper(), *spec.aliases, *spec.nvml_names]
    for device_id in spec.pci_device_ids:
        queries += [device_id, f"0x{device_id:04x}", f"{spec.pci_vendor_id:04x}:{device_id:04x}",
                    device_id << 16 | spec.pci_vendor_id]
    return queries


def test_lookup_from_the_cache_decodes_only_the_device_it_returns(fresh_catalog_cache, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``lookup`` reads the cached catalog's keys and decodes one device; every query answers as the
    index built from the validated catalog does."""
    import canary.catalog as catalog

    devices, _ = fresh_catalog_cache
    validated = catalog._build_index(devices, catalog.CATALOG_FILE)
    reference = catalog._validated_table()  # decodes the whole cache: before the count starts
    decoded: list[object] = []
    real_decode = catalog._decode

    def counting(value: object) -> object:
        if isinstance(value, dict) and value.get("$") == "DeviceSpec":
            decoded.append(value["f"]["name"])  # type: ignore[index]
        return real_decode(value)

    monkeypatch.setattr(catalog, "_decode", counting)
    assert lookup("h100") == devices[[d.name for d in devices].index("h100-sxm")]
    assert decoded == ["h100-sxm"]
    for spec in devices:
        for query in _queries(spec):
            found = lookup(query)
            assert found == validated.get(catalog._normalize(query) if isinstance(query, str) else "", found)
            assert found.name == catalog._find(reference, query).name
    assert sorted(decoded) == sorted(d.name for d in devices)  # each decoded once
    for bad in ("h1000", "nvidia-h", 0x9999, "0x10de:0x9999"):
        with pytest.raises(UnknownDevice) as from_cache:
            lookup(bad)
        with pytest.raises(UnknownDevice) as from_validated:
            catalog._find(reference, bad)
        assert str(from_cache.value) == str(from_validated.value)


@pytest.mark.parametrize("damage", ["field renamed", "nested class unknown", "class changed"])
def test_a_damaged_cache_entry_falls_back_to_the_packaged_catalog(fresh_catalog_cache, damage: str) -> None:  # type: ignore[no-untyped-def]

    devices, cache = fresh_catalog_cache
    data = catalog_cache.read(cache)
    entry = next(d for d in data if d["f"]["name"] == "h100-sxm")
    if damage == "field renamed":
        entry["f"]["sm_counts"] = entry["f"].pop("sm_count")
    elif damage == "nested class unknown":
        entry["f"]["mig_profiles"][0]["$"] = "NotACatalogClass"
    else:
        entry["$"] = "MigProfile"
    catalog_cache.write_signed(cache, data)  # past the checksum: the entry's own checks must catch it
    cache.chmod(0o600)
    expected = next(d for d in devices if d.name == "h100-sxm")
    assert lookup("h100") == expected
    assert lookup("a100-80gb") == next(d for d in devices if d.name == "a100-80gb")


def test_an_edited_cache_is_not_read(fresh_catalog_cache) -> None:  # type: ignore[no-untyped-def]
    """A value changed by hand (here aliases that are numbers: the classes the cache decodes into do not
    check types) no longer matches the checksum, so the packaged catalog answers."""
    import canary.catalog as catalog

    devices, cache = fresh_catalog_cache
    data = catalog_cache.read(cache)
    next(d for d in data if d["f"]["name"] == "h100-sxm")["f"]["aliases"] = [1, 2]
    catalog_cache.write_unsigned(cache, data)
    cache.chmod(0o600)
    assert catalog._read_cache(cache) is None
    assert lookup("h100") == next(d for d in devices if d.name == "h100-sxm")
    assert catalog.all_devices() == devices
