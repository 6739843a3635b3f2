"""Decision request bodies prepared once (``canary.serve.decide``): ``Prepared`` is a body validated and
resolved — everything its decisions need but the store and the clock — and ``PreparedBodies`` keeps
those whose resolution cannot change, by the SHA-256 of their exact bytes (one per decision route)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from canary.serve.resolve import Resolved, cached_policy

if TYPE_CHECKING:
    from canary._model import PairKey
    from canary.admission.request import Request as Question
    from canary.estimate import Estimator


#: Most bodies ``PreparedBodies`` keeps per route; when full it starts over rather than grow.
PREPARED_BODIES = 1024


@dataclass(frozen=True, eq=False)
class Prepared:
    """One request body, validated and resolved: what every decision on it needs but the store and the
    clock."""

    resolved: Resolved
    keys: tuple[PairKey | None, ...]  # each resident's pair key with the candidate (None: unprofiled)
    digests: tuple[str, ...]  # the keyed residents' key digests: the decision read's parameters
    probe: bool
    reserve: bool
    history: dict[str, Any] | None  # the admission history's row, but its verdict and time
    kept: bool  # its resolution cannot change: PreparedBodies may keep it
    # the policy's estimators, loaded (an admission that may probe, under a policy that names some):
    # consulted only when a pair has no usable evidence (canary.admission.flow.consult_estimators)
    estimators: tuple[Estimator, ...] = ()

    @property
    def request(self) -> Question:
        return self.resolved.request

    def current(self) -> bool:
        """Whether the resolution still holds: the policy file it was decided under is unchanged (the
        documents cannot change; see the module's docstring)."""
        policy = self.resolved.request.policy
        return cached_policy(policy.name) is policy


def pinned(value: Any, *, device: bool = False) -> bool:
    """A body part that resolves to the same document whenever it is sent: a document by value, a
    ``name@version`` registry reference, or (a device) a catalog name. A bare registry name means the
    newest version, and ``agent:`` devices are what node agents publish now: neither is pinned."""
    if not isinstance(value, str):
        return True
    name, at, version = value.partition("@")
    if at:
        return bool(name and version)
    return device and not value.startswith("agent:")


class PreparedBodies:
    """Prepared request bodies by the SHA-256 of their exact bytes (one instance per route)."""

    def __init__(self, size: int = PREPARED_BODIES) -> None:
        self._size = size
        self._entries: dict[bytes, Prepared] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, raw: bytes) -> Prepared | None:
        """The prepared body of exactly these bytes, if kept and still current."""
        prepared = self._entries.get(hashlib.sha256(raw).digest())
        if prepared is None or not prepared.current():
            return None
        return prepared

    def put(self, raw: bytes, prepared: Prepared) -> bool:
        """Keep ``prepared`` for these bytes when its resolution cannot change; whether it was kept."""
        if not prepared.kept:
            return False
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[hashlib.sha256(raw).digest()] = prepared
        return True
