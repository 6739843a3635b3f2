"""The service's request and response bodies (the OpenAPI document is generated from these).

Profiles and snapshots travel by value (the same JSON as ``canary schema profile|snapshot``) or by
registry reference ``name@version``; the certificate is the CLI's certificate contract unchanged.
Every string and list has a bound, so a request cannot make the service hold unbounded data.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Document = dict[str, Any]
Ref = str

MAX_RESIDENTS = 16

DEVICE_DOC = ("a catalog name (an idle simulated device: 'h100-sxm'), a snapshot registry reference "
              "'name@version', or a snapshot by value (the JSON of `canary schema snapshot`). Live device "
              "references (nvml:N …) are refused: the service never reads a device a request names.")
PROFILE_DOC = ("a profile registry reference 'name@version' (or 'name': its newest version), or a profile by "
               "value (the JSON of `canary schema profile`). A profile by value may not name a command, "
               "endpoint or file: executors and monitors come only from the operator's configuration.")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Request(_Body):
    """A request body: strict, so ``"probe": "yes"`` or ``"seed": "5"`` is a 422 naming the field, never a
    value pydantic guessed (an integer is still accepted where a number belongs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DecisionRequest(_Request):
    device: Ref | Document = Field(description=DEVICE_DOC)
    candidate: Ref | Document = Field(description=PROFILE_DOC)
    residents: list[Ref | Document] = Field(default_factory=list, max_length=MAX_RESIDENTS,
                                            description="profiles added to the device's residents")
    regime: str | None = Field(default=None, max_length=64, pattern=r"^[a-z0-9:.%-]+$",
                               description="timeslice, streams, mps:PCT, mig:PROFILE or green:SMS")
    policy: str | None = Field(default=None, max_length=64, pattern=r"^[a-z0-9_-]+$",
                               description="a policy name from the server's policies/")


class AdmissionRequest(DecisionRequest):
    probe: bool = Field(default=True, description="false: decide from stage 1 and evidence only (never 202)")
    reserve: bool = Field(default=True, description="book the candidate's memory on an admit; false answers "
                          "the same question without booking or storing a certificate")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="seed of the simulated device (simulated only)")


class FeedbackRequest(DecisionRequest):
    resident_name: str = Field(min_length=1, max_length=200)
    slowdown_pct: float | None = Field(
        default=None, gt=0, le=10000, allow_inf_nan=False,
        description="the resident's slowdown production observed, in percent above its latency alone "
                    "(0 < value <= 10000, as `canary feedback --slowdown-pct`); leave it out if production "
                    "did not measure it")


class FeedbackResponse(_Body):
    evidence_id: str
    key: dict[str, str] = Field(description="the pair key the violation was recorded under (resident and candidate "
                                            "versions and shape families, device type, regime)")
    regime_from: str = Field(description="where the regime came from: the body's `regime`, the stored admission "
                                         "of the pair, or (no admission stored) the regime canary chooses")


class Transition(_Body):
    state: str
    at: dt.datetime


ProbeState = Literal["queued", "running", "done", "failed", "cancelled", "aborted"]


class ProbeStatus(_Body):
    """A probe the service owes its callers; ``certificate`` is set when ``state`` is ``done``."""

    id: str
    state: ProbeState
    device_id: str
    pair_digest: str
    waiters: int = Field(description="admission requests sharing this probe")
    cancel_requested: bool
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    updated_at: dt.datetime
    transitions: list[Transition]
    error: str | None
    certificate: dict[str, Any] | None
    note: str | None = Field(default=None, description="set on a cancel's answer: what the cancel will and will "
                             "not do for a probe in this state")


class ProblemDetail(_Body):
    detail: str


class RegistryPut(_Request):
    document: Document
    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^@]+$",
                             description="snapshots only (a profile is stored under its own name)")
    version: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^@]+$",
                                description="snapshots only (a profile is stored under its own version)")


class RegistryEntryOut(_Body):
    kind: str
    name: str
    version: str
    digest: str
    created_at: dt.datetime
    created: bool = False
    document: dict[str, Any] | None = None


class RevokeRequest(_Request):
    reason: str = Field(min_length=1, max_length=2000)


class Health(_Body):
    status: str
    detail: str = ""
