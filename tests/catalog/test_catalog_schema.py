"""A broken data file fails loudly, naming the file, the device and the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest
import yaml

from canary.catalog import load_catalog
from canary.errors import InputError

_TEXT = resources.files("canary.catalog").joinpath("devices.yaml").read_text(encoding="utf-8")
_DATA: dict[str, Any] = yaml.safe_load(_TEXT)


def _device(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(d for d in data["devices"] if d["name"] == name)


def _broken(mutate: Callable[[dict[str, Any]], None]) -> str:
    data = copy.deepcopy(_DATA)
    mutate(data)
    return yaml.safe_dump(data, sort_keys=False)


def test_packaged_catalog_loads() -> None:
    specs = load_catalog(_TEXT)
    assert len(specs) >= 13


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (
            lambda d: _device(d, "h100-sxm").update(sm_count=-1),
            "devices[h100-sxm].sm_count",
            "greater than 0",
        ),
        (lambda d: _device(d, "h100-sxm").update(sm_count="many"), "devices[h100-sxm].sm_count", "integer"),
        (lambda d: _device(d, "l4").pop("source"), "devices[l4].source", "required"),
        (lambda d: _device(d, "l4").update(tensor_cores=240), "devices[l4].tensor_cores", "not permitted"),
        (
            lambda d: _device(d, "t4").update(architecture="maxwell"),
            "devices[t4].architecture",
            "unknown architecture",
        ),
        (lambda d: _device(d, "a10")["sources"].update(sm_cuont="x"), "devices[a10].sources", "sm_cuont"),
        (
            lambda d: d["architectures"]["hopper"].update(warp_size=0),
            "architectures[hopper].warp_size",
            "greater than 0",
        ),
        (
            lambda d: _device(d, "l40s")["aliases"].append("h100"),
            "devices[h100-sxm]",
            "already claimed by l40s",
        ),
        (
            lambda d: _device(d, "a10").update(pci_device_ids=["2236"]),
            "devices[a10].pci_device_ids",
            "0x2330",
        ),
        (
            lambda d: _device(d, "h100-sxm")["mig_profiles"][4].update(placements="{0,4}:2"),
            "devices[h100-sxm].mig_profiles[3g.40gb].placements",
            "differs from memory_slices",
        ),
        (
            lambda d: _device(d, "h100-sxm")["mig_profiles"][4].update(placements="{0,6}:4"),
            "devices[h100-sxm].mig_profiles[3g.40gb].placements",
            "leaves the 8-slice axis",
        ),
        (
            lambda d: _device(d, "h100-sxm")["mig_profiles"][4].update(placements="0,4 size 4"),
            "devices[h100-sxm].mig_profiles[3g.40gb].placements",
            "-lgipp form",
        ),
        (
            lambda d: _device(d, "h200").pop("mig_memory_slices"),
            "devices[h200].mig_memory_slices",
            "needs mig_memory_slices",
        ),
        (
            lambda d: d["devices"].append(copy.deepcopy(_device(d, "t4"))),
            "devices[t4]",
            "duplicate device name",
        ),
        (
            lambda d: _device(d, "h100-sxm").update(max_blocks_per_sm=16),
            "devices[h100-sxm].max_blocks_per_sm",
            "needs its own citation",
        ),
    ],
)
def test_broken_catalog_names_device_and_field(
    mutate: Callable[[dict[str, Any]], None], field: str, problem: str
) -> None:
    with pytest.raises(InputError) as info:
        load_catalog(_broken(mutate), file="broken.yaml")
    assert info.value.file == "broken.yaml"
    assert info.value.field == field
    assert problem in info.value.problem


def test_invalid_yaml() -> None:
    with pytest.raises(InputError, match="not valid YAML"):
        load_catalog("devices: [\n", file="broken.yaml")


def test_a_device_override_with_citation_is_used() -> None:
    def mutate(d: dict[str, Any]) -> None:
        device = _device(d, "l4")
        device["max_threads_per_sm"] = 1024
        device["sources"]["max_threads_per_sm"] = "a test citation for the override"

    specs = {spec.name: spec for spec in load_catalog(_broken(mutate))}
    assert specs["l4"].max_threads_per_sm == 1024
    assert specs["l4"].source("max_threads_per_sm") == "a test citation for the override"
    assert specs["l40s"].max_threads_per_sm == 1536
