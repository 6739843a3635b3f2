"""What the sim executor and the sim monitor share about one simulated device.

The monitor advances the simulated clock (``run_window``); the executor places the candidate before
an on-window and meters its requests from the same window. ``link_for(device)`` returns the one link
of a device, so the two halves built separately (``make_executor``/``make_monitor``) meet.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimLink:
    last_window: Any | None = None
    windows: int = 0
    candidate_handles: list[str] = field(default_factory=list)


# id(device) → (a weak reference to the device, its link); the weak reference tells a live device
# from a new one that got the id of a collected device, and lets devices be collected.
_LINKS: dict[int, tuple[weakref.ref[Any], SimLink]] = {}


def link_for(device: Any) -> SimLink:
    """The link of ``device`` (created on first use; keyed by identity, checked against reuse of ids)."""
    key = id(device)
    entry = _LINKS.get(key)
    if entry is not None and entry[0]() is device:
        return entry[1]
    link = SimLink()
    _LINKS[key] = (weakref.ref(device), link)
    # Forget the link with its device, so a warm job probing many devices does not keep them all.
    weakref.finalize(device, _LINKS.pop, key, None)
    return link
