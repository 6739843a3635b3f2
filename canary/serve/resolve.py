"""Turn a request body into the decision core's ``Request`` — without trusting it.

A request may name: a catalog device, a registry entry (``name@version``), or carry a profile or
snapshot by value. It may never make the service read a file, open a device, fetch a URL or run a
command: strings are looked up in the catalog or the registry only, and a profile whose ``canary``
section names a command, an endpoint, a metrics URL or a cubin is refused (those come from operator
configuration). The resolved documents are kept by value (``request_json``) so a queued probe can be
run later by any process — another server worker, or a node agent — exactly as it was asked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel

from canary._model import validate_document
from canary.admission import Request, build_request
from canary.admission.request import QueuedRequest
from canary.errors import InputError
from canary.fleetwork.published import PublishedGet
from canary.policy import Policy, load_policy
from canary.profile import WorkloadProfile
from canary.serve.schemas import DecisionRequest
from canary.snapshot import DeviceSnapshot

M = TypeVar("M", bound=BaseModel)
RegistryGet = Callable[[str, str, str | None], dict[str, Any] | None]  # (kind, name, version) → document

_UNTRUSTED_CANARY_FIELDS = ("command", "workdir", "endpoint", "metrics_url", "cubin", "kernel", "request_body")


@dataclass(frozen=True)
class Resolved:
    request: Request
    queued: QueuedRequest  # the question as another process runs it (a queued probe) or history keeps it
    request_json: dict[str, Any]  # ``queued.stored()``, made once


def _at(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def check_trust(profile: WorkloadProfile, field: str, *, file: str | None = None) -> WorkloadProfile:
    """``profile`` as a request may send it: its probe only simulated, naming no command, file or URL
    (those come only from operator configuration); ``InputError`` names ``file`` and the field under
    ``field``."""
    spec = profile.canary
    if spec is None:
        return profile
    if spec.executor != "sim" or spec.monitor != "sim":
        raise InputError(f"executor {spec.executor!r} / monitor {spec.monitor!r}: a request may ask only for "
                         "simulated probes; real executors and monitors come from operator configuration",
                         file=file, field=_at(field, "canary"))
    for name in _UNTRUSTED_CANARY_FIELDS:
        if getattr(spec, name) is not None:
            raise InputError("a request may not name a command, file or URL; those come only from operator "
                             "configuration", file=file, field=_at(field, f"canary.{name}"))
    return profile


def registry_document(document: WorkloadProfile | DeviceSnapshot, field: str = "", *,
                      file: str | None = None) -> dict[str, Any]:
    """The registry-put rule (``POST /v1/profiles``, ``POST /v1/snapshots``, ``canary profiles put``): a
    request names registry entries, so an entry holds only what a request may send — a profile, and
    each resident profile of a snapshot, passes ``check_trust``. Returns the JSON to store."""
    if isinstance(document, WorkloadProfile):
        check_trust(document, field, file=file)
    else:
        for i, resident in enumerate(document.residents):
            if resident.profile is not None:
                check_trust(resident.profile, _at(field, f"residents[{i}].profile"), file=file)
    return document.model_dump(mode="json")


#: Most documents ``validated`` keeps; when full it starts over rather than grow.
DOCUMENT_CACHE_SIZE = 1024
_documents: dict[tuple[type[Any], bytes], Any] = {}
_inline_refs: dict[bytes, str] = {}


def _content_digest(data: Any) -> bytes | None:
    """SHA-256 of the exact JSON ``validate_document`` validates ``data`` as; ``None`` when it is not
    plain JSON data (such data is validated every time, and refused with its own error)."""
    try:
        return hashlib.sha256(json.dumps(data).encode()).digest()
    except (TypeError, ValueError, RecursionError):
        return None


def validated(model: type[M], data: Any, *, file: str) -> tuple[M, bytes | None]:
    """``validate_document(model, data)``, and the digest of ``data``'s content.

    Validation is a pure function of the document's content and models are frozen, so a document
    validated once is kept under the digest of its exact content (its JSON text): the same document
    sent again — a scheduler sends the same few on every request — skips the checks and pydantic; a
    document that differs in any byte is validated anew. A document that fails is never kept, so it
    fails every time with its own error."""
    digest = _content_digest(data)
    if digest is None:
        return validate_document(model, data, file=file), None
    key = (model, digest)
    hit = _documents.get(key)
    if hit is None:
        hit = validate_document(model, data, file=file)
        if len(_documents) >= DOCUMENT_CACHE_SIZE:
            _documents.clear()
        _documents[key] = hit
    return hit, digest


def _inline_ref(snap: DeviceSnapshot, digest: bytes | None) -> str:
    """``inline:`` and the start of the SHA-256 of the snapshot's canonical JSON (kept per content)."""
    ref = None if digest is None else _inline_refs.get(digest)
    if ref is None:
        canonical = hashlib.sha256(json.dumps(snap.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
        ref = f"inline:{canonical[:16]}"
        if digest is not None:
            if len(_inline_refs) >= DOCUMENT_CACHE_SIZE:
                _inline_refs.clear()
            _inline_refs[digest] = ref
    return ref


def _profile(value: str | dict[str, Any], field: str, registry: RegistryGet) -> WorkloadProfile:
    if isinstance(value, str):
        name, _, version = value.partition("@")
        if not name or ("@" in value and not version):
            raise InputError(f"not a registry reference {value!r}: use name@version", field=field)
        doc = registry("profile", name, version or None)
        if doc is None:
            raise InputError(f"no profile {value!r} in the registry (canary profiles put FILE)", field=field)
        return check_trust(validated(WorkloadProfile, doc, file=f"registry profile {value}")[0], field)
    return check_trust(validated(WorkloadProfile, value, file=field)[0], field)


def _device(value: str | dict[str, Any], registry: RegistryGet) -> Any:
    from canary.backends import ResolvedDevice, idle_snapshot
    from canary.catalog import lookup

    if isinstance(value, str):
        if "@" in value:
            name, _, version = value.partition("@")
            doc = registry("snapshot", name, version or None)
            if doc is None:
                raise InputError(f"no snapshot {value!r} in the registry (canary profiles put --snapshot FILE)",
                                 field="device")
            snap = validated(DeviceSnapshot, doc, file=f"registry snapshot {value}")[0]
            ref = value
        else:
            if ":" in value or "/" in value or "\\" in value:
                raise InputError(f"{value!r}: a request names a catalog device, a snapshot name@version or a "
                                 "snapshot by value; the service never opens a device or file a request names",
                                 field="device")
            spec = lookup(value)
            return ResolvedDevice(snapshot=idle_snapshot(spec), spec=spec, ref=value, kind="catalog")
    else:
        snap, digest = validated(DeviceSnapshot, value, file="device")
        ref = _inline_ref(snap, digest)
    for i, resident in enumerate(snap.residents):
        if resident.profile is not None:
            check_trust(resident.profile, f"device.residents[{i}].profile")
    try:
        spec = lookup(snap.device_type)
    except InputError as exc:
        raise InputError(exc.problem, field="device.device_type") from None
    return ResolvedDevice(snapshot=snap, spec=spec, ref=ref, kind="published")


def booking_device_id(value: str, registry: RegistryGet, *, policy: Policy,
                      published: PublishedGet | None = None) -> str:
    """The device id bookings on the DEVICE a decision body names are made against (a catalog name or
    alias, a snapshot ``name@version``, ``agent:NODE/NAME``): ``device_id_of`` the device resolved
    from it, as a request's, so ``h100`` finds the bookings held under ``sim:h100-sxm``. ``InputError``
    (field ``device``) when it names no device."""
    from canary.admission.request import device_id_of

    if value.startswith("agent:") and published is not None:
        from canary.fleetwork.published import published_device

        device = published_device(value, published, policy)
    else:
        device = _device(value, registry)
    return device_id_of(device)


def cached_policy(name: str) -> Policy:
    """``load_policy(name)``, parsed once per file version (policies are read on every decision)."""
    from canary.policy import POLICY_DIR

    path = POLICY_DIR / f"{name}.yaml"
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return load_policy(name)  # says which policies exist
    return _policy(name, mtime)


@lru_cache(maxsize=64)
def _policy(name: str, mtime_ns: int) -> Policy:
    return load_policy(name)


def resolve(body: DecisionRequest, registry: RegistryGet, *, default_policy: str, reserve: bool = True,
            seed: int = 0, published: PublishedGet | None = None) -> Resolved:
    """The core's ``Request`` for this body; ``InputError`` names the field and the problem.
    ``published`` looks up devices node agents publish (``agent:NODE/NAME``); ``reserve`` and ``seed``
    are the admission's, kept with the queued form."""
    policy = cached_policy(body.policy or default_policy)
    candidate = _profile(body.candidate, "candidate", registry)
    residents = tuple(_profile(r, f"residents[{i}]", registry) for i, r in enumerate(body.residents))
    if isinstance(body.device, str) and body.device.startswith("agent:") and published is not None:
        from canary.fleetwork.published import published_device

        device = published_device(body.device, published, policy)
    else:
        device = _device(body.device, registry)
    try:  # build_request parses the regime and refuses an NVIDIA-only one on an AMD device
        req = build_request(device, candidate, policy, extra_residents=residents, regime=body.regime)
    except ValueError as exc:
        raise InputError(str(exc), field="regime") from None
    queued = QueuedRequest.of(device, candidate, policy, residents=residents, regime=body.regime, reserve=reserve,
                              seed=seed)
    return Resolved(req, queued, queued.stored())
