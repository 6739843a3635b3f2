"""The service's routes, one ``APIRouter`` per area over the typed ``Service`` (``canary.serve.deps``).
``ROUTERS`` is the order the application includes them in: the router tries routes in order, so the
decisions, the ones asked most, come first."""

from __future__ import annotations

from fastapi import APIRouter

from canary.serve.routes import (
                                  decisions,
                                  evidence,
                                  extender,
                                  fleet,
                                  operations,
                                  probes,
                                  registry,
                                  reservations,
)

ROUTERS: tuple[APIRouter, ...] = (decisions.router, operations.router, probes.router, evidence.router,
                                  reservations.router, registry.router, extender.router, fleet.router)
