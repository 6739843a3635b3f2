"""Booking MIG GPU instances: each booking holds its placement on the physical device, an overlapping
one is refused (a reject, exit 1), and ``mig_bookings`` lists exactly the physical device's instances.

Slices from the H200/H100 8-slice tables (``nvidia-smi mig -lgipp``): 1g = 1 slice, 2g = 2, 3g = 4.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from evidence_store.database import make_engine, session_scope
from evidence_store.errors import ReservationConflict
from evidence_store.reservations import (
    active_reservations,
    mig_bookings,
    mig_instance_device,
    release,
    reserve,
    reserve_mig_instance,
)
from evidence_store.schemas import ReservationOut
from tests.evidence_store.evidence_store_testkit import FAST_RETRY, T0

GIB = 2**30
SLICES = {"1g.18gb": 1, "2g.35gb": 2, "3g.71gb": 4}
DEVICE = "GPU-77c1d2e3"


def _book(engine: Engine, profile: str, start: int, *, device: str = DEVICE, holder: str = "a@1",
          now_s: float = 0, lease_s: float = 600.0) -> ReservationOut:
    with session_scope(engine) as session:
        return reserve_mig_instance(
            session, device_id=device, holder=holder, profile=profile, start=start, size=SLICES[profile],
            profile_slices=SLICES, memory_bytes=6 * GIB, capacity_memory_bytes=15 * GIB, lease_s=lease_s,
            now=T0 + timedelta(seconds=now_s))


def _held(engine: Engine, device: str = DEVICE, now_s: float = 1) -> list[str]:
    with session_scope(engine, read_only=True) as session:
        return [b.mig_instance or "" for b in mig_bookings(session, device, T0 + timedelta(seconds=now_s))]


def test_each_booking_takes_its_own_placement_and_an_overlap_is_a_reject(engine: Engine) -> None:
    first = _book(engine, "1g.18gb", 4)
    assert first.device_id == mig_instance_device(DEVICE, "1g.18gb@4") == f"{DEVICE}/mig:1g.18gb@4"
    assert first.mig_instance == "1g.18gb@4" and first.memory_bytes == 6 * GIB
    _book(engine, "1g.18gb", 5, holder="b@1")
    for profile, start, overlaps in (("1g.18gb", 4, "1g.18gb@4"), ("2g.35gb", 4, "1g.18gb@4"),
                                     ("3g.71gb", 4, "1g.18gb@4")):
        with pytest.raises(ReservationConflict) as info:
            _book(engine, profile, start, holder="c@1")
        assert info.value.exit_code == 1 and info.value.resource == "mig"
        message = str(info.value)
        assert f"{overlaps} (held by a@1)" in message, message
        assert "1g.18gb@4, 1g.18gb@5" in message  # every instance booked on the device
    _book(engine, "1g.18gb", 6, holder="c@1")  # slices [6,7) overlap nothing
    assert sorted(_held(engine)) == ["1g.18gb@4", "1g.18gb@5", "1g.18gb@6"]


def test_released_and_expired_bookings_free_their_placement(engine: Engine) -> None:
    held = _book(engine, "2g.35gb", 4, lease_s=60.0)
    with pytest.raises(ReservationConflict):
        _book(engine, "1g.18gb", 5, now_s=30)
    _book(engine, "1g.18gb", 5, now_s=61)  # the 2g's lease ended at 60 s
    assert _held(engine, now_s=62) == ["1g.18gb@5"]
    other = _book(engine, "1g.18gb", 6, now_s=62)
    with session_scope(engine) as session:
        release(session, other.id, now=T0 + timedelta(seconds=63))
    assert _held(engine, now_s=64) == ["1g.18gb@5"]
    assert held.mig_instance == "2g.35gb@4"


def test_a_booking_whose_profile_is_unknown_blocks_rather_than_guesses(engine: Engine) -> None:
    with session_scope(engine) as session:  # written by an older catalog, say
        reserve(session, device_id=mig_instance_device(DEVICE, "9g.999gb@2"), holder="old@0", memory_bytes=GIB,
                mig_instance="9g.999gb@2", capacity_memory_bytes=2 * GIB, lease_s=600.0, now=T0)
    with pytest.raises(ReservationConflict, match=r"9g\.999gb@2 \(held by old@0\)"):
        _book(engine, "1g.18gb", 6)


@pytest.mark.parametrize("neighbour", [
    pytest.param("GPU-77C1D2E3", id="other-case"),  # SQLite's LIKE ignores ASCII case
    pytest.param("GPU-77c1d2e", id="prefix-of-the-id"),
    pytest.param("GPU-77c1d2e3/mig:1g.18gb@4", id="an-instance-id-itself"),
])
def test_mig_bookings_lists_only_the_physical_devices_own(engine: Engine, neighbour: str) -> None:
    _book(engine, "1g.18gb", 4, device=neighbour, holder="n@1")
    _book(engine, "1g.18gb", 5)
    assert _held(engine) == ["1g.18gb@5"]
    assert _held(engine, neighbour) == ["1g.18gb@4"]


@pytest.mark.parametrize("device", [
    pytest.param("file:/srv/snap_%_a.yaml", id="like-wildcards"),
    pytest.param("file:/srv/snap\\x/a.yaml", id="backslash"),
])
def test_device_ids_with_like_wildcards_match_only_themselves(engine: Engine, device: str) -> None:
    _book(engine, "1g.18gb", 4, device=device)
    _book(engine, "1g.18gb", 4, device=device.replace("_", "Z").replace("%", "Q").replace("\\", "Y"))
    assert _held(engine, device) == ["1g.18gb@4"]


def test_mig_memory_stays_the_instances_own(engine: Engine) -> None:
    """The physical device's memory bookings do not see MIG instances: an instance's memory is its own."""
    _book(engine, "3g.71gb", 4)
    with session_scope(engine, read_only=True) as session:
        assert active_reservations(session, DEVICE, T0) == []


@pytest.mark.timeout(120)
def test_racing_bookings_never_overlap(store_url: str) -> None:
    """Eight writers at once, each on its own connection, for placements that overlap in pairs: the
    store keeps a set of bookings no two of which share a slice, and refuses the rest."""
    wanted = [("1g.18gb", 4), ("2g.35gb", 4), ("1g.18gb", 5), ("3g.71gb", 4), ("1g.18gb", 6), ("2g.35gb", 6),
              ("1g.18gb", 4), ("1g.18gb", 6)]
    engines = [make_engine(store_url, retry=FAST_RETRY) for _ in wanted]
    gate = threading.Barrier(len(wanted))
    outcome: dict[int, str] = {}

    def book(i: int) -> None:
        profile, start = wanted[i]
        gate.wait()
        try:
            for attempt in range(20):  # SQLite's busy writers: retry the whole transaction
                try:
                    _book(engines[i], profile, start, holder=f"w{i}@1")
                    outcome[i] = "booked"
                    return
                except ReservationConflict:
                    outcome[i] = "conflict"
                    return
                except Exception:
                    if attempt == 19:
                        raise
        except Exception as exc:  # reported below, never lost in the thread
            outcome[i] = f"error {exc}"

    threads = [threading.Thread(target=book, args=(i,)) for i in range(len(wanted))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for e in engines:
        e.dispose()
    assert all(v in ("booked", "conflict") for v in outcome.values()) and len(outcome) == len(wanted), outcome
    engine = make_engine(store_url, retry=FAST_RETRY)
    try:
        held = _held(engine)
    finally:
        engine.dispose()
    spans = []
    for name in held:
        profile, start = name.split("@")
        spans.append(set(range(int(start), int(start) + SLICES[profile])))
    assert all(not (a & b) for i, a in enumerate(spans) for b in spans[i + 1:]), held
    assert len(held) == sum(1 for v in outcome.values() if v == "booked") >= 1
