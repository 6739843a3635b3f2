"""Loading one admission question: the files a CLI names, or the form the service queues and logs
(``QueuedRequest``).

A ``Request`` is the device (snapshot + catalog spec, with any ``--resident`` profiles added), the
candidate profile, the policy and the settled regime. Nothing here reads the evidence store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, field_validator

from canary._values import value_methods
from canary.errors import InputError
from canary.hardfit import MigBooking, choose_regime, parse_regime
from canary.policy import Policy
from canary.profile import WorkloadProfile
from canary.regime import Regime
from canary.snapshot import DeviceSnapshot, Resident

if TYPE_CHECKING:
    from canary._model import PairKey
    from canary.backends import ResolvedDevice
    from canary.catalog import DeviceSpec
    from canary.certificate import Finding
    from canary.probe.simlink import SimParams


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
        """What reservations are booked against (``device_id_of``)."""
        return device_id_of(self.device)


def device_id_of(device: ResolvedDevice) -> str:
    """What reservations are booked against for ``device``: the UUID of a live device (or a snapshot
    that names one), else the device reference — ``file:PATH``, ``snapshot:NAME`` (sent to the service),
    ``sim:CATALOG-NAME``. Listing bookings by a DEVICE as decisions take it goes through here too."""
    snap = device.snapshot
    if snap.uuid:
        return snap.uuid
    if device.kind == "file":
        return f"file:{Path(device.ref).resolve()}"
    if device.kind == "published":  # a snapshot sent to the service (canary serve) by value or name
        return f"snapshot:{device.ref}"
    return f"sim:{device.spec.name}"


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
        # The asker's own words: --regime on the command line, the body's field or the pod's annotation.
        chosen, why = (parse_regime(regime) if isinstance(regime, str) else regime), f"given ({regime_field})"
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


def _fresh_until(value: object) -> dt.datetime | None:
    """The one parser of ``FRESH_UNTIL_FIELD``: an ISO time with its time zone (or a date with a zone,
    midnight there), read as ``canary evidence expire --before`` reads one (``parse_time``), or ``None``.
    ``ValueError`` says what is wrong (a time or date without a zone, or no time at all)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{value.isoformat()!r} has no time zone")
        return value
    from canary.units import parse_time  # the one reader of a time an operator writes

    try:
        return parse_time(str(value), field=FRESH_UNTIL_FIELD)
    except InputError as exc:
        raise ValueError(exc.problem) from None


def fresh_until_from_json(data: Mapping[str, object], *, what: str = "queued") -> dt.datetime | None:
    """``FRESH_UNTIL_FIELD`` alone, read from a stored request as ``QueuedRequest.read`` reads it."""
    try:
        return _fresh_until(data.get(FRESH_UNTIL_FIELD))
    except ValueError as exc:
        raise InputError(str(exc), file=f"{what} request", field=FRESH_UNTIL_FIELD) from None


class QueuedDevice(BaseModel):
    """The device a queued request was asked about, by value: how it was named and its snapshot then."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    ref: str
    snapshot: DeviceSnapshot


class QueuedRequest(BaseModel):
    """An admission question as it crosses processes: queued with a probe (``serve_probes``) for another
    server process or a node agent to run, or kept in the admission history (``admission_log``) for
    driver-change revalidation and ``canary warm --from-history``. Documents travel by value, checked
    when the request was accepted; the one name a reader resolves is the policy's.

    ``stored`` is its one writer and ``read`` its one reader. The stored form is the JSON the service
    has always written (``reserve``, ``seed`` and ``evidence_fresh_until`` may be absent), so rows
    written before this model read as they are."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: QueuedDevice
    candidate: WorkloadProfile
    #: Profiles the request adds to the device's residents (``--resident``; a body's ``residents``).
    residents: tuple[WorkloadProfile, ...] = ()
    #: The regime as the request gave it; ``None``: it follows the device (``choose_regime``).
    regime: str | None = None
    policy: str
    #: Book the memory when the probe admits (``False``: evidence warming; nothing is booked).
    reserve: bool = True
    seed: int = 0
    #: Only evidence still fresh at this time counts (``FRESH_UNTIL_FIELD``); ``None``: as of now.
    evidence_fresh_until: dt.datetime | None = None

    @field_validator("evidence_fresh_until", mode="before")
    @classmethod
    def _aware(cls, value: object) -> dt.datetime | None:
        return _fresh_until(value)

    @classmethod
    def of(cls, device: ResolvedDevice, candidate: WorkloadProfile, policy: Policy, *,
           residents: tuple[WorkloadProfile, ...] = (), regime: str | None = None, reserve: bool = True,
           seed: int = 0, fresh_until: dt.datetime | None = None) -> QueuedRequest:
        """The question asked about ``device`` (as resolved, before ``residents`` are added to it)."""
        return cls(device=QueuedDevice(kind=device.kind, ref=device.ref, snapshot=device.snapshot),
                   candidate=candidate, residents=residents, regime=regime, policy=policy.name, reserve=reserve,
                   seed=seed, evidence_fresh_until=fresh_until)

    def stored(self) -> dict[str, Any]:
        """The JSON form kept in the store: the one writer."""
        return self.model_dump(mode="json")

    @classmethod
    def read(cls, data: object, *, what: str = "queued") -> QueuedRequest:
        """A stored request, validated: the one reader. ``InputError`` names ``what`` request and the
        field. The documents inside were checked against the document limits when they were accepted,
        one by one; together they may exceed them, so the limits are not applied again here."""
        from pydantic import ValidationError

        from canary._model import validation_to_input_error

        file = f"{what} request"
        if not isinstance(data, Mapping):
            raise InputError(f"expected a mapping of fields, got {type(data).__name__}", file=file)
        try:
            return cls.model_validate_json(json.dumps(dict(data)))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                raise validation_to_input_error(exc, file) from None
            raise InputError(str(exc), file=file) from None

    def request(self, *, load_policy_fn: Callable[[str], Policy] | None = None) -> Request:
        """The core's ``Request``: the residents added and the regime settled again, as when it was asked."""
        from canary.backends import ResolvedDevice
        from canary.catalog import lookup
        from canary.policy import load_policy

        snap = self.device.snapshot
        device = ResolvedDevice(snapshot=snap, spec=lookup(snap.device_type), ref=self.device.ref,
                                kind=self.device.kind)
        policy = (load_policy_fn or load_policy)(self.policy)
        return build_request(device, self.candidate, policy, extra_residents=self.residents, regime=self.regime)


def request_from_json(
    data: Mapping[str, object], *, what: str = "queued", load_policy_fn: Callable[[str], Policy] | None = None
) -> Request:
    """Rebuild a queued or logged request: ``QueuedRequest.read(data).request()``."""
    return QueuedRequest.read(data, what=what).request(load_policy_fn=load_policy_fn)


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
    from canary._model import PairKey

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
