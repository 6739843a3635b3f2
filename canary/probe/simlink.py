"""What the sim executor and the sim monitor share about one simulated device.

The monitor advances the simulated clock (``run_window``); the executor places the candidate before
an on-window and meters its requests from the same window. ``link_for(device)`` returns the one link
of a device, so the two halves built separately (``make_executor``/``make_monitor``) meet.
``simulated_device`` builds the device a sim probe runs on (admission's one door to the simulator).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from canary.catalog import DeviceSpec
    from canary.regime import Regime
    from canary.sim import SimDevice
    from canary.sim.model import ContentionParams
    from canary.snapshot import DeviceSnapshot

    #: The simulator's contention parameters, as a request carries them to a simulated probe
    #: (``canary.admission.Request.sim_params``) without the decision core importing the simulator.
    SimParams: TypeAlias = ContentionParams


@dataclass
class SimLink:
    last_window: Any | None = None
    windows: int = 0
    candidate_handles: list[str] = field(default_factory=list)


# device → its link. Weak keys: a link lives exactly as long as its device, so a warm job probing many
# devices does not keep them all, and a new device can never inherit a collected one's link.
_LINKS: weakref.WeakKeyDictionary[Any, SimLink] = weakref.WeakKeyDictionary()


def link_for(device: Any) -> SimLink:
    """The link of ``device`` (created on first use; keyed by the device object itself, which must
    be hashable by identity and weak-referenceable, as ``SimDevice`` is)."""
    link = _LINKS.get(device)
    if link is None:
        link = _LINKS[device] = SimLink()
    return link


def simulated_device(
    snapshot: DeviceSnapshot,
    spec: DeviceSpec,
    *,
    seed: int,
    regime: Regime,
    params: SimParams | None,
    resident: str,
) -> tuple[SimDevice, str | None]:
    """The simulated device a sim probe runs on — built from the snapshot under ``regime`` with the
    simulator's ``params`` (``None``: its defaults) — and the handle of ``resident`` on it (``None``
    when the device does not hold it). The sim executor and monitor are then built over this device
    (``make_executor``/``make_monitor``); admission asks for it here so that it never imports the
    simulator itself."""
    from canary.sim import SimDevice

    device = SimDevice.from_snapshot(snapshot, spec, seed=seed, regime=regime, params=params)
    handle = next((h for h in device.handles() if h.startswith(f"resident:{resident}#")), None)
    return device, handle
