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
