"""The profile and snapshot registry: put (``registry_document``: an entry holds only what a request
may send), list, get. Entries are immutable: a different document under a taken name@version is 409."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends

from canary.admission import utcnow
from canary.errors import InputError
from canary.serve import schemas as S
from canary.serve.auth import HttpProblem
from canary.serve.deps import ERRORS, PROBLEM, Svc, require
from canary.serve.resolve import registry_document
from evidence_store.service import registry

router = APIRouter(tags=["registry"])


def _entry(body: S.RegistryPut, kind: str) -> tuple[str, str, dict[str, Any]]:
    """Name, version and document of a put (blocking: validation); ``InputError`` names the field."""
    from canary._model import validate_document
    from canary.profile import WorkloadProfile
    from canary.snapshot import DeviceSnapshot

    if kind == "profile":
        profile = validate_document(WorkloadProfile, body.document, file="document")
        return profile.name, profile.version, registry_document(profile, "document")
    snap = validate_document(DeviceSnapshot, body.document, file="document")
    if body.name is None or body.version is None:
        raise InputError("a snapshot needs a name and a version", field="name")
    return body.name, body.version, registry_document(snap, "document")


def _routes(kind: str, plural: str) -> None:
    @router.post(f"/v1/{plural}", dependencies=[Depends(require("admin"))], response_model=S.RegistryEntryOut,
                 responses={409: PROBLEM, **ERRORS}, name=f"put_{kind}", summary=f"Store a {kind} under name@version")
    async def put(body: S.RegistryPut, svc: Svc) -> S.RegistryEntryOut:
        def work() -> Any:
            name, version, document = _entry(body, kind)
            return svc.db("registry_put", lambda s: registry.put(
                s, kind=kind, name=name, version=version, document=document, now=utcnow()))

        try:
            entry, created = await anyio.to_thread.run_sync(work)
        except registry.RegistryConflict as exc:
            raise HttpProblem(409, str(exc)) from None
        return S.RegistryEntryOut(kind=entry.kind, name=entry.name, version=entry.version, digest=entry.digest,
                                  created_at=entry.created_at, created=created)

    @router.get(f"/v1/{plural}", dependencies=[Depends(require("read"))], response_model=list[S.RegistryEntryOut],
                responses=ERRORS, name=f"list_{kind}s")
    async def list_all(svc: Svc) -> list[S.RegistryEntryOut]:
        entries = await anyio.to_thread.run_sync(
            lambda: svc.db("registry_list", lambda s: registry.list_entries(s, kind=kind), read_only=True))
        return [S.RegistryEntryOut(kind=e.kind, name=e.name, version=e.version, digest=e.digest,
                                   created_at=e.created_at) for e in entries]

    @router.get(f"/v1/{plural}/{{name}}/{{version}}", dependencies=[Depends(require("read"))],
                response_model=S.RegistryEntryOut, responses={404: PROBLEM, **ERRORS}, name=f"get_{kind}")
    async def get_one(name: str, version: str, svc: Svc) -> S.RegistryEntryOut:
        e = await anyio.to_thread.run_sync(lambda: svc.db("registry_get", lambda s: registry.get(
            s, kind=kind, name=name, version=version), read_only=True))
        if e is None:
            raise HttpProblem(404, f"no {kind} {name}@{version}")
        return S.RegistryEntryOut(kind=e.kind, name=e.name, version=e.version, digest=e.digest,
                                  created_at=e.created_at, document=e.document)


_routes("profile", "profiles")
_routes("snapshot", "snapshots")
