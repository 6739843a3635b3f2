"""Loading one admission question: the files a CLI names, or the JSON form the service queues and logs.

A ``Request`` is the device (snapshot + catalog spec, with any ``--resident`` profiles added), the
candidate profile, the policy and the settled regime. Nothing here reads the evidence store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.errors import InputError
from canary.hardfit import MigBooking, choose_regime, parse_regime
from canary.policy import Policy
from canary.profile import WorkloadProfile
from canary.regime import Regime
from canary.snapshot import DeviceSnapshot, Resident

if TYPE_CHECKING:
    from canary.backends import ResolvedDevice
    from canary.catalog import DeviceSpec
    from canary.certificate import Finding
    from canary.probe.simlink import SimParams
    from evidence_store.keys import PairKey


@value_methods
@dataclass(frozen=True, eq=False, repr=False)
class Request:
    """One admission question, fully loaded and validated."""

    device: ResolvedDevice
    candidate: WorkloadProfile
    policy: Policy
    regime: Regime
    regime_chosen_by: str
    #: Simulator parameters for a simulated probe (``None``: the simulator's defaults); set by
    #: ``canary bench`` to replay measured pairs under their calibrated regime. Admission only passes
    #: them on to the sim adapters (``canary.probe.simlink``); it never imports the simulator.
    sim_params: SimParams | None = None
    #: Whether the caller gave the regime (``--regime``); else it follows the device (``choose_regime``)
    #: and is chosen again when the MIG instances others booked are known (``with_mig_bookings``).
    regime_given: bool = False
    #: MIG instances other admissions booked on this device (evidence-store reservations), which stage 1
    #: counts as taken; empty until read (``with_mig_bookings``).
    mig_booked: tuple[MigBooking, ...] = ()
    #: A chosen MIG regime the candidate fits none of its accepted profiles in: the finding that rules out
    #: each profile (``RegimeChoice.mig_refused``); empty otherwise.
    mig_refused: tuple[Finding, ...] = ()

    @property
    def snapshot(self) -> DeviceSnapshot:
        return self.device.snapshot

    @property
    def spec(self) -> DeviceSpec:
        return self.device.spec

    @property
    def device_id(self) -> str:
        """What reservations are booked against: the UUID of a live device, else the device reference."""
        snap = self.snapshot
        if snap.uuid:
            return snap.uuid
        if self.device.kind == "file":
            return f"file:{Path(self.device.ref).resolve()}"
        if self.device.kind == "published":  # a snapshot sent to the service (canary serve) by value or name
            return f"snapshot:{self.device.ref}"
        return f"sim:{self.spec.name}"


def build_request(
    device: ResolvedDevice,
    candidate: WorkloadProfile,
    policy: Policy,
    *,
    extra_residents: tuple[WorkloadProfile, ...] = (),
    regime: Regime | str | None = None,
    regime_field: str = "regime",
) -> Request:
    """Add ``--resident`` profiles to the device and settle the regime (text is parsed here; an
    NVIDIA-only regime on an AMD device is an ``InputError`` naming ``regime_field``)."""
    snap = device.snapshot
    if extra_residents:
        names = {r.name for r in snap.residents}
        added: list[Resident] = []
        for profile in extra_residents:
            name = profile.name if profile.name not in names else f"{profile.name}#{len(names) + len(added)}"
            added.append(Resident(name=name, profile=profile))
        snap = snap.model_copy(update={"residents": (*snap.residents, *added)})
        from canary.backends import ResolvedDevice

        device = ResolvedDevice(snapshot=snap, spec=device.spec, ref=device.ref, kind=device.kind)
    if regime is not None:
        chosen, why = (parse_regime(regime) if isinstance(regime, str) else regime), "given with --regime"
        if device.spec.vendor == "amd" and chosen.kind in ("mig", "mps", "green"):
            raise InputError(f"regime {chosen} is NVIDIA-only; {device.spec.name} is an AMD device", field=regime_field)
        return Request(device=device, candidate=candidate, policy=policy, regime=chosen, regime_chosen_by=why,
                       regime_given=True)
    choice = choose_regime(snap, device.spec, candidate, policy)
    return Request(device=device, candidate=candidate, policy=policy, regime=choice.regime,
                   regime_chosen_by=choice.why, mig_refused=choice.mig_refused)


def with_mig_bookings(req: Request, booked: tuple[MigBooking, ...]) -> Request:
    """``req`` as of the MIG instances other admissions booked on its device: stage 1 counts them as
    taken, and a regime that followed the device (not given) is chosen again with them, so a candidate
    whose first choice is booked full moves to another profile it accepts. ``req`` itself when the
    bookings are the ones it already has."""
    if booked == req.mig_booked:
        return req
    if req.regime_given or not req.snapshot.mig.enabled:
        return dataclasses.replace(req, mig_booked=booked)
    choice = choose_regime(req.snapshot, req.spec, req.candidate, req.policy, mig_booked=booked)
    return dataclasses.replace(req, regime=choice.regime, regime_chosen_by=choice.why,
                               mig_refused=choice.mig_refused, mig_booked=booked)


FRESH_UNTIL_FIELD = "evidence_fresh_until"
"""A queued request's optional field: the ISO time until which its evidence must stay fresh (the
nightly warm job's window); the probe runner passes it to ``admit_async(evidence_as_of=…)``."""


def fresh_until_from_json(data: Mapping[str, object], *, what: str = "queued") -> dt.datetime | None:
    """``FRESH_UNTIL_FIELD`` of a queued request (timezone-aware), or ``None`` when absent."""
    value = data.get(FRESH_UNTIL_FIELD)
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(str(value))
    except ValueError:
        raise InputError(f"{value!r} is not an ISO time", file=f"{what} request", field=FRESH_UNTIL_FIELD) from None
    if when.tzinfo is None:
        raise InputError(f"{value!r} has no time zone", file=f"{what} request", field=FRESH_UNTIL_FIELD)
    return when


def request_from_json(
    data: Mapping[str, object], *, what: str = "queued", load_policy_fn: Callable[[str], Policy] | None = None
) -> Request:
    """Rebuild a queued or logged request (documents by value, checked when they were accepted) — the one
    reader of the JSON form the service queues and logs. ``what`` names the source in error messages."""
    from canary._model import validate_document
    from canary.backends import ResolvedDevice
    from canary.catalog import lookup
    from canary.policy import load_policy

    dev = data["device"]
    assert isinstance(dev, Mapping)
    snap = validate_document(DeviceSnapshot, dev["snapshot"], file=f"{what} device")
    device = ResolvedDevice(snapshot=snap, spec=lookup(snap.device_type), ref=dev["ref"], kind=dev["kind"])
    candidate = validate_document(WorkloadProfile, data["candidate"], file=f"{what} candidate")
    residents_json = data["residents"]
    assert isinstance(residents_json, list | tuple)
    residents = tuple(validate_document(WorkloadProfile, r, file=f"{what} resident") for r in residents_json)
    policy_ref, regime = data["policy"], data["regime"]
    assert isinstance(policy_ref, str) and (regime is None or isinstance(regime, str))
    policy = (load_policy_fn or load_policy)(policy_ref)
    return build_request(device, candidate, policy, extra_residents=residents, regime=regime)


def load_request(
    device_ref: str,
    candidate_path: str,
    *,
    resident_paths: tuple[str, ...] = (),
    regime: str | None = None,
    policy_ref: str | None = None,
) -> Request:
    """Load every file a CLI admission names; ``InputError`` names the file and field."""
    from canary.backends import resolve_device
    from canary.policy import load_policy
    from canary.profile import load_profile

    policy = load_policy(policy_ref)
    candidate = load_profile(candidate_path)
    residents = tuple(load_profile(p) for p in resident_paths)
    device = resolve_device(device_ref)
    chosen = parse_regime(regime) if regime is not None else None
    return build_request(device, candidate, policy, extra_residents=residents, regime=chosen, regime_field="--regime")


def pair_key(req: Request, resident: Resident) -> PairKey | None:
    """The evidence key of (``resident``, the candidate) on this device and regime; ``None`` for a
    resident without a profile (nothing to key evidence by)."""
    from evidence_store.keys import PairKey

    if resident.profile is None:
        return None
    return PairKey(
        resident_version=resident.profile.version,
        resident_shape_family=resident.profile.shape_family,
        candidate_version=req.candidate.version,
        candidate_shape_family=req.candidate.shape_family,
        device_type=req.spec.name,
        regime=str(req.regime),
    )
