"""One regime parser and one MIG placement search for stage 1, admission and the simulator.

Placements are NVIDIA's (MIG User Guide, "A100 MIG profiles" and ``nvidia-smi mig -lgipp``): on an
A100 80GB the memory slices are 0..7; 1g.10gb may start at 0..6 (size 1), 2g.20gb at 0, 2, 4 (size
2), 3g.40gb at 0 or 4 (size 4), 4g.40gb and 7g.80gb only at 0 (sizes 4 and 8). Two instances never
share a memory slice.
"""

from __future__ import annotations

import pytest

from canary.catalog import lookup
from canary.errors import InputError
from canary.regime import Regime, free_mig_placement, parse_mig_instance, parse_regime
from canary.sim.device import SimDevice, SimPlacementError, simulable_regime
from canary.snapshot import DeviceSnapshot, MigInstance, MigState, MpsState, Resident

A100 = lookup("a100-80gb")


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("timeslice", Regime("timeslice"), id="timeslice"),
    pytest.param(" Streams ", Regime("streams"), id="kind-is-case-insensitive"),
    pytest.param("mps:1", Regime("mps", mps_pct=1), id="mps-lowest"),
    pytest.param("mps:100", Regime("mps", mps_pct=100), id="mps-highest"),
    pytest.param("MPS:50", Regime("mps", mps_pct=50), id="mps-upper-case"),
    pytest.param("mig:3g.40gb", Regime("mig", mig_profile="3g.40gb"), id="mig"),
    pytest.param("green:8", Regime("green", green_sms=8), id="green"),
])
def test_parse(text: str, expected: Regime) -> None:
    regime = parse_regime(text)
    assert regime == expected
    assert parse_regime(str(regime)) == regime  # str() is the canonical text


@pytest.mark.parametrize("text", [
    "bogus", "timeslice:3", "streams:1", "mps", "mps:", "mps:0", "mps:101", "mps:x", "mps:+50", "mps:5_0",
    "mps:-5", "mps:50.0", "green:0", "green:-8", "green:+8", "green:8.0", "mig:", "mig",
])
def test_bad_text_is_refused_by_stage_1_and_the_simulator_alike(text: str) -> None:
    """``+50`` and ``5_0`` were accepted by stage 1 (Python's int()) and refused by the simulator."""
    with pytest.raises(InputError) as err:
        parse_regime(text)
    assert err.value.field == "--regime"
    with pytest.raises(InputError) as sim_err:
        SimDevice(A100, seed=0, regime=text)
    assert sim_err.value.field == "regime"


@pytest.mark.parametrize("text", ["timeslice", "streams", "mps:25", "mig:3g.40gb", "green:8"])
def test_the_simulator_reads_the_same_regime(text: str) -> None:
    assert simulable_regime(text, A100) == parse_regime(text)
    assert SimDevice(A100, seed=0, regime=parse_regime(text)).regime == parse_regime(text)


def test_the_simulator_names_the_mig_profile_as_the_catalog_does() -> None:
    assert simulable_regime("mig:MIG 3g.40gb", A100) == Regime("mig", mig_profile="3g.40gb")
    assert simulable_regime("mig:9", A100) == Regime("mig", mig_profile="3g.40gb")  # lgip profile id 9


def _taken(*spans: tuple[str, int, int]) -> tuple[MigInstance, ...]:
    return tuple(MigInstance(profile=p, start=s, size=n) for p, s, n in spans)


@pytest.mark.parametrize(("profile", "taken", "start"), [
    pytest.param("3g.40gb", (), 0, id="empty-first-placement"),
    pytest.param("3g.40gb", (("3g.40gb", 0, 4),), 4, id="second-half"),
    pytest.param("3g.40gb", (("1g.10gb", 1, 1), ("1g.10gb", 5, 1)), None, id="fragmented-6-free-slices"),
    pytest.param("4g.40gb", (("3g.40gb", 4, 4),), 0, id="4g-at-0-beside-3g-at-4"),
    pytest.param("4g.40gb", (("1g.10gb", 3, 1),), None, id="4g-needs-slice-3"),
    pytest.param("2g.20gb", (("2g.20gb", 0, 2), ("2g.20gb", 2, 2), ("2g.20gb", 4, 2)), None,
                 id="2g-slices-6-7-free-but-no-start"),
    pytest.param("1g.10gb", tuple(("1g.10gb", s, 1) for s in range(6)), 6, id="1g-seventh-start"),
    pytest.param("1g.10gb", tuple(("1g.10gb", s, 1) for s in range(7)), None, id="1g-slice-7-is-no-start"),
    pytest.param("7g.80gb", (("1g.10gb", 6, 1),), None, id="7g-needs-all-eight"),
])
def test_free_placement(profile: str, taken: tuple[tuple[str, int, int], ...], start: int | None) -> None:
    spot = free_mig_placement(A100.mig_profile(profile), _taken(*taken))
    assert (spot.start if spot is not None else None) == start


def test_free_placement_at_a_given_start() -> None:
    three = A100.mig_profile("3g.40gb")
    assert free_mig_placement(three, _taken(("1g.10gb", 1, 1)), start=4) is not None
    assert free_mig_placement(three, _taken(("1g.10gb", 5, 1)), start=4) is None
    assert free_mig_placement(three, (), start=2) is None  # 3g.40gb never starts at 2


def test_the_simulator_places_instances_where_stage_1_finds_room() -> None:
    """Two 1g.10gb at 1 and 5: stage 1's search finds no 3g.40gb placement, and neither does the simulator."""
    snap_taken = _taken(("1g.10gb", 1, 1), ("1g.10gb", 5, 1))
    assert free_mig_placement(A100.mig_profile("3g.40gb"), snap_taken) is None
    snap = DeviceSnapshot(device_type="a100-80gb", compute_mode="DEFAULT",
                          mig=MigState(enabled=True, instances=snap_taken), mps=MpsState(running=False, clients=0),
                          memory_total_bytes=A100.memory_bytes, memory_used_bytes=0,
                          residents=(Resident(name="r1", observed_memory_bytes=1 << 30, mig_instance="1g.10gb@1"),
                                     Resident(name="r5", observed_memory_bytes=1 << 30, mig_instance="1g.10gb@5")))
    sim = SimDevice.from_snapshot(snap, A100, seed=0, regime="mig:3g.40gb")
    with pytest.raises(SimPlacementError, match="no free placement"):
        sim._mig_domain("3g.40gb", "candidate")


@pytest.mark.parametrize(("text", "expected"), [
    ("3g.40gb", ("3g.40gb", None)),
    ("3g.40gb@4", ("3g.40gb", 4)),
    (" 1g.10gb@0 ", ("1g.10gb", 0)),
])
def test_parse_mig_instance(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_mig_instance(text) == expected


@pytest.mark.parametrize("text", ["@4", "3g.40gb@", "3g.40gb@x", "3g.40gb@-1", "3g.40gb@+4"])
def test_bad_mig_instance(text: str) -> None:
    with pytest.raises(InputError):
        parse_mig_instance(text)
