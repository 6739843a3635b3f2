"""The sim executor and monitor of one device share one link; the link goes with its device."""

from __future__ import annotations

import gc
import weakref

from canary.probe.simlink import link_for


class Device:
    pass


def test_one_link_per_device_and_none_shared_between_devices() -> None:
    a, b = Device(), Device()
    assert link_for(a) is link_for(a)
    assert link_for(a) is not link_for(b)


def test_a_link_is_collected_with_its_device_and_never_inherited() -> None:
    device = Device()
    link = weakref.ref(link_for(device))
    link_for(device).windows = 3
    del device
    gc.collect()
    assert link() is None  # nothing keeps the link (or the device) alive
    # A new device, whatever address it gets, starts with a fresh link.
    assert all(link_for(Device()).windows == 0 for _ in range(50))


def test_the_simulated_device_of_a_probe_holds_the_resident_it_watches() -> None:
    from canary.admission import load_request
    from canary.probe.simlink import simulated_device
    from canary.sim import SimDevice
    from tests.support.paths import EXAMPLES

    req = load_request(str(EXAMPLES / "snapshots" / "g-nccl-mps-room.yaml"),
                       str(EXAMPLES / "profiles" / "embedding-service.yaml"))
    device, handle = simulated_device(req.snapshot, req.spec, seed=3, regime=req.regime, params=None,
                                      resident="comms")
    assert isinstance(device, SimDevice)
    assert handle is not None and handle.startswith("resident:comms#") and handle in device.handles()
    _, none = simulated_device(req.snapshot, req.spec, seed=3, regime=req.regime, params=None,
                               resident="not-there")
    assert none is None
