"""Resource regimes and MIG placements: the one vocabulary stage 1, admission and the simulator share.

A regime is how a pair shares a device: ``timeslice``, ``streams``, ``mps:PCT``, ``mig:PROFILE`` or
``green:SMS``. :func:`parse_regime` is the only parser of that text; what a given device can do in a
regime (does the MIG profile exist, how SMs are partitioned) is for the caller to judge: stage 1
reports it as findings, the simulator refuses what it cannot model.

A MIG GPU instance sits at a *placement*: a start and a size in memory-slice units, one of the
placements ``nvidia-smi mig -lgipp`` lists for its profile; two instances may not share a memory
slice (NVIDIA MIG User Guide, "Placement"). :func:`free_mig_placement` is the only search for a free
one. An instance is named ``PROFILE@START`` (``3g.40gb@4``) where its place matters
(:func:`parse_mig_instance`).

Pure: no IO, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from canary._values import value_methods
from canary.errors import InputError

if TYPE_CHECKING:
    from canary.catalog import MigPlacement, MigProfile

RegimeKind = Literal["timeslice", "streams", "mps", "mig", "green"]
REGIME_KINDS: tuple[RegimeKind, ...] = ("timeslice", "streams", "mps", "mig", "green")
_WHOLE = re.compile(r"[0-9]+")


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class Regime:
    """A parsed regime. Exactly the argument of its kind is set (``mps_pct``, ``mig_profile`` or
    ``green_sms``); ``str()`` gives back the canonical text."""

    kind: RegimeKind
    mps_pct: int | None = None
    mig_profile: str | None = None
    green_sms: int | None = None

    def __str__(self) -> str:
        if self.kind == "mps":
            return f"mps:{self.mps_pct}"
        if self.kind == "mig":
            return f"mig:{self.mig_profile}"
        if self.kind == "green":
            return f"green:{self.green_sms}"
        return self.kind

    @property
    def concurrent(self) -> bool:
        """Whether kernels of resident and candidate may run on the same SMs at the same time."""
        return self.kind in ("mps", "streams")


def _whole(arg: str) -> int | None:
    """An unsigned decimal number (no sign, no underscores, no spaces), else ``None``."""
    return int(arg) if _WHOLE.fullmatch(arg) else None


def parse_regime(text: str, *, field: str = "--regime") -> Regime:
    """Parse ``timeslice``, ``streams``, ``mps:50``, ``mig:3g.71gb``, ``green:32``.

    The kind is case-insensitive; numbers are plain decimal digits. ``InputError`` (naming ``field``)
    says what is wrong."""
    raw = text.strip()
    kind, _, arg = raw.partition(":")
    kind = kind.lower()
    if kind not in REGIME_KINDS:
        raise InputError(
            f"unknown regime '{raw}' (expected timeslice, streams, mps:PCT, mig:PROFILE or green:SMS)", field=field
        )
    if kind in ("timeslice", "streams"):
        if arg:
            raise InputError(f"regime '{kind}' takes no argument, got '{raw}'", field=field)
        return Regime("streams" if kind == "streams" else "timeslice")
    arg = arg.strip()
    if not arg:
        raise InputError(f"regime '{kind}' needs an argument, e.g. mps:50, mig:1g.18gb, green:32", field=field)
    if kind == "mig":
        return Regime("mig", mig_profile=arg)
    number = _whole(arg)
    if kind == "mps":
        if number is None or not 1 <= number <= 100:
            raise InputError(f"regime '{raw}': the MPS active-thread percentage must be a whole number 1..100",
                             field=field)
        return Regime("mps", mps_pct=number)
    if number is None or number < 1:
        raise InputError(f"regime '{raw}': a green-context partition needs a whole number of SMs, at least 1",
                         field=field)
    return Regime("green", green_sms=number)


class SliceRange(Protocol):
    """Anything that occupies memory slices ``[start, start + size)``: a catalog placement, an
    instance in a snapshot, a :class:`GpuInstancePlacement`."""

    @property
    def start(self) -> int: ...

    @property
    def size(self) -> int: ...


def free_mig_placement(
    profile: MigProfile, taken: Iterable[SliceRange], *, start: int | None = None
) -> MigPlacement | None:
    """The first of ``profile``'s placements (catalog order) that shares no memory slice with
    ``taken``, or ``None``. With ``start``, only the placement beginning there is considered."""
    occupied = [(t.start, t.start + t.size) for t in taken]
    for placement in profile.placements:
        if start is not None and placement.start != start:
            continue
        if all(placement.end <= lo or placement.start >= hi for lo, hi in occupied):
            return placement
    return None


def parse_mig_instance(text: str, *, field: str = "mig_instance") -> tuple[str, int | None]:
    """``PROFILE`` or ``PROFILE@START`` → (profile, start or ``None``)."""
    profile, sep, start_text = text.strip().partition("@")
    if not profile.strip():
        raise InputError(f"MIG instance {text!r} names no profile", field=field)
    if not sep:
        return profile.strip(), None
    start = _whole(start_text.strip())
    if start is None:
        raise InputError(f"MIG instance {text!r}: the start after '@' must be a memory-slice number", field=field)
    return profile.strip(), start
